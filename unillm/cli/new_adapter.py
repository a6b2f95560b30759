"""``unillm new-adapter NAME``: write a working adapter package to start a new engine from."""

from __future__ import annotations

import argparse
from pathlib import Path

HELP = "write a new engine's adapter package (tests and docs page included)"
DESCRIPTION = (
    "Write adapters/NAME/: the distribution unillm-NAME with its entry point and "
    "dev extra, an Adapter subclass with its capability table and launch command, tests "
    "(the conformance kit, a launch with a fake engine process) and a README. It passes its "
    "tests as written; then make it the engine's own (docs/adapters.md). No core file changes."
)


def add_arguments(new: argparse.ArgumentParser) -> None:
    """Add the arguments (and the handler) of ``unillm new-adapter`` to its parser."""
    new.add_argument("name", help="the engine's name: lower case letters, digits and _ (e.g. lmdeploy)")
    new.add_argument(
        "--dir", default="adapters", help="the adapters folder to write into (default: adapters)"
    )
    new.add_argument("--display-name", help="the engine's label, e.g. LMDeploy (default: NAME)")
    new.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Write the package and say what to do next."""
    from unillm.cli.adapter_template import write_adapter

    written = write_adapter(args.name, Path(args.dir), args.display_name)
    for path in written:
        print(f"wrote {path}")
    folder = Path(args.dir) / args.name
    print(f"\nnext: pip install -e '{folder}[dev]' && pytest {folder}/tests   (or ./run unit)")
    print(f"then: {folder}/README.md lists what to make the engine's own")
    return 0
