"""The reserve of engine slots for urgent requests (``reserve=unillm.Reserve(...)``): never more
than ``capacity - slots`` less-urgent requests at the engine, urgent ones at once, waiters served
most urgent first, a cancelled waiter leaving nothing behind, streams holding their slot until
they close (unillm/client/priority_gate.py), against the look-alike server."""

from __future__ import annotations

import random
import sys
from collections.abc import Iterator
from typing import Any

import anyio
import anyio.lowlevel
import pytest

import unillm
from unillm import RetryPolicy
from unillm.client.priority_gate import PriorityGate, Reserve, SlotQueue
from unillm.launching.supervisor import launched_reserve
from unillm.testing.fault_server import FaultServer

pytestmark = pytest.mark.anyio
ONE = RetryPolicy(attempts=1)


@pytest.fixture
def server() -> Iterator[FaultServer]:
    with FaultServer() as s:
        yield s


def gate_of(llm: unillm.LLM) -> PriorityGate:
    gate = llm._gate
    assert gate is not None
    return gate


async def until(condition: Any, seconds: float = 5.0) -> None:
    with anyio.fail_after(seconds):
        while not condition():
            await anyio.sleep(0.005)


# -- the bookkeeping, without awaiting ---------------------------------------------------------
def test_the_queue_grants_free_slots_then_the_most_urgent_waiter_first() -> None:
    queue = SlotQueue(limit=2)
    a, b = queue.arrive(10), queue.arrive(10)
    assert a.granted and b.granted and queue.in_flight == 2
    late, urgent_ish, same = queue.arrive(20), queue.arrive(5), queue.arrive(5)
    assert not (late.granted or urgent_ish.granted or same.granted) and queue.waiting == 3
    assert queue.release() == [urgent_ish]  # priority 5 before 20, then arrival order
    assert queue.release() == [same]
    assert queue.in_flight == 2 and queue.waiting == 1


def test_a_waiter_that_leaves_takes_nothing_and_one_granted_meanwhile_hands_its_slot_on() -> None:
    queue = SlotQueue(limit=1)
    holder = queue.arrive(10)
    first, second = queue.arrive(10), queue.arrive(10)
    assert queue.leave(first) == [] and queue.waiting == 1 and queue.in_flight == 1
    assert queue.release() == [second] and second.granted
    assert queue.leave(second) == [] and queue.in_flight == 0  # granted, then cancelled: freed
    assert holder.granted and queue.arrive(10).granted  # a new arrival finds the slot free


async def test_under_random_cancels_no_more_than_the_limit_run_and_nothing_leaks() -> None:
    gate = PriorityGate(Reserve(slots=2, above=0, capacity=5))  # 3 less-urgent at a time
    rng = random.Random(7)
    running = peak = urgent_seen = 0

    async def one(priority: int | None, hold: float, patience: float) -> None:
        nonlocal running, peak, urgent_seen
        with anyio.move_on_after(patience):
            async with gate.slot(priority):
                if gate.urgent(priority):
                    urgent_seen += 1
                    await anyio.sleep(hold)
                    return
                running += 1
                peak = max(peak, running)
                try:
                    await anyio.sleep(hold)
                finally:
                    running -= 1

    async with anyio.create_task_group() as tg:
        for _ in range(300):
            priority = rng.choice([None, -1, 0, 1, 5, 10])
            tg.start_soon(one, priority, rng.uniform(0, 0.004), rng.choice([0.001, 0.01, 1.0]))
            if rng.random() < 0.3:
                await anyio.lowlevel.checkpoint()
    assert peak == 3 and urgent_seen > 0
    assert (gate.queue.in_flight, gate.queue.waiting) == (0, 0)


