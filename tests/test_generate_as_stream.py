"""``generate`` on an engine that stops only streams (``Adapter.stops_only_streams``: MLX, SGLang;
issue 33, item 3): the request goes as a stream, the answer is the same whole completion, and a
cancelled call leaves the engine's stream; where a stream cannot carry the whole answer (n > 1), it
goes whole as before."""

from __future__ import annotations

from collections.abc import Iterator

import anyio
import pytest

import unillm
from unillm import RetryPolicy
from unillm.adapter.base import Adapter
from unillm.adapter.registry import get_adapter
from unillm.testing.fault_server import COMPLETIONS, FaultServer

pytestmark = pytest.mark.anyio


@pytest.fixture
def server() -> Iterator[FaultServer]:
    with FaultServer(model="tiny") as s:
        yield s
    assert s.errors == []


def streams_only() -> Adapter:
    """vLLM's adapter, as for an engine that stops only streams."""
    base = type(get_adapter("vllm"))
    adapter: Adapter = type("StreamsOnly", (base,), {"stops_only_streams": True})()
    return adapter


def connect(server: FaultServer, adapter: Adapter) -> unillm.LLM:
    return unillm.LLM(adapter, server.url, model="tiny", retry=RetryPolicy(attempts=1))


async def test_generate_goes_as_a_stream_and_answers_as_a_whole(server: FaultServer) -> None:
    async with connect(server, streams_only()) as llm, connect(server, get_adapter("vllm")) as whole:
        streamed = await llm.generate("hi", max_tokens=4, output=unillm.Choice(["Hello, world!"]))
        plain = await whole.generate("hi", max_tokens=4, output=unillm.Choice(["Hello, world!"]))
    first, second = server.seen(COMPLETIONS)
    assert first.body["stream"] is True and not second.body.get("stream")
    assert streamed.text == plain.text == "Hello, world!" and streamed.parsed == plain.parsed
    assert streamed.usage == plain.usage and streamed.finish_reason == plain.finish_reason
    assert (streamed.model, streamed.engine) == (plain.model, plain.engine)
    assert streamed.timings.ttft_s is not None  # the stream's timings, first token included


async def test_a_cancelled_generate_leaves_the_engines_stream(server: FaultServer) -> None:
    server.endless()
    async with connect(server, streams_only()) as llm:
        with anyio.move_on_after(0.5):
            await llm.generate("hi", max_tokens=10_000)
        assert await server.wait_disconnect(10)
    assert server.disconnects == [COMPLETIONS]


async def test_what_a_stream_cannot_carry_whole_goes_whole(server: FaultServer) -> None:
    async with connect(server, streams_only()) as llm:
        await llm.generate("hi", max_tokens=4, n=2)
    (sent,) = server.seen(COMPLETIONS)
    assert sent.body["n"] == 2 and not sent.body.get("stream")
