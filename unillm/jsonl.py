"""JSON Lines input files (bench datasets and traces, labelled routing samples), read alike: each
non-blank line a JSON object, a bad one named by its ``file:line``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from unillm.errors import InvalidOptions


def jsonl_objects(name: str, what: str, expected: str) -> list[tuple[str, dict[str, Any]]]:
    """The JSON objects of a JSONL file's non-blank lines, each with its ``file:line``.

    Args:
        name: The file's path.
        what: What the file is, for messages ("dataset", "trace", "labelled file").
        expected: What its lines look like, for messages.

    Returns:
        Each line's ``file:line`` and object, in order.

    Raises:
        InvalidOptions: The file is missing or unreadable, or a line is not a JSON object.
    """
    path = Path(name)
    if not path.is_file():
        raise InvalidOptions(f"{what} {path} does not exist; pass a JSONL file of {expected}")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise InvalidOptions(f"{what} {path} cannot be read as UTF-8 text ({e})") from None
    out = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        try:
            data = json.loads(line)
        except json.JSONDecodeError as e:
            raise InvalidOptions(f"{where} is not JSON ({e.msg})") from None
        if not isinstance(data, dict):
            raise InvalidOptions(f"{where}: each line must be a JSON object")
        out.append((where, data))
    return out
