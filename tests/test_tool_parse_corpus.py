"""Tool calls parse the same whole or streamed: a generated corpus of 500 calls (parallel calls,
nested JSON, unicode, empty arguments, arguments cut short) through every layout unillm parses
client-side, streamed one character a delta and its body read in small byte pieces."""

from __future__ import annotations

import pytest

from unillm.testing.tool_corpus import LAYOUTS, compare, corpus, streamed_openai, whole_openai
from unillm.tools import ForcedCallStream, calls_from_forced_text, to_tool_choice, to_tools

pytestmark = pytest.mark.anyio
CORPUS = corpus(500)


def test_the_corpus_has_every_shape_and_500_calls() -> None:
    shapes = {a.shape for a in CORPUS}
    calls = sum(len(a.calls) for a in CORPUS)
    errors = sum(1 for a in CORPUS for c in whole_openai(a) if c.error)
    assert (shapes, calls >= 500, errors > 0) == (
        {"nested", "unicode", "empty", "typed", "parallel", "cut"},
        True,
        True,
    )


async def test_every_call_parses_the_same_whole_and_streamed() -> None:
    counts = await compare(CORPUS, piece_bytes=7)
    assert {layout: done == total for layout, (done, total) in counts.items()} == dict.fromkeys(LAYOUTS, True)


@pytest.mark.parametrize(
    "index", [i for i, a in enumerate(CORPUS) if a.shape in ("unicode", "parallel")][:20]
)
async def test_a_body_split_at_every_byte_parses_the_same(index: int) -> None:
    answer = CORPUS[index]
    assert await streamed_openai(answer, piece_bytes=1) == whole_openai(answer)


def add(a: int, b: int) -> int:
    """Add."""
    return a + b


def test_a_named_forced_call_streamed_drops_the_whitespace_the_whole_answer_drops() -> None:
    tools = to_tools([add])
    choice = to_tool_choice("add", tools)
    text = '\n {"a": 1, "b": 2}\n\n'
    stream = ForcedCallStream(choice)
    pieces = [d.arguments for ch in text for d in stream.feed(ch)] + [d.arguments for d in stream.finish()]
    assert "".join(pieces) == calls_from_forced_text(text, choice, tools)[0].arguments == '{"a": 1, "b": 2}'
