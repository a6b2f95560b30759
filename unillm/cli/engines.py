"""``unillm engines``: which features each installed adapter declares."""

from __future__ import annotations

import argparse
import json

HELP = "capability table of the installed adapters"
DESCRIPTION = "Print which features each installed engine honours."


def add_arguments(engines: argparse.ArgumentParser) -> None:
    """Add the arguments (and the handler) of ``unillm engines`` to its parser."""
    engines.add_argument("--json", action="store_true", help="machine-readable output")
    engines.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Print the capability table (or JSON) of every installed adapter, one column per mode."""
    from unillm.adapter.registry import get_adapter, installed_engines
    from unillm.capabilities import Feature

    names = installed_engines()
    columns = []  # (json key, column label, capabilities): one per engine mode (e.g. MLX in-process)
    for n in names:
        adapter = get_adapter(n)
        for i, (label, version) in enumerate(adapter.modes().items()):
            columns.append((n if i == 0 else f"{n} ({label})", label, adapter.capabilities(version)))
    if args.json:
        print(
            json.dumps(
                {key: {f.value: c.support(f).model_dump() for f in Feature} for key, _, c in columns},
                indent=2,
            )
        )
        return 0
    if not names:
        print("no unillm adapters installed (pip install 'unillm-sdk[vllm]')")
        return 0
    marks = {"native": "yes", "emulated": "unillm", "no": "-"}
    width = max(len(f.value) for f in Feature)
    print("feature".ljust(width), *(label.ljust(max(8, len(label))) for _, label, _ in columns))
    for f in Feature:
        print(
            f.value.ljust(width),
            *(marks[c.support(f).level].ljust(max(8, len(label))) for _, label, c in columns),
        )
    print("\nyes = the engine does it; unillm = unillm provides it; - = refused before sending")
    return 0
