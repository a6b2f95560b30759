"""The parsers of the subcommands that live beside their packages (``unillm bench``, ``batch``,
``deploy kubernetes``): each one's ``--help`` ends with the examples of its module's docstring."""

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