# -- through a client, against the look-alike server --------------------------------------------
async def test_less_urgent_requests_wait_in_the_client_and_urgent_ones_pass(server: FaultServer) -> None:
    server.stall(times=2)  # the first two requests hold their slots until their callers leave
    reserve = unillm.Reserve(slots=1, above=0, capacity=3)  # 2 less-urgent at the engine
    async with unillm.connect("vllm", server.url, model="tiny", retry=ONE, reserve=reserve) as llm:
        await llm.info()
        gate = gate_of(llm)
        done: list[int] = []
        scopes = [anyio.CancelScope() for _ in range(2)]

        async def stalled(i: int) -> None:
            with scopes[i]:
                await llm.generate("batch", max_tokens=4, priority=10)

        async def batch(priority: int) -> None:
            await llm.generate("batch", max_tokens=4, priority=priority)
            done.append(priority)

        async with anyio.create_task_group() as tg:
            for i in range(2):
                tg.start_soon(stalled, i)
            await until(lambda: server.count() == 2)
            tg.start_soon(batch, 20)
            await until(lambda: gate.queue.waiting == 1)
            tg.start_soon(batch, 5)
            await until(lambda: gate.queue.waiting == 2)
            assert server.count() == 2  # held in the client: the engine's slots stay free
            r = await llm.generate("urgent", max_tokens=4, priority=0)  # never waits
            r2 = await llm.generate("no priority counts as 0", max_tokens=4)
            assert r.text and r2.text and server.count() == 4 and gate.queue.waiting == 2
            scopes[0].cancel()  # a stalled request ends: its slot goes to the most urgent waiter
            await until(lambda: done == [5, 20])
            scopes[1].cancel()
        sent = [s.body.get("priority") for s in server.seen()]
        assert sent == [10, 10, 0, None, 5, 20]
        assert (gate.queue.in_flight, gate.queue.waiting) == (0, 0)


@pytest.mark.parametrize("streamed", [False, True], ids=["generate", "stream"])
async def test_a_waiter_past_its_deadline_leaves_the_queue_having_sent_nothing(
    server: FaultServer, streamed: bool
) -> None:
    server.stall(times=1)
    reserve = unillm.Reserve(slots=1, capacity=2)
    async with unillm.connect("vllm", server.url, model="tiny", retry=ONE, reserve=reserve) as llm:
        await llm.info()
        gate = gate_of(llm)
        async with anyio.create_task_group() as tg:
            tg.start_soon(lambda: llm.generate("held", max_tokens=4, priority=3))
            await until(lambda: server.count() == 1)
            waits = llm.stream if streamed else llm.generate
            with pytest.raises(unillm.DeadlineExceeded):
                await _sent(waits("waits", max_tokens=4, priority=3, deadline=0.05))
            assert (gate.queue.in_flight, gate.queue.waiting, server.count()) == (1, 0, 1)
            tg.cancel_scope.cancel()
        assert (gate.queue.in_flight, gate.queue.waiting) == (0, 0)
        assert (await llm.generate("again", max_tokens=4, priority=3)).text  # the slot is free


async def test_a_stream_holds_its_slot_until_it_closes(server: FaultServer) -> None:
    server.endless(interval=0.01)  # streams go on until the client leaves; generate answers
    reserve = unillm.Reserve(slots=1, capacity=2)
    async with unillm.connect("vllm", server.url, model="tiny", retry=ONE, reserve=reserve) as llm:
        await llm.info()
        gate = gate_of(llm)
        answered = anyio.Event()

        async def batch() -> None:
            await llm.generate("batch", max_tokens=4, priority=10)
            answered.set()

        async with anyio.create_task_group() as tg:
            async with llm.stream("long", max_tokens=4, priority=10) as s:
                pieces = aiter(s)  # kept: a loop left by ``break`` would close the stream at once
                assert (await anext(pieces)).text
                tg.start_soon(batch)
                await until(lambda: gate.queue.waiting == 1)
                await anyio.sleep(0.05)
                assert not answered.is_set() and server.count() == 1
            with anyio.fail_after(5):
                await answered.wait()
        assert (gate.queue.in_flight, gate.queue.waiting) == (0, 0)


async def test_a_stream_that_fails_gives_its_slot_back(server: FaultServer) -> None:
    server.drop(after=1)  # the connection breaks after the first piece
    reserve = unillm.Reserve(slots=1, capacity=2)
    async with unillm.connect("vllm", server.url, model="tiny", retry=ONE, reserve=reserve) as llm:
        async with llm.stream("x", max_tokens=4, priority=10) as s:
            with pytest.raises(unillm.StreamInterrupted):
                await s.collect()
        assert gate_of(llm).queue.in_flight == 0
        server.set_fault(None)
        assert (await llm.generate("again", max_tokens=4, priority=10)).text


async def test_a_fleet_keeps_the_reserve_on_each_replica(server: FaultServer) -> None:
    reserve = unillm.Reserve(slots=1, capacity=4)
    async with unillm.connect("vllm", [server.url], model="tiny", reserve=reserve) as fleet:
        assert [r.reserve for r in fleet.replicas] == [reserve]
        async with fleet.stream("hi", max_tokens=4, priority=10) as s:
            assert await s.collect()
        assert (await fleet.generate("hi", max_tokens=4, priority=10)).text
        assert gate_of(fleet.replicas[0]).queue.in_flight == 0


