"""The two HTTP wires under the transport: aiohttp's (the default) and httpx's (``Pool(http=)``).

Each promise is checked on both wires where it applies, against the vLLM look-alike
:class:`unillm.testing.fault_server.FaultServer`. No test asserts on elapsed time.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from typing import Any
from unittest import mock

import aiohttp
import httpx
import pytest
from httpx_sse import EventSource

import unillm
from unillm import Pool, RetryPolicy, Timeouts
from unillm.adapter.base import HttpCall
from unillm.client.aiohttp_transport import AiohttpWire, StallWatch, as_httpx_error
from unillm.client.answer import Answer
from unillm.client.transport import HttpxWire, Transport, event_stream
from unillm.testing.fault_server import COMPLETIONS, FaultServer, Raw

pytestmark = pytest.mark.anyio
WIRES = ("aiohttp", "httpx")


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def server() -> Iterator[FaultServer]:
    with FaultServer(model="tiny", pieces=("Hello", " world")) as s:
        yield s
    assert s.errors == [], f"the fault server itself failed: {s.errors}"


def connect(server: FaultServer, http: str, **pool: Any) -> unillm.LLM:
    return unillm.connect(
        "vllm",
        server.url,
        model="tiny",
        retry=RetryPolicy(attempts=1),
        timeouts=Timeouts(connect=1, read=0.5),
        pool=Pool(http=http, **pool),  # type: ignore[arg-type]
    )


# -- which wire ------------------------------------------------------------------------------------
async def test_the_default_wire_is_aiohttp_under_asyncio() -> None:
    transport = Transport("http://127.0.0.1:9")
    assert isinstance(transport.wire, AiohttpWire)
    await transport.aclose()


@pytest.mark.parametrize("http", ["httpx", "http2"])
async def test_pool_http_picks_httpx_own_wire(http: str) -> None:
    transport = Transport("http://127.0.0.1:9", pool=Pool(http=http))  # type: ignore[arg-type]
    assert isinstance(transport.wire, HttpxWire)
    await transport.aclose()


async def test_an_httpx_transport_given_picks_the_httpx_wire() -> None:
    transport = Transport(
        "http://127.0.0.1:9", http_transport=httpx.MockTransport(lambda r: httpx.Response(200))
    )
    assert isinstance(transport.wire, HttpxWire)
    await transport.aclose()


def test_an_unknown_http_library_is_refused() -> None:
    with pytest.raises(unillm.InvalidOptions, match=r"Pool\.http must be one of"):
        Pool(http="requests")  # type: ignore[arg-type]


# -- the same promises on each wire ----------------------------------------------------------------
@pytest.mark.parametrize("http", WIRES)
async def test_a_redirect_comes_back_unfollowed(server: FaultServer, http: str) -> None:
    server.script(COMPLETIONS, Raw(307, b"", headers={"location": "/v1/models"}))
    transport = Transport(server.url, pool=Pool(http=http))  # type: ignore[arg-type]
    answer = await transport.send(HttpCall("POST", COMPLETIONS, json={}))
    await transport.aclose()
    assert (answer.status_code, server.count("/v1/models")) == (307, 0)


@pytest.mark.parametrize("http", WIRES)
async def test_a_stall_mid_stream_is_stream_interrupted(server: FaultServer, http: str) -> None:
    server.stall(after=1)
    async with connect(server, http) as llm:
        with pytest.raises(unillm.StreamInterrupted, match="stopped sending") as caught:
            async for _ in llm.stream("hi"):
                pass
    assert caught.value.partial_text == "Hello"


@pytest.mark.parametrize("http", WIRES)
async def test_a_stream_left_early_closes_its_connection(server: FaultServer, http: str) -> None:
    server.endless(interval=0.02)
    async with connect(server, http) as llm:
        async with llm.stream("hi") as stream:
            async for _ in stream:
                break
        assert await server.wait_disconnect()


@pytest.mark.parametrize("http", WIRES)
async def test_a_pool_slot_comes_back_after_an_error_answer(server: FaultServer, http: str) -> None:
    server.fail(500, times=1)
    async with connect(server, http, max_connections=1, wait=0.5) as llm:
        with pytest.raises(unillm.EngineError):
            await llm.generate("hi")
        assert (await llm.generate("hi")).text == "Hello world"


@pytest.mark.parametrize("http", WIRES)
async def test_a_refused_connection_is_engine_unavailable(http: str) -> None:
    transport = Transport("http://127.0.0.1:9", retry=RetryPolicy(attempts=1), pool=Pool(http=http))  # type: ignore[arg-type]
    with pytest.raises(unillm.EngineUnavailable, match="cannot reach"):
        await transport.send(HttpCall("GET", "/version"))
    await transport.aclose()


def test_the_aiohttp_wire_works_again_on_a_new_event_loop(server: FaultServer) -> None:
    transport = Transport(server.url)

    async def version() -> int:
        return (await transport.send(HttpCall("GET", "/version"))).status_code

    assert [asyncio.run(version()), asyncio.run(version())] == [200, 200]


# -- aiohttp's failures, named as the transport maps them --------------------------------------------
@pytest.mark.parametrize(
    ("failure", "named"),
    [
        (aiohttp.ConnectionTimeoutError("slow"), httpx.ConnectTimeout),
        (aiohttp.SocketTimeoutError("stall"), httpx.ReadTimeout),
        (asyncio.TimeoutError(), httpx.ReadTimeout),
        (aiohttp.ServerDisconnectedError(), httpx.RemoteProtocolError),
        (aiohttp.ClientPayloadError("cut short"), httpx.RemoteProtocolError),
        (aiohttp.ClientOSError(104, "reset"), httpx.ReadError),
        (
            aiohttp.ClientConnectorError(mock.Mock(host="h", port=1, ssl=None), OSError(111, "no")),
            httpx.ConnectError,
        ),
        (aiohttp.InvalidURL("x"), httpx.TransportError),
    ],
)
def test_each_aiohttp_failure_has_an_httpx_name(failure: Exception, named: type[Exception]) -> None:
    assert type(as_httpx_error(failure)) is named  # type: ignore[arg-type]


def test_a_body_that_does_not_decode_is_a_decoding_error() -> None:
    failure = aiohttp.ClientPayloadError("bad gzip")
    failure.__cause__ = aiohttp.http_exceptions.ContentEncodingError("bad gzip")
    assert isinstance(as_httpx_error(failure), httpx.DecodingError)


# -- the stall watch ---------------------------------------------------------------------------------
def reader() -> aiohttp.StreamReader:
    return aiohttp.StreamReader(mock.Mock(_reading_paused=False), 2**16, loop=asyncio.get_running_loop())


async def test_a_reader_waiting_for_bytes_that_never_come_times_out() -> None:
    content = reader()
    watch = StallWatch(content, 0.08)
    watch.waiting = True
    with pytest.raises(aiohttp.SocketTimeoutError):
        await content.readany()
    watch.stop()


async def test_a_reader_busy_elsewhere_is_no_stall() -> None:
    content = reader()
    watch = StallWatch(content, 0.08)  # waiting stays False: the reader is not waiting
    await asyncio.sleep(0.3)
    content.feed_data(b"late")
    assert await content.readany() == b"late"
    watch.stop()


# -- event parsing: the fast path and httpx-sse's decoders agree ----------------------------------------
async def pieces(chunks: list[bytes]) -> AsyncIterator[bytes]:
    for chunk in chunks:
        yield chunk


@pytest.mark.parametrize(
    "chunks",
    [
        [b"data: a\n\n", b"data: b\n\ndata: c\n\n"],
        [b"data: a\r\n\r\n", b"data: b\n\n"],
        [b"event: x\ndata: y\n\n", b"data: z\n\n"],
        [b"data:a\n\n", b"data:  spaced\n\n"],
        [b"data: one\ndata: two\n\n", b": comment\n\n", b"data: \n\n"],
        [b"data: sp", b"lit\n", b"\ndata: after\n\n"],
        [b"data: a\n\n\r", b"\ndata: b\n\n"],
        ["data: caf\u00e9\n\n".encode()[:-3], "data: caf\u00e9\n\n".encode()[-3:]],
    ],
)
async def test_event_data_is_what_httpx_sse_reads(chunks: list[bytes]) -> None:
    headers = {"content-type": "text/event-stream"}
    ours = [d async for d in event_stream(Answer(200, headers, chunks=pieces(chunks)), "vllm")]
    theirs = [
        e.data
        async for e in EventSource(httpx.Response(200, headers=headers, content=pieces(chunks))).aiter_sse()
        if e.data
    ]
    assert ours == theirs
