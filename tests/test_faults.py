"""Fault injection: how unillm behaves when the engine misbehaves on the wire.

Every test runs against :class:`unillm.testing.fault_server.FaultServer`, a vLLM look-alike that drops,
stalls, truncates, rate-limits or garbles its answers on demand and counts what it received.
"""

from __future__ import annotations

import gc
import json
import socket
from collections.abc import Iterator
from typing import Any, TypeVar

import anyio
import pytest
from fault_helpers import PIECES, TEXT, checked_server

import unillm
from unillm import RetryPolicy, Timeouts
from unillm.client.transport import HttpWire
from unillm.testing.fault_server import COMPLETIONS, FaultServer, Raw

pytestmark = pytest.mark.anyio


@pytest.fixture
def server() -> Iterator[FaultServer]:
    yield from checked_server(model="tiny", pieces=PIECES, loras=("sql",))


def connect(url: str, *, attempts: int = 3, read: float = 1.0, **kw: Any) -> unillm.LLM:
    """Fast retries (waits capped at 50 ms, whatever Retry-After says) and short timeouts."""
    return unillm.connect(
        "vllm",
        url,
        model=kw.pop("model", "tiny"),
        retry=RetryPolicy(attempts=attempts, initial_wait=0.01, max_wait=0.05, max_total=5),
        timeouts=Timeouts(connect=1, read=read),
        **kw,
    )


E = TypeVar("E", bound=BaseException)


async def generate_error(
    error: type[E], url: str, options: dict[str, Any] | None = None, **connection: Any
) -> E:
    """What ``generate("hi", max_tokens=8, **options)`` raises on a new :func:`connect` client
    (``connection``: its keyword arguments); fails the test if it raises nothing or another type."""
    async with connect(url, **connection) as llm:
        with pytest.raises(error) as info:
            await llm.generate("hi", max_tokens=8, **(options or {}))
    return info.value


async def collect(llm: unillm.LLM, prompt: str | None = "hi", **options: Any) -> list[str]:
    """Consume a whole stream inside ``async with``; the text of every delta."""
    if "messages" in options:
        prompt = None
    texts = []
    async with llm.stream(prompt, max_tokens=8, **options) as s:
        async for d in s:
            texts.append(d.text)
    return texts


# -- the server itself answers like vLLM -------------------------------------------------------
async def test_healthy_server_generate_and_stream_complete(server: FaultServer) -> None:
    async with connect(server.url) as llm:
        r = await llm.generate("hi", max_tokens=8)
        assert r.text == TEXT
        assert r.finish_reason == "length"
        async with llm.stream("hi", max_tokens=8) as s:
            deltas = [d async for d in s]
        assert s.text == TEXT
        assert deltas[-1].usage is not None
        assert deltas[-1].usage.completion_tokens == len(PIECES)
        chat = await llm.generate(messages=[{"role": "user", "content": "hi"}], max_tokens=8)
        assert chat.text == TEXT
        async with llm.stream(messages=[{"role": "user", "content": "hi"}], max_tokens=8) as s:
            assert await s.collect() == TEXT


# -- dropped connections -----------------------------------------------------------------------
async def test_drop_mid_stream_raises_stream_interrupted_with_partial_text(
    server: FaultServer,
) -> None:
    server.drop(after=2)
    async with connect(server.url) as llm:
        with pytest.raises(unillm.StreamInterrupted) as info:
            await collect(llm)
    assert info.value.partial_text == "Hello,"


async def test_drop_mid_chat_stream_keeps_partial_text(server: FaultServer) -> None:
    server.drop(after=3)
    async with connect(server.url) as llm:
        with pytest.raises(unillm.StreamInterrupted) as info:
            await collect(llm, messages=[{"role": "user", "content": "hi"}])
    assert info.value.partial_text == "Hello, world"


async def test_stream_is_never_retried_once_started(server: FaultServer) -> None:
    server.drop(after=1)
    async with connect(server.url, attempts=4) as llm:
        with pytest.raises(unillm.StreamInterrupted):
            await collect(llm)
    assert server.count(COMPLETIONS) == 1


async def test_drop_before_answer_on_generate_is_engine_unavailable_not_retried(
    server: FaultServer,
) -> None:
    server.drop()
    error = await generate_error(unillm.EngineUnavailable, server.url, attempts=4)
    assert not isinstance(error, unillm.EngineTimeout)
    assert server.count() == 1  # a POST that may have reached the engine is not resent