# -- the option's checks: refused before anything is sent ---------------------------------------
@pytest.mark.parametrize(
    ("settings", "match"),
    [
        ({"slots": 0}, "slots must be at least 1"),
        ({"slots": True}, "slots must be an integer"),
        ({"slots": 2.0}, "slots must be an integer"),
        ({"above": "0"}, "above must be an integer"),
        ({"capacity": 0}, "capacity must be at least 1"),
        ({"slots": 8, "capacity": 8}, "keeps every one"),
    ],
)
def test_the_reserve_refuses_bad_settings(settings: dict[str, Any], match: str) -> None:
    with pytest.raises(unillm.InvalidOptions, match=match):
        unillm.Reserve(**settings)


def test_a_reserve_needs_a_capacity_before_anything_is_sent(server: FaultServer) -> None:
    with pytest.raises(unillm.InvalidOptions, match=r"capacity=N.*max_num_seqs"):
        unillm.connect("vllm", server.url, reserve=unillm.Reserve(slots=2))
    with pytest.raises(unillm.InvalidOptions, match="capacity"):
        unillm.connect("vllm", [server.url, server.url], reserve=unillm.Reserve(slots=2))
    with pytest.raises(unillm.InvalidOptions, match=r"reserve must be a unillm\.Reserve"):
        unillm.connect("vllm", server.url, reserve=2)  # type: ignore[call-overload]
    assert server.requests == []


def test_a_launch_takes_the_capacity_from_max_num_seqs_and_refuses_a_reserve_without_one() -> None:
    spec = unillm.LaunchSpec(model="/models/tiny", max_num_seqs=8)
    assert launched_reserve(unillm.Reserve(slots=2), spec, "vllm") == Reserve(2, 0, 8)
    assert launched_reserve(Reserve(1, capacity=4), spec, "vllm") == Reserve(1, 0, 4)  # given wins
    with pytest.raises(unillm.InvalidOptions, match="keeps every one"):
        launched_reserve(unillm.Reserve(slots=8), spec, "vllm")
    with pytest.raises(unillm.InvalidOptions, match=r"max_num_seqs=N"):
        unillm.launch("vllm", model="/models/tiny", reserve=unillm.Reserve(slots=2))


def test_a_clone_keeps_the_reserve_with_counts_of_its_own(server: FaultServer) -> None:
    llm = unillm.connect("vllm", server.url, reserve=unillm.Reserve(slots=1, capacity=3))
    twin = llm.clone()
    assert twin.reserve == llm.reserve and gate_of(twin) is not gate_of(llm)
    assert unillm.connect("vllm", server.url).reserve is None


def test_launches_hand_the_reserve_to_their_clients_with_the_engines_capacity() -> None:
    reserve = unillm.Reserve(slots=2)
    common: dict[str, Any] = {"model": "m", "python": sys.executable, "progress": None, "max_num_seqs": 8}
    one = unillm.launch("vllm", reserve=reserve, **common)
    assert isinstance(one, unillm.Launch) and one._connect.reserve == Reserve(2, 0, 8)
    two = unillm.launch("vllm", replicas=2, reserve=reserve, **common)
    assert isinstance(two, unillm.FleetLaunch)
    assert [e._connect.reserve for e in two.engines] == [Reserve(2, 0, 8)] * 2
    routed = unillm.launch("vllm", replicas=2, router="vllm-router", reserve=reserve, **common)
    assert isinstance(routed, unillm.FleetLaunch) and routed.router is not None
    assert routed.router._connect.reserve == Reserve(2, 0, 16)  # both engines' slots
    assert [e._connect.reserve for e in routed.engines] == [None, None]


def test_a_config_takes_a_reserve_table(server: FaultServer) -> None:
    config = {"engine": "vllm", "base_url": server.url, "reserve": {"slots": 2, "capacity": 8}}
    llm = unillm.from_config(config)
    assert isinstance(llm, unillm.LLM) and llm.reserve == Reserve(2, 0, 8)
    fleet = unillm.from_config({**config, "base_url": [server.url]})
    assert isinstance(fleet, unillm.Fleet) and fleet.replicas[0].reserve == Reserve(2, 0, 8)
    with pytest.raises(unillm.ConfigError, match="reserve"):
        unillm.from_config({**config, "reserve": {"slots": 8, "capacity": 8}})
    with pytest.raises(unillm.ConfigError, match="reserve"):
        unillm.from_config({**config, "reserve": {"slot": 2}})
    problems = unillm.check_config({**config, "reserve": {"slots": 0}}, env={}).problems
    assert [p.setting for p in problems] == ["reserve"]


async def _sent(call: Any) -> Any:
    """A call's answer: a stream's pieces collected, or the awaited call."""
    return await (call.collect() if hasattr(call, "collect") else call)
