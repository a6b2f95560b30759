"""A ``generate`` its caller gave up is aborted on an engine that needs to be told
(``Adapter.abortable``: SGLang's ``/abort_request``; issue 33, item 3): cancelled or past its
deadline or its read timeout, the client sends the abort for the request's own id, shielded from the
cancel; an answered request, or one that never reached the engine, sends none; a failed abort never
replaces the caller's own error."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import replace

import anyio
import pytest

import unillm
from unillm import RetryPolicy
from unillm.adapter.base import Adapter, HttpCall
from unillm.adapter.registry import get_adapter
from unillm.testing.fault_server import COMPLETIONS, FaultServer, Raw

pytestmark = pytest.mark.anyio
ABORT = "/abort_request"


@pytest.fixture
def server() -> Iterator[FaultServer]:
    with FaultServer(model="tiny") as s:
        yield s
    assert s.errors == []


def aborting() -> Adapter:
    """vLLM's adapter, as for an engine that must be told to stop a request (as SGLang's does)."""

    def abortable(self: Adapter, call: HttpCall) -> tuple[HttpCall, HttpCall] | None:
        assert call.json is not None
        return replace(call, json={**call.json, "rid": "r1"}), HttpCall("POST", ABORT, {"rid": "r1"})

    adapter: Adapter = type("Aborting", (type(get_adapter("vllm")),), {"abortable": abortable})()
    return adapter


def connect(server: FaultServer) -> unillm.LLM:
    return unillm.LLM(aborting(), server.url, model="tiny", retry=RetryPolicy(attempts=1))


async def test_a_cancelled_generate_is_aborted_by_its_id(server: FaultServer) -> None:
    server.stall()
    async with connect(server) as llm:
        with anyio.move_on_after(0.3) as scope:
            await llm.generate("hi", max_tokens=8)
    assert scope.cancelled_caught
    (sent,) = server.seen(COMPLETIONS)
    (abort,) = server.seen(ABORT)
    assert sent.body["rid"] == abort.body["rid"] == "r1"


@pytest.mark.parametrize(
    ("limit", "error"),
    [({"deadline": 0.3}, unillm.DeadlineExceeded), ({"timeout": 0.3}, unillm.EngineTimeout)],
    ids=["deadline", "read-timeout"],
)
async def test_a_generate_past_its_time_is_aborted(
    server: FaultServer, limit: dict[str, float], error: type[Exception]
) -> None:
    server.stall()
    async with connect(server) as llm:
        with pytest.raises(error):
            await llm.generate("hi", max_tokens=8, **limit)  # type: ignore[call-overload]
    assert [r.body for r in server.seen(ABORT)] == [{"rid": "r1"}]


async def test_a_request_that_never_reached_the_engine_sends_no_abort(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    aborts: list[HttpCall] = []

    async def spy(self: unillm.LLM, call: HttpCall) -> None:
        aborts.append(call)

    monkeypatch.setattr(unillm.LLM, "_abort", spy)
    async with contextlib.AsyncExitStack() as stack:
        with FaultServer(model="tiny") as replica:
            llm = await stack.enter_async_context(connect(replica))
            await llm.info()  # discovered; then the replica goes away
        with pytest.raises(unillm.EngineUnavailable):
            await llm.generate("hi", max_tokens=8)
    assert aborts == []  # a dead replica's failover is not held up by an abort


async def test_an_answered_generate_sends_no_abort(server: FaultServer) -> None:
    async with connect(server) as llm:
        r = await llm.generate("hi", max_tokens=8)
    assert r.text and server.seen(COMPLETIONS)[0].body["rid"] == "r1" and not server.seen(ABORT)


async def test_a_failed_abort_leaves_the_callers_own_error(server: FaultServer) -> None:
    server.stall()
    server.script(ABORT, Raw(status=500, body=b"boom"))
    async with connect(server) as llm:
        with pytest.raises(unillm.DeadlineExceeded):
            await llm.generate("hi", max_tokens=8, deadline=0.3)
    assert len(server.seen(ABORT)) == 1