async def test_stream_ending_without_finish_or_done_is_interrupted(server: FaultServer) -> None:
    server.truncate(after=3)
    async with connect(server.url) as llm:
        with pytest.raises(unillm.StreamInterrupted) as info:
            await collect(llm)
    assert info.value.partial_text == "Hello, world"


async def test_connection_refused_is_engine_unavailable_after_attempts() -> None:
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    error = await generate_error(unillm.EngineUnavailable, f"http://127.0.0.1:{port}", attempts=3)
    assert not isinstance(error, unillm.EngineTimeout)
    assert "3 attempt" in str(error)


# -- overload and Retry-After ------------------------------------------------------------------
@pytest.mark.parametrize("status", [429, 503])
async def test_overloaded_then_success_is_retried(server: FaultServer, status: int) -> None:
    server.fail(status, times=2, retry_after="1", message="busy")
    async with connect(server.url, attempts=4) as llm:
        r = await llm.generate("hi", max_tokens=8)
    assert r.text == TEXT
    assert server.count() == 3


@pytest.mark.parametrize("status", [429, 503])
async def test_overloaded_stream_is_retried_before_it_starts(
    server: FaultServer,
    status: int,
) -> None:
    server.fail(status, times=1, retry_after="1")
    async with connect(server.url, attempts=3) as llm:
        assert "".join(await collect(llm)) == TEXT
    assert server.count() == 2


async def test_overloaded_on_every_attempt_raises_overloaded_with_retry_after(
    server: FaultServer,
) -> None:
    server.fail(429, retry_after="7", message="Too many requests: queue is full")
    error = await generate_error(unillm.Overloaded, server.url, attempts=3)
    assert error.retry_after == 7.0
    assert error.status == 429
    assert error.engine_message == "Too many requests: queue is full"
    assert server.count() == 3


async def test_overloaded_stream_on_every_attempt_raises_overloaded(server: FaultServer) -> None:
    server.fail(503, retry_after="2", message="engine is draining")
    async with connect(server.url, attempts=2) as llm:
        with pytest.raises(unillm.Overloaded) as info:
            await collect(llm)
    assert info.value.retry_after == 2.0
    assert info.value.engine_message == "engine is draining"
    assert server.count() == 2


async def test_retries_disabled_raise_overloaded_after_one_request(server: FaultServer) -> None:
    server.fail(429, times=1, retry_after="1", message="slow down")
    error = await generate_error(unillm.Overloaded, server.url, attempts=1)
    assert error.retry_after == 1.0
    assert error.engine_message == "slow down"
    assert server.count() == 1


async def test_overloaded_without_retry_after_has_none(server: FaultServer) -> None:
    server.fail(503, message="no capacity")
    error = await generate_error(unillm.Overloaded, server.url, attempts=2)
    assert error.retry_after is None
    assert server.count() == 2


# -- malformed answers ------------------------------------------------------------------------
async def test_non_json_sse_event_is_malformed_response(server: FaultServer) -> None:
    server.bad_sse(after=1)
    async with connect(server.url) as llm:
        with pytest.raises(unillm.MalformedResponse):
            await collect(llm)


async def test_stream_with_wrong_content_type_is_malformed_response(server: FaultServer) -> None:
    server.wrong_content_type("application/json")
    async with connect(server.url) as llm:
        with pytest.raises(unillm.MalformedResponse):
            await collect(llm)


async def test_non_json_body_on_generate_is_malformed_response(server: FaultServer) -> None:
    server.fail_raw(200, b"<html>hello from a proxy</html>", content_type="text/html")
    await generate_error(unillm.MalformedResponse, server.url)


async def test_json_without_choices_on_generate_is_malformed_response(
    server: FaultServer,
) -> None:
    server.fail_raw(200, b'{"object": "text_completion"}', content_type="application/json")
    await generate_error(unillm.MalformedResponse, server.url)


# -- stalls and timeouts ----------------------------------------------------------------------
async def test_stall_before_any_byte_on_generate_is_engine_timeout(server: FaultServer) -> None:
    server.stall()
    await generate_error(unillm.EngineTimeout, server.url, read=0.3)
    assert server.count() == 1  # a timed-out POST is not resent


