"""A stream's ``text`` and a StreamInterrupted's ``partial_text`` are exactly what the caller
received: a delta unillm held back (the finish reason waiting for its usage chunk) and never
yielded does not count. Against unillm/testing/fault_server.py, which cuts the stream right after the
chunk carrying the finish reason, as a replica killed at that moment does.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fault_helpers import PIECES, checked_server

import unillm
from unillm import Fleet, Timeouts
from unillm.testing.fault_server import FaultServer

FAST = Timeouts(connect=1, read=2)

pytestmark = pytest.mark.anyio


@pytest.fixture
def server() -> Iterator[FaultServer]:
    yield from checked_server(model="tiny", pieces=PIECES)


async def consume(stream: Any, received: list[str]) -> None:
    """Read ``stream`` to its end inside ``async with``, keeping the text of every delta."""
    async with stream as s:
        async for d in s:
            received.append(d.text)


async def received_until_interrupted(client: Any) -> tuple[str, unillm.StreamInterrupted]:
    """The text the caller received from a stream, and the StreamInterrupted that ended it."""
    received: list[str] = []
    with pytest.raises(unillm.StreamInterrupted) as caught:
        await consume(client.stream("hi", max_tokens=8), received)
    return "".join(received), caught.value


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
    received: list[str] = []
    async with unillm.connect("vllm", server.url, timeouts=FAST) as llm:
        stream = llm.stream("hi", max_tokens=8)
        with pytest.raises(unillm.StreamInterrupted):
            await consume(stream, received)
    assert stream.text == "".join(received)


async def test_a_fleet_streams_partial_text_is_what_was_delivered(server: FaultServer) -> None:
    server.drop(after=3, finish=True)
    with FaultServer(model="tiny", pieces=PIECES) as other:
        llms = [unillm.connect("vllm", s.url, timeouts=FAST) for s in (server, other)]
        async with Fleet(llms) as fleet:
            text, error = await received_until_interrupted(fleet)
    assert error.partial_text == text


async def test_a_deadline_mid_stream_reports_only_delivered_text(server: FaultServer) -> None:
    server.stall(after=3)  # (no finish) three chunks, then silence until the deadline
    received: list[str] = []
    async with unillm.connect("vllm", server.url, timeouts=FAST) as llm:
        with pytest.raises(unillm.DeadlineExceeded) as caught:
            await consume(llm.stream("hi", max_tokens=8, deadline=0.5), received)
    assert caught.value.partial_text == "".join(received) == "Hello, world"


def test_partial_texts_are_indexed_by_choice_even_when_choice_zero_has_none() -> None:
    llm = unillm.connect("vllm", "http://127.0.0.1:9")
    stream = llm.stream("hi", max_tokens=4)
    stream._delivered(unillm.Delta(index=1, text="second choice"))
    assert stream._partial() == ["", "second choice"]
