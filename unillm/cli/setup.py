"""``unillm setup ENGINE``: install an engine into its own managed venv."""

from __future__ import annotations

import argparse
from typing import Any

from unillm.cli.names import engine_names


def add_parser(sub: Any) -> None:
    """Register ``unillm setup`` on the ``unillm`` parser's subcommands.

    Args:
        sub: The subparsers action of the ``unillm`` parser.
    """
    setup = sub.add_parser(
        "setup",
        help="install an engine into its own managed venv",
        description="Install an engine into $UNILLM_CACHE/envs/<engine>.",
    )
    setup.add_argument("engine", help=engine_names("or"))
    setup.add_argument(
        "--gpu",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="force the GPU (or CPU) build; default: detect",
    )
    setup.add_argument(
        "--pip-arg",
        action="append",
        default=[],
        help="extra pip argument (e.g. an index for CPU torch wheels)",
    )
    setup.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Install ``args.engine`` (idempotent)."""
    from unillm.launching.envs import setup_engine

    setup_engine(args.engine, gpu=args.gpu, pip_args=args.pip_arg)
    return 0