async def test_stall_after_headers_on_generate_is_engine_timeout(server: FaultServer) -> None:
    server.stall(after=0)
    await generate_error(unillm.EngineTimeout, server.url, read=0.3)


async def test_per_request_timeout_overrides_read_timeout(server: FaultServer) -> None:
    server.stall()
    await generate_error(unillm.EngineTimeout, server.url, {"timeout": 0.3}, read=30)


async def test_stall_before_stream_headers_is_engine_timeout(server: FaultServer) -> None:
    server.stall()
    async with connect(server.url, read=0.3) as llm:
        with pytest.raises(unillm.EngineTimeout):
            await collect(llm)
    assert server.count() == 1


async def test_stall_mid_stream_is_stream_interrupted(server: FaultServer) -> None:
    server.stall(after=2)
    async with connect(server.url, read=0.3) as llm:
        with pytest.raises(unillm.StreamInterrupted) as info:
            await collect(llm)
    assert info.value.partial_text == "Hello,"
    assert server.count() == 1


BAD_CHUNK_HEADER = b"zz\r\ngarbage\r\n"  # "zz" is no chunk size


def broken_chunks(*pieces: bytes) -> Raw:
    """A chunked answer: ``pieces`` (each arriving on its own), then a bad chunk header, then the
    server hangs up."""
    return Raw(200, list(pieces), "text/event-stream", end=BAD_CHUNK_HEADER, close=True, interval=0.1)


@pytest.mark.parametrize("http", ["aiohttp", "httpx"])
async def test_a_bad_chunk_header_mid_stream_is_stream_interrupted_at_once(
    server: FaultServer, http: HttpWire
) -> None:
    event = {
        "id": "x",
        "object": "text_completion",
        "model": "tiny",
        "choices": [{"index": 0, "text": "Hel"}],
    }
    server.script(COMPLETIONS, broken_chunks(f"data: {json.dumps(event)}\n\n".encode()))
    async with connect(server.url, attempts=1, read=60, pool=unillm.Pool(http=http)) as llm:
        with anyio.fail_after(10), pytest.raises(unillm.StreamInterrupted) as info:
            await collect(llm)
    assert info.value.partial_text == "Hel"


@pytest.mark.parametrize("http", ["aiohttp", "httpx"])
async def test_a_bad_chunk_header_mid_body_is_engine_unavailable_at_once(
    server: FaultServer, http: HttpWire
) -> None:
    server.script(COMPLETIONS, broken_chunks(b'{"choices": [{"te'))
    async with connect(server.url, attempts=1, read=60, pool=unillm.Pool(http=http)) as llm:
        with anyio.fail_after(10), pytest.raises(unillm.EngineUnavailable):
            await llm.generate("hi")


# -- engine errors ----------------------------------------------------------------------------
async def test_400_is_invalid_request_with_engine_message(server: FaultServer) -> None:
    message = "This model's maximum context length is 512 tokens."
    server.fail(400, message=message)
    error = await generate_error(unillm.InvalidRequest, server.url)
    assert error.engine_message == message
    assert error.status == 400
    assert server.count() == 1


async def test_400_on_stream_is_invalid_request(server: FaultServer) -> None:
    server.fail(400, message="bad stop sequence")
    async with connect(server.url) as llm:
        with pytest.raises(unillm.InvalidRequest) as info:
            await collect(llm)
    assert info.value.engine_message == "bad stop sequence"


async def test_404_for_unloaded_lora_is_unknown_adapter(server: FaultServer) -> None:
    error = await generate_error(unillm.UnknownLora, server.url, {"lora": "not-loaded"})
    assert "not-loaded" in error.engine_message
    assert error.status == 404


async def test_loaded_lora_is_served(server: FaultServer) -> None:
    async with connect(server.url) as llm:
        r = await llm.generate("hi", max_tokens=8, lora="sql")
    assert r.text == TEXT
    assert server.requests[-1].body["model"] == "sql"


async def test_404_for_unknown_model_is_unknown_model(server: FaultServer) -> None:
    error = await generate_error(unillm.UnknownModel, server.url, model="no-such-model")
    assert error.engine_message == "The model `no-such-model` does not exist."


