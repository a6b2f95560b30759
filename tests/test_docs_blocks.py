"""Every Python block in the docs runs (see ``tests/docs_blocks.py`` for the markers)."""

from __future__ import annotations

import ast
import inspect
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from docs_blocks import ADDRESSES, Block, pages, python_blocks
from docs_blocks import blocks as page_blocks

import unillm
from unillm.testing.fault_server import FaultServer

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

pytestmark = pytest.mark.anyio

BLOCKS = python_blocks()
# Blocks that are not run, each with its reason in the page. Raise this only with a reason.
NOT_RUN = 19


def _pages_with(*kinds: str) -> list[str]:
    return sorted({b.page for b in BLOCKS if b.kind in kinds})


async def _run(block: Block, namespace: dict[str, Any], urls: dict[str, str]) -> None:
    code = block.code
    for placeholder, url in urls.items():
        code = code.replace(placeholder, url)
    compiled = compile(code, block.where, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    result = eval(compiled, namespace)
    if inspect.iscoroutine(result):
        await result


@pytest.fixture
def servers() -> Iterator[list[FaultServer]]:
    with FaultServer(loras=("sql",), runtime_lora=True) as a, FaultServer(loras=("sql",)) as b:
        yield [a, b]


@pytest.mark.parametrize("page", _pages_with("run", "answer"))
async def test_the_python_blocks_of_a_page_run(page: str, servers: list[FaultServer]) -> None:
    urls = dict(zip(ADDRESSES, (s.url for s in servers), strict=True))
    namespace: dict[str, Any] = {"__name__": "__docs__"}
    for block in (b for b in BLOCKS if b.page == page and b.kind in ("run", "answer")):
        for server in servers:
            server.pieces = (block.arg,) if block.kind == "answer" else ("Hello", ",", " world", "!")
        await _run(block, namespace, urls)


@pytest.mark.parametrize("page", _pages_with("engine"))
async def test_the_engine_blocks_of_a_page_run_on_real_vllm(page: str, llm: Any) -> None:
    # as after the page's first block, which imports unillm (the page's other blocks run elsewhere)
    namespace: dict[str, Any] = {"__name__": "__docs__", "llm": llm, "unillm": unillm}
    for block in (b for b in BLOCKS if b.page == page and b.kind == "engine"):
        await _run(block, namespace, {})


def test_every_block_that_is_not_run_says_why_and_is_counted() -> None:
    unrun = [b for b in BLOCKS if b.kind == "not run"]
    assert [b.where for b in unrun if len(b.arg) < 10] == []
    assert len(unrun) == NOT_RUN, "\n".join(f"{b.where}: {b.arg}" for b in unrun)


def test_the_docs_have_python_blocks_that_run() -> None:
    assert sum(b.kind in ("run", "answer") for b in BLOCKS) >= 25


def test_every_toml_block_parses() -> None:
    for page in pages():
        for block in page_blocks(page):
            if block.lang == "toml":
                tomllib.loads(block.code)
