"""A stream's ``text`` and a StreamInterrupted's ``partial_text`` are exactly what the caller
received: a delta unillm held back (the finish reason waiting for its usage chunk) and never
yielded does not count. Against tests/fault_server.py, which cuts the stream right after the
chunk carrying the finish reason, as a replica killed at that moment does.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fault_server import FaultServer

import unillm
from unillm import Fleet, Timeouts

PIECES = ("Hello", ",", " world", "!")
FAST = Timeouts(connect=1, read=2)

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def server() -> Iterator[FaultServer]:
    with FaultServer(model="tiny", pieces=PIECES) as s:
        yield s
    assert s.errors == [], f"the fault server itself failed: {s.errors}"


async def received_until_interrupted(client: Any, **options: Any) -> tuple[str, unillm.StreamInterrupted]:
    """The text the caller received from a stream, and the StreamInterrupted that ended it."""
    text = ""
    with pytest.raises(unillm.StreamInterrupted) as caught:
        async with client.stream("hi", max_tokens=8, **options) as s:
            async for d in s:
                text += d.text
    return text, caught.value


async def test_partial_text_is_what_was_delivered_when_cut_after_the_finish_chunk(
    server: FaultServer,
) -> None:
    server.drop(after=3, finish=True)  # "Hello", ",", " world" (finish reason on it), then cut
    async with unillm.connect("vllm", server.url, timeouts=FAST) as llm:
        text, error = await received_until_interrupted(llm)
    assert error.partial_text == text


async def test_stream_text_is_what_was_delivered_when_cut_after_the_finish_chunk(
    server: FaultServer,
) -> None:
    server.drop(after=3, finish=True)
    async with unillm.connect("vllm", server.url, timeouts=FAST) as llm:
        text = ""
        with pytest.raises(unillm.StreamInterrupted):
            async with llm.stream("hi", max_tokens=8) as s:
                async for d in s:
                    text += d.text
    assert s.text == text


async def test_a_fleet_streams_partial_text_is_what_was_delivered(server: FaultServer) -> None:
    server.drop(after=3, finish=True)
    with FaultServer(model="tiny", pieces=PIECES) as other:
        llms = [unillm.connect("vllm", s.url, timeouts=FAST) for s in (server, other)]
        async with Fleet(llms) as fleet:
            text, error = await received_until_interrupted(fleet)
    assert error.partial_text == text


async def test_a_deadline_mid_stream_reports_only_delivered_text(server: FaultServer) -> None:
    server.stall(after=3)  # (no finish) three chunks, then silence until the deadline
    async with unillm.connect("vllm", server.url, timeouts=FAST) as llm:
        text = ""
        with pytest.raises(unillm.DeadlineExceeded) as caught:
            async with llm.stream("hi", max_tokens=8, deadline=0.5) as s:
                async for d in s:
                    text += d.text
    assert caught.value.partial_text == text == "Hello, world"


def test_partial_texts_are_indexed_by_choice_even_when_choice_zero_has_none() -> None:
    llm = unillm.connect("vllm", "http://127.0.0.1:9")
    stream = llm.stream("hi", max_tokens=4)
    stream._delivered(unillm.Delta(index=1, text="second choice"))
    assert stream._partial() == ["", "second choice"]