@pytest.mark.parametrize(
    ("status", "body", "content_type", "kind", "message"),
    [
        # What FastAPI answers for a route it does not have (e.g. a wrong base_url prefix).
        (404, b'{"detail":"Not Found"}', "application/json", unillm.NotFound, "Not Found"),
        # A proxy's non-JSON page: its text is the engine message.
        (502, b"Bad Gateway", "text/plain", unillm.EngineInternalError, "Bad Gateway"),
    ],
)
async def test_a_raw_error_answer_on_generate_is_typed_with_its_message(
    server: FaultServer,
    status: int,
    body: bytes,
    content_type: str,
    kind: type[unillm.EngineError],
    message: str,
) -> None:
    server.fail_raw(status, body, content_type=content_type)
    error = await generate_error(kind, server.url)
    assert error.engine_message == message


async def test_500_is_engine_internal_error_not_retried(server: FaultServer) -> None:
    server.fail(500, message="EngineCore encountered an issue")
    error = await generate_error(unillm.EngineInternalError, server.url, attempts=4)
    assert error.engine_message == "EngineCore encountered an issue"
    assert server.count() == 1


async def test_error_event_in_stream_is_typed_error(server: FaultServer) -> None:
    server.stream_error(after=2, code=400, message="invalid token id 99999")
    async with connect(server.url) as llm:
        s = llm.stream("hi", max_tokens=8)
        with pytest.raises(unillm.InvalidRequest) as info:
            await s.collect()
    assert info.value.engine_message == "invalid token id 99999"
    assert s.text == "Hello,"


async def test_internal_error_event_in_stream_is_engine_internal_error(
    server: FaultServer,
) -> None:
    server.stream_error(after=0, code=500, message="EngineDeadError")
    async with connect(server.url) as llm:
        with pytest.raises(unillm.EngineInternalError) as info:
            await collect(llm)
    assert info.value.engine_message == "EngineDeadError"


# -- cancellation closes the connection -------------------------------------------------------
async def test_breaking_out_of_stream_closes_connection(server: FaultServer) -> None:
    server.endless()
    async with connect(server.url) as llm:
        async with llm.stream("hi", max_tokens=8) as s:
            async for _ in s:
                break
        assert await server.wait_disconnect()
    assert server.disconnects == [COMPLETIONS]


async def test_breaking_out_of_a_bare_async_for_closes_connection_without_the_gc(
    server: FaultServer,
) -> None:
    # A Stream and its generator form a reference cycle: only the garbage collector would
    # close a bare loop's stream, at some unknown later time. Leaving the loop must close it.
    server.endless()
    gc.disable()
    try:
        async with connect(server.url) as llm:
            async for _ in llm.stream("hi", max_tokens=8):
                break
            assert await server.wait_disconnect(10)  # as soon as it happens; slow on a busy machine
    finally:
        gc.enable()
    assert server.disconnects == [COMPLETIONS]


async def test_a_stream_held_open_by_its_iterator_stays_open_until_closed(
    server: FaultServer,
) -> None:
    server.endless()
    async with connect(server.url) as llm:
        s = llm.stream("hi", max_tokens=8)
        deltas = aiter(s)
        await anext(deltas)
        await anext(deltas)  # still open: a held iterator is not a loop left early
        assert not server.client_disconnected
        await s.aclose()
        await s.aclose()  # closing twice is fine
        assert await server.wait_disconnect(10)  # as soon as it happens; slow on a busy machine


async def test_cancelling_stream_consumer_closes_connection(server: FaultServer) -> None:
    server.stall(after=2)
    async with connect(server.url, read=30) as llm:
        got: list[str] = []
        with anyio.CancelScope() as scope:
            async for d in llm.stream("hi", max_tokens=8):
                got.append(d.text)
                if len(got) == 2:
                    scope.cancel()
        assert scope.cancelled_caught
        assert await server.wait_disconnect()
    assert got == ["Hello", ","]


async def test_cancelling_generate_closes_connection(server: FaultServer) -> None:
    server.stall()
    async with connect(server.url, read=30) as llm:
        await llm.info()
        with anyio.move_on_after(0.2) as scope:
            await llm.generate("hi", max_tokens=8)
        assert scope.cancelled_caught
        assert await server.wait_disconnect()


async def test_llm_still_works_after_an_interrupted_stream(server: FaultServer) -> None:
    server.drop(after=1, times=1)
    async with connect(server.url) as llm:
        with pytest.raises(unillm.StreamInterrupted):
            await collect(llm)
        assert "".join(await collect(llm)) == TEXT
        assert (await llm.generate("hi", max_tokens=8)).text == TEXT
