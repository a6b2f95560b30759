"""Backpressure (issue 33, item 4): an engine's "too busy" answers are ``Overloaded`` with the
retry hint, whichever way they come: vLLM's ``--max-num-queued-reqs`` rejection (HTTP 503, no
Retry-After), a 429 or 503 with Retry-After, and SGLang's queue-full abort inside a stream."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

import unillm
from unillm import RetryPolicy
from unillm.testing.fault_server import FaultServer

pytestmark = pytest.mark.anyio

#: vLLM 0.32's answer when admitting a request would pass --max-num-queued-reqs
#: (vllm.exceptions.QueueOverflowError, rendered by create_error_response).
VLLM_QUEUE_FULL = (
    "The engine is currently busy and cannot accept new requests. "
    "Please try again later or on a different instance."
)
VLLM_503 = {"error": {"message": VLLM_QUEUE_FULL, "type": "Service Unavailable", "param": None, "code": 503}}


@pytest.fixture
def server() -> Iterator[FaultServer]:
    with FaultServer(model="tiny") as s:
        yield s
    assert s.errors == []


def connect(server: FaultServer, attempts: int) -> unillm.LLM:
    retry = RetryPolicy(attempts=attempts, initial_wait=0.01, max_wait=0.01)
    return unillm.connect("vllm", server.url, model="tiny", retry=retry)


async def test_vllms_queue_overflow_is_overloaded_once_the_retries_run_out(server: FaultServer) -> None:
    server.fail_raw(503, json.dumps(VLLM_503).encode(), content_type="application/json")
    async with connect(server, attempts=2) as llm:
        with pytest.raises(unillm.Overloaded) as caught:
            await llm.generate("hi", max_tokens=4)
    e = caught.value
    assert (e.engine, e.status, e.engine_message, e.retry_after) == ("vllm", 503, VLLM_QUEUE_FULL, None)
    assert server.count() == 2


async def test_vllms_queue_overflow_on_a_stream_is_overloaded(server: FaultServer) -> None:
    server.fail_raw(503, json.dumps(VLLM_503).encode(), content_type="application/json")
    async with connect(server, attempts=1) as llm:
        with pytest.raises(unillm.Overloaded, match="currently busy"):
            async with llm.stream("hi", max_tokens=4) as s:
                await s.collect()


@pytest.mark.parametrize("status", [429, 503])
async def test_the_retry_after_hint_reaches_the_caller(server: FaultServer, status: int) -> None:
    server.fail(status, retry_after="3", message="queue full")
    async with connect(server, attempts=1) as llm:
        with pytest.raises(unillm.Overloaded) as caught:
            await llm.generate("hi", max_tokens=4)
    assert (caught.value.status, caught.value.retry_after) == (status, 3.0)


async def test_a_queue_full_abort_inside_a_stream_is_overloaded(server: FaultServer) -> None:
    # SGLang past --max-queued-requests: a 200 stream whose first event is a 503 error
    server.stream_error(
        after=0, code=503, message="The request queue is full.", error_type="SERVICE_UNAVAILABLE"
    )
    async with connect(server, attempts=1) as llm:
        with pytest.raises(unillm.Overloaded) as caught:
            async with llm.stream("hi", max_tokens=4) as s:
                await s.collect()
    assert (caught.value.status, caught.value.engine_message) == (503, "The request queue is full.")
    assert "retries exhausted" not in str(caught.value)  # a stream that has started is never retried
