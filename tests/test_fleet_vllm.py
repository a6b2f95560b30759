"""A fleet with a real vLLM (CPU, tiny model) as one replica and a look-alike of the same model as
the other: real answers, real runtime LoRA fan-out, and failover onto the real engine.

Two real replicas (and killing one under load) are proven by the fleet launch tests; here the
session's one vLLM server is enough, since two URLs of one server would be duplicates.
"""

from __future__ import annotations

from collections.abc import Iterator

import anyio
import pytest

import unillm
from unillm.fleet.picker import Policy
from unillm.testing.engines import RunningEngine
from unillm.testing.fault_server import FaultServer
from unillm.testing.tiny_model import TinyModel

pytestmark = pytest.mark.anyio


@pytest.fixture
def twin() -> Iterator[FaultServer]:
    """A look-alike replica serving the same model name as the real server."""
    with FaultServer(model="tiny", runtime_lora=True, loras=("sql",)) as server:
        yield server
    assert server.errors == []


def fleet_of(real: RunningEngine, twin: FaultServer, policy: Policy = "round_robin") -> unillm.Fleet:
    # an unreachable replica stays out for a minute: a slow machine's requests outlast the default
    # first ejection (1 s), after which the replica shows as half_open
    replicas = [real.connect(), unillm.connect("vllm", twin.url)]
    return unillm.Fleet(replicas, policy=policy, ejection=unillm.Backoff(60.0, 60.0))


async def test_a_fleet_spreads_requests_over_a_real_vllm_replica(
    vllm_server: RunningEngine,
    twin: FaultServer,
) -> None:
    async with fleet_of(vllm_server, twin) as fleet:
        info = await fleet.info()
        answers = [await fleet.generate("The quick brown fox", max_tokens=4, temperature=0) for _ in range(4)]
        async with fleet.stream(messages=[{"role": "user", "content": "hi"}], max_tokens=4) as s:
            streamed = [d async for d in s]
        stats = fleet.stats()
    assert info.model == "tiny"
    assert [r.requests for r in stats.replicas] == [3, 2]
    assert twin.count() == 2
    real = [a for a in answers if a.text != "Hello, world!"]
    assert len(real) == 2 and all(a.usage.completion_tokens == 4 for a in real)
    assert streamed[-1].usage is not None and streamed[-1].finish_reason


async def test_requests_fail_over_to_the_real_replica_when_the_other_dies(
    vllm_server: RunningEngine,
    twin: FaultServer,
) -> None:
    async with fleet_of(vllm_server, twin, policy="least_load") as fleet:
        await fleet.info()
        twin.stop()
        for _ in range(3):
            r = await fleet.generate("Once upon a time", max_tokens=3)
            assert r.usage.completion_tokens == 3
            async with fleet.stream("Once upon a time", max_tokens=3) as s:
                assert [d async for d in s][-1].usage is not None
        stats = fleet.stats()
    assert stats.replica(twin.url).state == "ejected"
    assert stats.replica(vllm_server.base_url).requests == 6


async def test_runtime_lora_load_fans_out_to_the_real_engine(
    vllm_server: RunningEngine,
    twin: FaultServer,
    tiny: TinyModel,
) -> None:
    async with fleet_of(vllm_server, twin) as fleet:
        await fleet.loras.load("poem-fleet", str(tiny.loras["poem"]))
        try:
            assert "poem-fleet" in twin.loras
            assert {"sql", "poem-fleet"} <= {a.name for a in await fleet.loras.list()}
            answers = [await fleet.generate("Roses", max_tokens=3, lora="poem-fleet") for _ in range(2)]
            assert [b.body["model"] for b in twin.seen()] == ["poem-fleet"]
            assert sorted(a.usage.completion_tokens for a in answers) == [3, 4]  # real: 3, twin: 4
        finally:
            await fleet.loras.unload("poem-fleet")
        async with vllm_server.connect() as real:
            assert "poem-fleet" not in {a.name for a in await real.loras.list()}


async def test_least_load_reads_the_real_engines_waiting_queue(
    vllm_server: RunningEngine,
    twin: FaultServer,
) -> None:
    async with fleet_of(vllm_server, twin, policy="least_load") as fleet:
        await fleet.generate("Hello", max_tokens=2)  # starts the background scrape
        for _ in range(300):  # bounded: until the scrape of the real engine landed
            if fleet.stats().replica(vllm_server.base_url).waiting is not None:
                break
            await anyio.sleep(0.01)
        stats = fleet.stats()
    assert stats.replica(vllm_server.base_url).waiting == 0  # vllm:num_requests_waiting, idle
    assert stats.replica(twin.url).waiting is None  # the look-alike serves no metrics
