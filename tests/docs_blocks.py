"""The code blocks of the docs pages, and how each one is tested.

A fenced ``python`` block runs, in page order, in one namespace per page (top-level ``await``
allowed), against a vLLM look-alike (``unillm/testing/fault_server.py``): the addresses
``http://127.0.0.1:8000`` and ``http://127.0.0.1:8001`` in a block are replaced by two such
servers'. An HTML comment on the line just before a block changes that:

* ``<!-- test: answer TEXT -->``: the look-alike answers TEXT to the block's generations;
* ``<!-- test: engine -->``: the block needs a real engine; it runs in the real-engine tests
  with ``llm`` connected to the session's vLLM (the tiny model, its ``sql`` LoRA);
* ``<!-- test: not run, REASON -->``: the block is not run; REASON says why (counted by the tests).

``toml`` blocks must parse.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
ADDRESSES = ("http://127.0.0.1:8000", "http://127.0.0.1:8001")

_FENCE = re.compile(r"^(?P<indent> *)```(?P<lang>[\w-]*)")
_MARK = re.compile(r"^\s*<!-- test: (?P<kind>answer|engine|not run)(?:[ ,]+(?P<arg>.*?))?\s*-->\s*$")

Kind = Literal["run", "answer", "engine", "not run"]


@dataclass(frozen=True)
class Block:
    """One fenced block of a docs page."""

    page: str
    line: int
    lang: str
    code: str
    kind: Kind = "run"
    arg: str = ""

    @property
    def where(self) -> str:
        return f"docs/{self.page}:{self.line}"


def pages() -> list[Path]:
    """Every markdown page of the site."""
    return sorted(DOCS.rglob("*.md"))


def blocks(path: Path) -> list[Block]:
    """The fenced blocks of one page, with the test marker written just before each."""
    lines = path.read_text().splitlines()
    found: list[Block] = []
    i = 0
    while i < len(lines):
        fence = _FENCE.match(lines[i])
        if fence is None:
            i += 1
            continue
        indent, start = fence.group("indent"), i
        body: list[str] = []
        i += 1
        while i < len(lines) and lines[i].strip() != "```":
            body.append(lines[i][len(indent) :])
            i += 1
        i += 1
        before = next((lines[j] for j in range(start - 1, -1, -1) if lines[j].strip()), "")
        mark = _MARK.match(before)
        kind: Kind = mark.group("kind") if mark else "run"  # type: ignore[assignment]
        arg = (mark.group("arg") or "") if mark else ""
        page = str(path.relative_to(DOCS))
        found.append(Block(page, start + 1, fence.group("lang"), "\n".join(body), kind, arg))
    return found


def python_blocks() -> list[Block]:
    """Every ``python`` block of every page."""
    return [b for p in pages() for b in blocks(p) if b.lang == "python"]
