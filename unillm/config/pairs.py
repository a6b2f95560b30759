"""``KEY=VALUE`` settings from the command line (``--launch``, ``--env``, ``--lora``, ``--vary``):
the one reading ``unillm launch``, ``unillm bench`` and ``unillm batch`` share."""

from __future__ import annotations

import json
from typing import Any

from unillm.errors import InvalidOptions


def pairs(items: list[str], what: str) -> dict[str, str]:
    """``KEY=VALUE`` items as a mapping (a later key wins).

    Args:
        items: The flag's values, each ``KEY=VALUE``.
        what: The flag, named in the error.

    Returns:
        Each key and its value, as text.

    Raises:
        InvalidOptions: An item without ``=`` or without a key.
    """
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise InvalidOptions(f"{what} needs KEY=VALUE, got {item!r}")
        out[key] = value
    return out


def settings(items: list[str], what: str) -> dict[str, str]:
    """:func:`pairs` with each key a Python name (``max-num-seqs`` -> ``max_num_seqs``).

    Args:
        items: The flag's values, each ``KEY=VALUE``.
        what: The flag, named in the error.

    Returns:
        Each setting's name and its value, as text.

    Raises:
        InvalidOptions: An item without ``=`` or without a key.
    """
    return {key.replace("-", "_"): value for key, value in pairs(items, what).items()}


def json_or_text(text: str) -> Any:
    """A value as JSON when it parses (``4``, ``true``, ``[1, 2]``), else the text itself.

    Args:
        text: The value as typed.

    Returns:
        The parsed value, or ``text``.
    """
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text
