"""Discovery (the served model, version and limits) on a hostile or stalled engine.

* A malformed answer is a MalformedResponse naming the endpoint, on every adapter; a null id never
  becomes the model ``"None"``, and nothing is sent.
* Concurrent first calls share one discovery: its result, or its failure (a later call tries
  again); the same for a fleet.
* A call's ``timeout=`` and ``deadline=`` cover the discovery it triggers.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import anyio
import pytest
from fake_adapter import FakeAdapter
from fault_helpers import PIECES, TEXT, checked_server

import unillm
from unillm import Fleet, Timeouts
from unillm.adapter.registry import adapter_for
from unillm.client.single_flight import SingleFlight
from unillm.testing.fault_server import FaultServer

SLOW = Timeouts(connect=1, read=30)  # a stalled engine would hold a call this long per wait
GOOD_MODELS = {"object": "list", "data": [{"id": "tiny", "object": "model", "max_model_len": 512}]}
GUARD = 10  # seconds: a hang guard around calls that must end far sooner, never a timing assert

pytestmark = pytest.mark.anyio


@pytest.fixture
def server() -> Iterator[FaultServer]:
    yield from checked_server(model="tiny", pieces=PIECES)


# -- malformed answers -------------------------------------------------------------------------
MALFORMED: list[tuple[str, dict[str, Any], str]] = [
    ("vllm", {"models": {"data": [{"id": None}]}}, "/v1/models"),
    ("vllm", {"models": {"data": [{"object": "model"}]}}, "/v1/models"),
    ("vllm", {"models": {"data": [{"id": 7}]}}, "/v1/models"),
    ("vllm", {"models": {"data": ["tiny"]}}, "/v1/models"),
    ("vllm", {"models": {"data": "tiny"}}, "/v1/models"),
    ("vllm", {"models": ["tiny"]}, "/v1/models"),
    ("vllm", {"models": {"data": [{"id": "tiny", "max_model_len": "big"}]}}, "/v1/models"),
    ("vllm", {"version": ["0.32"], "models": GOOD_MODELS}, "/version"),
    ("vllm", {"version": {"version": 32}, "models": GOOD_MODELS}, "/version"),
    ("llamacpp", {"models": {"data": [{"id": None}]}}, "/v1/models"),
    ("llamacpp", {"models": GOOD_MODELS, "openapi": "yes"}, "/openapi.json"),
    ("mlx", {"models": {"data": [{"id": None}]}}, "/v1/models"),
    ("mlx", {"version": {"version": {"v": 1}}}, "/version"),
    ("sglang", {"model_info": ["tiny"]}, "/get_model_info"),
    ("sglang", {"server_info": "tiny"}, "/get_server_info"),
    ("sglang", {"model_info": {"served_model_name": 5}}, "/get_model_info"),
    ("sglang", {"model_info": {"model_path": "tiny"}, "server_info": {"version": 5}}, "/get_server_info"),
    ("sglang", {"models": {"data": [{"id": None}]}}, "/v1/models"),
    ("tgi", {"info": {"model_id": "tiny", "version": 3}}, "/info"),
]


@pytest.mark.parametrize(("engine", "answers", "endpoint"), MALFORMED)
def test_a_malformed_discovery_answer_is_malformed_response_naming_the_endpoint(
    engine: str, answers: dict[str, Any], endpoint: str
) -> None:
    with pytest.raises(unillm.MalformedResponse, match=endpoint):
        adapter_for(engine).parse_info(answers, None)


async def test_a_null_model_id_is_refused_and_nothing_is_sent(server: FaultServer) -> None:
    server.discovery["/v1/models"] = {"object": "list", "data": [{"id": None, "object": "model"}]}
    async with unillm.connect("vllm", server.url) as llm:
        with pytest.raises(unillm.MalformedResponse, match="/v1/models"):
            await llm.generate("hi", max_tokens=4)
    assert server.count() == 0


async def test_a_third_party_adapters_raw_parse_error_becomes_malformed_response(
    server: FaultServer,
) -> None:
    server.discovery["/v1/models"] = {"object": "list", "data": [{"object": "model"}]}  # no id
    async with unillm.LLM(FakeAdapter(), server.url) as llm:  # its parse_info indexes ["id"]
        with pytest.raises(unillm.MalformedResponse, match="/v1/models"):
            await llm.info()


# -- one shared discovery ----------------------------------------------------------------------
async def test_concurrent_first_calls_on_a_stalled_engine_share_one_discovery(server: FaultServer) -> None:
    server.stall_discovery = True
    failures: list[BaseException] = []
    async with unillm.connect("vllm", server.url, timeouts=Timeouts(connect=1, read=0.5)) as llm:

        async def call() -> None:
            try:
                await llm.generate("hi", max_tokens=4)
            except unillm.UnillmError as e:
                failures.append(e)

        with anyio.fail_after(GUARD):
            async with anyio.create_task_group() as tg:
                for _ in range(20):
                    tg.start_soon(call)
    assert len(failures) == 20 and all(isinstance(e, unillm.EngineTimeout) for e in failures)
    assert server.count("/version") == 1  # one discovery, its failure shared by all 20


async def test_a_later_call_tries_discovery_again_after_a_shared_failure(server: FaultServer) -> None:
    server.stall_discovery = True
    async with unillm.connect("vllm", server.url, timeouts=Timeouts(connect=1, read=0.5)) as llm:
        with pytest.raises(unillm.EngineTimeout):
            await llm.info()
        server.stall_discovery = False
        assert (await llm.info()).model == "tiny"
    assert server.count("/version") == 2


async def test_a_cancelled_discovery_is_run_again_by_its_waiters(server: FaultServer) -> None:
    server.stall_discovery = True
    async with unillm.connect("vllm", server.url, timeouts=SLOW) as llm:
        results: list[Any] = []

        async def leader() -> None:
            with pytest.raises(unillm.DeadlineExceeded):
                await llm.generate("hi", max_tokens=4, deadline=1.0)

        async def waiter() -> None:
            results.append((await llm.generate("hi", max_tokens=4)).text)

        with anyio.fail_after(GUARD):
            async with anyio.create_task_group() as tg:
                tg.start_soon(leader)
                while server.count("/version") == 0:  # the leader's discovery is in flight
                    await anyio.sleep(0.01)
                tg.start_soon(waiter)
                await anyio.sleep(0.05)  # let the waiter join it
                server.stall_discovery = False  # the leader's request stays stalled
    assert results == [TEXT]


async def test_concurrent_fleet_infos_share_one_discovery(server: FaultServer) -> None:
    with FaultServer(model="tiny", pieces=PIECES) as other:
        for s in (server, other):
            s.stall_discovery = True
        fast = Timeouts(connect=1, read=0.5)
        fleet = Fleet([unillm.connect("vllm", s.url, timeouts=fast) for s in (server, other)])
        failures: list[BaseException] = []

        async def call() -> None:
            try:
                await fleet.info()
            except unillm.UnillmError as e:
                failures.append(e)

        async with fleet:
            with anyio.fail_after(GUARD):
                async with anyio.create_task_group() as tg:
                    for _ in range(10):
                        tg.start_soon(call)
        assert len(failures) == 10 and all(isinstance(e, unillm.EngineUnavailable) for e in failures)
        assert (server.count("/version"), other.count("/version")) == (1, 1)


async def test_single_flight_shares_a_failure_with_current_waiters_only() -> None:
    flight: SingleFlight[int] = SingleFlight()
    runs = 0
    release = anyio.Event()

    async def failing() -> int:
        nonlocal runs
        runs += 1
        await release.wait()
        raise unillm.EngineUnavailable("down")

    errors: list[BaseException] = []

    async def call() -> None:
        try:
            await flight.run(failing)
        except unillm.EngineUnavailable as e:
            errors.append(e)

    async with anyio.create_task_group() as tg:
        for _ in range(5):
            tg.start_soon(call)
        await anyio.sleep(0.01)
        release.set()
    assert (runs, len(errors)) == (1, 5)

    async def ok() -> int:
        return 42

    assert await flight.run(ok) == 42


# -- timeout= and deadline= cover discovery ------------------------------------------------------
BOUNDED_CALLS: list[tuple[str, Callable[[unillm.LLM], Awaitable[Any]], type[Exception]]] = [
    ("generate timeout=", lambda llm: llm.generate("hi", max_tokens=4, timeout=0.3), unillm.EngineTimeout),
    (
        "stream timeout=",
        lambda llm: llm.stream("hi", max_tokens=4, timeout=0.3).collect(),
        unillm.EngineTimeout,
    ),
    (
        "generate deadline=",
        lambda llm: llm.generate("hi", max_tokens=4, deadline=0.3),
        unillm.DeadlineExceeded,
    ),
    ("tokenize timeout=", lambda llm: llm.tokenize("hi", timeout=0.3), unillm.EngineTimeout),
]


@pytest.mark.parametrize(("name", "call", "error"), BOUNDED_CALLS, ids=[c[0] for c in BOUNDED_CALLS])
async def test_a_calls_limit_covers_the_discovery_it_triggers(
    server: FaultServer, name: str, call: Callable[[unillm.LLM], Awaitable[Any]], error: type[Exception]
) -> None:
    server.stall_discovery = True
    async with unillm.connect("vllm", server.url, timeouts=SLOW) as llm:
        with anyio.fail_after(GUARD), pytest.raises(error):
            await call(llm)


async def test_a_waiter_on_anothers_discovery_is_bound_by_its_own_timeout(server: FaultServer) -> None:
    server.stall_discovery = True
    async with unillm.connect("vllm", server.url, timeouts=SLOW) as llm, anyio.create_task_group() as tg:
        tg.start_soon(llm.info)  # no timeout: waits up to SLOW.read
        while server.count("/version") == 0:
            await anyio.sleep(0.01)
        with anyio.fail_after(GUARD), pytest.raises(unillm.EngineTimeout):
            await llm.generate("hi", max_tokens=4, timeout=0.3)
        tg.cancel_scope.cancel()


async def test_a_fleet_calls_timeout_covers_its_discovery(server: FaultServer) -> None:
    server.stall_discovery = True
    async with Fleet([unillm.connect("vllm", server.url, timeouts=SLOW)]) as fleet:
        with anyio.fail_after(GUARD), pytest.raises(unillm.EngineUnavailable):
            await fleet.generate("hi", max_tokens=4, timeout=0.3)
