"""``unillm check CONFIG``: every refusal a config would meet, starting nothing."""

from __future__ import annotations

import argparse

HELP = "list every refusal a config would meet, start nothing"
DESCRIPTION = (
    "Check a unillm config against its engine's declared capabilities: every "
    "default, declared use and launch setting the engine would refuse, at once. "
    "Connects to nothing and starts nothing. Exit code 1 when something would be "
    "refused."
)


def add_arguments(check: argparse.ArgumentParser) -> None:
    """Add the arguments (and the handler) of ``unillm check`` to its parser."""
    check.add_argument("config", help="a .toml, .yaml or .yml unillm config")
    check.add_argument("--engine", help="check for this engine instead of the config's")
    check.add_argument(
        "--engine-version",
        metavar="VERSION",
        help="engine version to check against (default: the config's "
        "engine_version, else the newest the adapter knows)",
    )
    check.add_argument("--json", action="store_true", help="machine-readable output")
    check.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Print the check's report; 1 when something would be refused."""
    from unillm.config.check import check_config

    overrides = {"engine": args.engine} if args.engine else {}
    report = check_config(args.config, version=args.engine_version, **overrides)
    print(report.model_dump_json(indent=2) if args.json else report.render())
    return 0 if report.ok else 1
