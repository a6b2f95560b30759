"""JSON Lines input files: every way a user's file can be wrong is an InvalidOptions naming it."""

from __future__ import annotations

from pathlib import Path

import pytest

from unillm.errors import InvalidOptions
from unillm.jsonl import jsonl_objects


def test_objects_come_with_their_file_and_line_and_blank_lines_are_skipped(tmp_path: Path) -> None:
    path = tmp_path / "d.jsonl"
    path.write_text('{"a": 1}\n\n{"b": 2}\n')
    assert jsonl_objects(str(path), "dataset", "objects") == [
        (f"{path}:1", {"a": 1}),
        (f"{path}:3", {"b": 2}),
    ]


@pytest.mark.parametrize(
    ("content", "match"),
    [
        (b'{"a": 1}\nnot json\n', r"d.jsonl:2 is not JSON"),
        (b"[1, 2]\n", r"d.jsonl:1: each line must be a JSON object"),
        (b'{"a": "\xff\xfe"}\n', r"cannot be read as UTF-8"),
    ],
)
def test_a_bad_file_is_invalid_options_naming_where(tmp_path: Path, content: bytes, match: str) -> None:
    path = tmp_path / "d.jsonl"
    path.write_bytes(content)
    with pytest.raises(InvalidOptions, match=match):
        jsonl_objects(str(path), "dataset", "objects")


def test_a_missing_file_is_invalid_options(tmp_path: Path) -> None:
    with pytest.raises(InvalidOptions, match="does not exist"):
        jsonl_objects(str(tmp_path / "none.jsonl"), "dataset", "objects")
