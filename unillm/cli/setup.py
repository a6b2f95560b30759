"""``unillm setup ENGINE``: install an engine into its own managed venv."""

from __future__ import annotations

import argparse

from unillm.cli.names import engine_names
from unillm.config.subcommands import add_repeatable

HELP = "install an engine into its own managed venv"
DESCRIPTION = "Install an engine into $UNILLM_CACHE/envs/<engine>."


def add_arguments(setup: argparse.ArgumentParser) -> None:
    """Add the arguments (and the handler) of ``unillm setup`` to its parser."""
    setup.add_argument("engine", help=engine_names("or"))
    setup.add_argument(
        "--gpu",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="force the GPU (or CPU) build; default: detect",
    )
    add_repeatable(setup, "--pip-arg", "extra pip argument (e.g. an index for CPU torch wheels)")
    setup.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Install ``args.engine`` (idempotent)."""
    from unillm.launching.envs import setup_engine

    setup_engine(args.engine, gpu=args.gpu, pip_args=args.pip_arg)
    return 0
