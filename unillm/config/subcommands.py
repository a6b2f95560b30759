"""The parsers of the subcommands that live beside their packages (``unillm bench``, ``batch``,
``deploy kubernetes``): each one's ``--help`` ends with the examples of its module's docstring.
And the repeatable options every subcommand spells the same way (:func:`add_repeatable`)."""

from __future__ import annotations

import argparse
from typing import Any


def examples_parser(
    sub: Any, name: str, module_doc: str | None, *, summary: str, description: str
) -> argparse.ArgumentParser:
    """Add the subcommand ``name``, whose ``--help`` ends with ``module_doc`` past its first
    paragraph (the examples), shown as written.

    Args:
        sub: The parent parser's subparsers.
        name: The subcommand's name.
        module_doc: The docstring of the subcommand's module: a summary paragraph, then examples.
        summary: The subcommand's line in the parent's ``--help``.
        description: The paragraph atop the subcommand's own ``--help``.

    Returns:
        The subcommand's parser.
    """
    return sub.add_parser(  # type: ignore[no-any-return]
        name,
        help=summary,
        description=description,
        epilog=module_doc.split("\n\n", 1)[1] if module_doc else "",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )


def add_repeatable(parser: Any, flag: str, help: str, metavar: str | None = None) -> None:
    """Add an option that may be given again and again: its values, in order, land in a list
    (empty when it is not given), e.g. ``--launch KEY=VALUE`` or ``--url``.

    Args:
        parser: The parser or argument group.
        flag: The option (``"--env"``).
        help: Its line in ``--help``.
        metavar: How ``--help`` names its value (``"KEY=VALUE"``); None: argparse's default.
    """
    parser.add_argument(flag, action="append", default=[], metavar=metavar, help=help)
