"""A client-side fleet over several vLLM look-alike replicas (unillm/testing/fault_server.py) with faults.

Every replica counts what it received, so each test asserts where requests went (and where they
did not) from the servers' own records, never from timing.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any

import anyio
import pytest

import unillm
from unillm import Backoff, Fleet, Timeouts
from unillm.testing.fault_server import FaultServer

PIECES = ("Hello", ",", " world", "!")
TEXT = "".join(PIECES)
FAST = Timeouts(connect=1, read=2)

pytestmark = pytest.mark.anyio


@contextlib.contextmanager
def servers(n: int, **kwargs: Any) -> Iterator[list[FaultServer]]:
    """``n`` started look-alike replicas of the same model, stopped afterwards."""
    with contextlib.ExitStack() as stack:
        started = [stack.enter_context(FaultServer(model="tiny", pieces=PIECES, **kwargs)) for _ in range(n)]
        yield started
        for s in started:
            assert s.errors == [], f"a fault server failed: {s.errors}"


def fleet_of(replicas: list[FaultServer], policy: Any = "round_robin", **kwargs: Any) -> Fleet:
    llms = [unillm.connect("vllm", s.url, timeouts=FAST) for s in replicas]
    return Fleet(llms, policy=policy, **kwargs)


async def drain(fleet: unillm.Client, prompt: str = "hi", **options: Any) -> str:
    async with fleet.stream(prompt, max_tokens=4, **options) as s:
        return await s.collect()


# -- construction ------------------------------------------------------------------------------
def test_connect_with_a_list_gives_a_fleet_and_with_a_string_an_llm() -> None:
    fleet = unillm.connect("vllm", ["http://127.0.0.1:1", "http://127.0.0.1:2"], policy="prefix")
    assert isinstance(fleet, Fleet)
    assert fleet.policy == "prefix"
    assert fleet.base_urls == ["http://127.0.0.1:1", "http://127.0.0.1:2"]
    assert isinstance(unillm.connect("vllm", "http://127.0.0.1:1"), unillm.LLM)
    with pytest.raises(unillm.InvalidOptions, match="list of base URLs"):
        unillm.connect("vllm", "http://127.0.0.1:1", policy="prefix")  # type: ignore[call-overload]


@pytest.mark.parametrize(
    "urls",
    [
        [],
        ["http://127.0.0.1:8000", "http://127.0.0.1:8000/"],
        ["http://127.0.0.1:8000", "http://127.0.0.1:8000/v1"],
        ["http://LOCALHOST:80", "http://localhost"],
    ],
)
def test_empty_or_duplicate_replica_lists_are_refused(urls: list[str]) -> None:
    with pytest.raises(unillm.InvalidOptions, match=r"at least one replica|duplicate replica URL"):
        unillm.connect("vllm", urls)


def test_replicas_of_different_engines_are_refused_at_construction() -> None:
    llms = [unillm.connect("vllm", "http://127.0.0.1:1"), unillm.connect("sglang", "http://127.0.0.1:2")]
    with pytest.raises(unillm.ReplicaMismatch, match="different engines") as e:
        Fleet(llms)
    assert e.value.replicas == {"http://127.0.0.1:1": "vllm", "http://127.0.0.1:2": "sglang"}


def test_a_retry_policy_for_a_fleet_is_refused() -> None:
    with pytest.raises(unillm.InvalidOptions, match="fails over"):
        unillm.connect("vllm", ["http://127.0.0.1:1"], retry=unillm.RetryPolicy())  # type: ignore[call-overload]


async def test_replicas_serving_different_models_are_refused_naming_them() -> None:
    with FaultServer(model="tiny") as a, FaultServer(model="other") as b:
        async with fleet_of([a, b]) as fleet:
            with pytest.raises(unillm.ReplicaMismatch, match="replicas differ") as e:
                await fleet.generate("hi")
        assert e.value.replicas == {a.url: "vllm serving 'tiny'", b.url: "vllm serving 'other'"}
        assert a.count() == b.count() == 0


async def test_openai_client_is_refused_with_the_reason() -> None:
    async with unillm.connect("vllm", ["http://127.0.0.1:1", "http://127.0.0.1:2"]) as fleet:
        with pytest.raises(unillm.UnsupportedFeature, match="bypassing the fleet"):
            fleet.openai()


# -- policies ----------------------------------------------------------------------------------
async def test_round_robin_spreads_generate_and_stream_evenly() -> None:
    with servers(2) as (a, b):
        async with fleet_of([a, b]) as fleet:
            for _ in range(4):
                assert (await fleet.generate("hi", max_tokens=4)).text == TEXT
                assert await drain(fleet) == TEXT
            stats = fleet.stats()
        assert a.count() == b.count() == 4
        assert [r.requests for r in stats.replicas] == [4, 4]
        assert [r.in_flight for r in stats.replicas] == [0, 0]
        assert {r.state for r in stats.replicas} == {"healthy"}


async def test_least_load_counts_open_streams_until_they_close() -> None:
    with servers(2) as (a, b):
        a.endless()
        b.endless()
        async with fleet_of([a, b], policy="least_load") as fleet:
            stream = fleet.stream("hi", max_tokens=4)
            deltas = aiter(stream)
            await anext(deltas)  # started and held open (leaving an `async for` would close it)
            busy = stream.replica  # type: ignore[attr-defined]
            idle = b if busy == a.url else a
            assert fleet.stats().replica(busy).in_flight == 1
            for _ in range(4):
                await fleet.generate("hi", max_tokens=4)
            assert idle.count() == 4  # every request went around the open stream
            await stream.aclose()
            assert fleet.stats().replica(busy).in_flight == 0
            await fleet.generate("hi", max_tokens=4)
            await fleet.generate("hi", max_tokens=4)
        assert a.count() + b.count() == 7
        assert (a if busy == a.url else b).count() == 2


async def test_prefix_policy_keeps_a_shared_prefix_on_one_replica() -> None:
    system = "You are a careful assistant who answers in one short sentence. " * 5
    with servers(3) as replicas:
        async with fleet_of(replicas, policy="prefix") as fleet:
            for n in range(6):
                await fleet.generate(system + f"Question {n}?", max_tokens=4)
                await fleet.generate(
                    messages=[{"role": "system", "content": system}, {"role": "user", "content": f"Q{n}"}],
                    max_tokens=4,
                )
            for n in range(30):
                await fleet.generate(f"{n} unrelated prompt with its own prefix", max_tokens=4)
        for kind in ("prompt", "messages"):  # each shape hashes its own leading text
            shared = [
                sum(1 for r in s.seen() if kind in r.body and system[:50] in str(r.body[kind]))
                for s in replicas
            ]
            assert sorted(shared) == [0, 0, 6], (kind, shared)  # one replica took all 6
        assert all(s.count() > 0 for s in replicas)  # the unrelated prompts spread


async def test_prefix_policy_spills_over_when_the_favourite_is_full() -> None:
    with servers(2) as (a, b):
        a.endless()
        b.endless()
        async with fleet_of([a, b], policy="prefix") as fleet:
            shared = "the same shared prefix, longer than prefix_chars. " * 6
            streams = [fleet.stream(shared + str(n), max_tokens=4) for n in range(6)]
            held = [aiter(s) for s in streams]  # started and held open
            for deltas in held:
                await anext(deltas)
            spread = sorted(r.in_flight for r in fleet.stats().replicas)
            for s in streams:
                await s.aclose()
        assert spread == [2, 4]  # bounded load: the favourite fills to ceil(1.25 * 6 / 2), then spills


async def test_cache_aware_keeps_each_growing_conversation_where_its_history_went() -> None:
    with servers(2) as replicas:
        async with fleet_of(replicas, policy="cache_aware") as fleet:
            histories: list[list[dict[str, str]]] = [[] for _ in range(4)]
            for turn in range(3):
                for c, history in enumerate(histories):
                    history.append({"role": "user", "content": f"{c}: conversation {c} asks question {turn}"})
                    if c % 2:
                        answer = await drain(fleet, None, messages=history)  # type: ignore[arg-type]
                    else:
                        answer = (await fleet.generate(messages=history, max_tokens=4)).text
                    history.append({"role": "assistant", "content": answer})
        for c in range(4):
            owners = [
                sum(1 for r in s.seen() if f"conversation {c} asks" in str(r.body.get("messages")))
                for s in replicas
            ]
            assert sorted(owners) == [0, 3], (c, owners)  # every turn on the replica of the first
        assert all(s.count() > 0 for s in replicas)  # new conversations (nothing matched) rotate


async def test_session_key_sticks_to_one_replica_under_any_policy() -> None:
    with servers(3) as replicas:
        async with fleet_of(replicas, policy="round_robin") as fleet:
            for _ in range(5):
                await fleet.generate("hi", max_tokens=4, session="user-42")
                await drain(fleet, session="user-42")
        assert sorted(s.count() for s in replicas) == [0, 0, 10]
    with servers(3) as replicas:
        async with fleet_of(replicas, policy="session") as fleet:
            for n in range(6):
                await fleet.generate(f"from user-{n % 2}", max_tokens=4, session=f"user-{n % 2}")
            for _ in range(3):
                await fleet.generate("no key", max_tokens=4)  # the least loaded: spread
        for prompt in ("from user-0", "from user-1"):
            assert [sum(r.body["prompt"] == prompt for r in s.seen()) for s in replicas].count(3) == 1
        assert [sum(r.body["prompt"] == "no key" for r in s.seen()) for s in replicas] == [1, 1, 1]


async def test_an_llm_accepts_a_session_key_and_sends_nothing_for_it() -> None:
    with FaultServer(model="tiny") as server:
        async with unillm.connect("vllm", server.url) as llm:
            await llm.generate("hi", max_tokens=4, session="user-1")
        assert "session" not in server.seen()[0].body
    with pytest.raises(unillm.InvalidOptions, match="session"):
        unillm.connect("vllm", "http://127.0.0.1:1").stream("hi", session="")


# -- failover ----------------------------------------------------------------------------------
async def test_refused_replica_fails_over_and_is_ejected() -> None:
    with servers(2) as (a, b):
        async with fleet_of([a, b]) as fleet:
            await fleet.info()
            a.stop()
            for _ in range(3):
                assert (await fleet.generate("hi", max_tokens=4)).text == TEXT
                assert await drain(fleet) == TEXT
            stats = fleet.stats().replica(a.url)
        assert b.count() == 6
        assert stats.state == "ejected"
        assert stats.errors == 1  # ejected after the first refusal: no more attempts meanwhile
        assert stats.available_in_s is not None


async def test_503_before_the_answer_fails_over_and_cools_the_replica() -> None:
    with servers(2) as (a, b):
        a.fail(503, times=1)
        async with fleet_of([a, b]) as fleet:
            assert await drain(fleet) == TEXT
            stats = fleet.stats().replica(a.url)
        assert (a.count(), b.count()) == (1, 1)
        assert (stats.state, stats.overloads, stats.errors) == ("cooling", 1, 0)


async def test_a_started_stream_is_never_retried_elsewhere() -> None:
    with servers(2) as (a, b):
        a.drop(after=2)
        async with fleet_of([a, b]) as fleet:
            with pytest.raises(unillm.StreamInterrupted) as e:
                await drain(fleet)
            assert fleet.stats().replica(a.url).state == "ejected"
        assert e.value.partial_text == "Hello,"
        assert (a.count(), b.count()) == (1, 0)


async def test_a_stalled_replica_times_out_before_headers_and_fails_over() -> None:
    with servers(2) as (a, b):
        a.stall()
        llms = [unillm.connect("vllm", s.url, timeouts=Timeouts(connect=1, read=0.3)) for s in (a, b)]
        async with Fleet(llms) as fleet:
            assert (await fleet.generate("hi", max_tokens=4)).text == TEXT
        assert (a.count(), b.count()) == (1, 1)


async def test_errors_of_the_request_itself_are_not_failed_over() -> None:
    with servers(2) as (a, b):
        a.fail(400, message="bad prompt")
        async with fleet_of([a, b]) as fleet:
            with pytest.raises(unillm.InvalidRequest, match="bad prompt"):
                await fleet.generate("hi", max_tokens=4)
            assert fleet.stats().replica(a.url).state == "healthy"
        assert (a.count(), b.count()) == (1, 0)


async def test_a_429_retry_after_replica_gets_nothing_during_its_cooldown() -> None:
    with servers(2) as (a, b):
        a.fail(429, times=1, retry_after="2")
        async with fleet_of([a, b]) as fleet:
            await fleet.generate("hi", max_tokens=4)  # a: 429 -> b
            refused_at = a.seen()[0].at
            for _ in range(200):  # until a takes requests again (bounded)
                await fleet.generate("hi", max_tokens=4)
                if a.count() > 1:
                    break
                await anyio.sleep(0.02)
        a_times = [r.at for r in a.seen()]
        assert len(a_times) == 2
        assert a_times[1] - refused_at >= 2.0  # nothing reached it inside the Retry-After window
        assert b.count() >= 2


async def test_every_replica_cooling_gives_overloaded_with_the_earliest_retry_after() -> None:
    with servers(2) as (a, b):
        a.fail(429, retry_after="30")
        b.fail(503, retry_after="20")
        async with fleet_of([a, b]) as fleet:
            with pytest.raises(unillm.Overloaded) as first:
                await fleet.generate("hi", max_tokens=4)
            with pytest.raises(unillm.Overloaded) as second:
                await drain(fleet)  # refused without sending anything
        assert first.value.retry_after is not None and 19 < first.value.retry_after <= 20
        assert second.value.retry_after is not None and second.value.retry_after <= 20
        assert (a.count(), b.count()) == (1, 1)


async def test_a_replica_llm_does_not_retry_429_itself_inside_a_fleet() -> None:
    with servers(2) as (a, b):
        a.fail(429, times=3, retry_after="0")
        llms = [unillm.connect("vllm", s.url) for s in (a, b)]  # default retries: 4 attempts
        async with Fleet(llms) as fleet:
            await fleet.generate("hi", max_tokens=4)
        assert (a.count(), b.count()) == (1, 1)


async def test_all_replicas_down_is_a_typed_error_not_a_hang() -> None:
    with servers(2) as (a, b):
        a.stop()
        b.stop()
        async with fleet_of([a, b]) as fleet:
            with pytest.raises(unillm.EngineUnavailable, match="no replica of the fleet answered"):
                await fleet.generate("hi", max_tokens=4)
            with pytest.raises(unillm.EngineUnavailable, match="next trial request"):
                await drain(fleet)


async def test_ejected_replica_comes_back_after_a_half_open_trial() -> None:
    with servers(2) as (a, b):
        async with fleet_of([a, b], ejection=Backoff(0.2, 1.0)) as fleet:
            await fleet.info()
            a.stop()
            await fleet.generate("hi", max_tokens=4)
            assert fleet.stats().replica(a.url).state == "ejected"
            a.start()  # same port
            wait = fleet.stats().replica(a.url).available_in_s
            assert wait is not None
            await anyio.sleep(wait)
            assert fleet.stats().replica(a.url).state == "half_open"
            for _ in range(2):
                await fleet.generate("hi", max_tokens=4)
            assert fleet.stats().replica(a.url).state == "healthy"
        assert a.count() == 1


async def test_health_probe_brings_a_recovered_replica_back() -> None:
    with servers(2) as (a, b):
        async with fleet_of([a, b]) as fleet:
            await fleet.info()
            a.stop()
            assert await fleet.health() is True  # b answers
            assert fleet.stats().replica(a.url).state == "ejected"
            a.start()
            assert await fleet.health() is True
            assert fleet.stats().replica(a.url).state == "healthy"


async def test_a_replica_down_at_discovery_is_checked_before_it_serves() -> None:
    with servers(1) as (b,), FaultServer(model="other") as a:
        port = a.port
        a.stop()
        async with fleet_of([a, b], ejection=Backoff(0.05, 0.05)) as fleet:
            await fleet.generate("hi", max_tokens=4)  # discovery: a is down, b serves
            a.start()
            assert a.port == port
            await anyio.sleep(0.06)
            for _ in range(3):
                await fleet.generate("hi", max_tokens=4)
            stats = fleet.stats().replica(a.url)
        assert stats.state == "mismatched"
        assert "serves 'other'" in (stats.last_error or "")
        assert (a.count(), b.count()) == (0, 4)


# -- the rest of the LLM API -------------------------------------------------------------------
async def test_adapters_load_and_unload_fan_out_to_every_replica() -> None:
    with servers(2, runtime_lora=True) as (a, b):
        async with fleet_of([a, b]) as fleet:
            await fleet.loras.load("sql", "/adapters/sql")
            assert a.loras == b.loras == ("sql",)
            assert [x.name for x in await fleet.loras.list()] == ["sql"]
            await fleet.generate("hi", max_tokens=4, lora="sql")
            await fleet.loras.unload("sql")
            assert list(a.loras) == list(b.loras) == []


async def test_adapter_load_failing_on_some_replicas_names_them() -> None:
    with servers(2, runtime_lora=True) as (a, b):
        b.loras = ("sql",)
        async with fleet_of([a, b]) as fleet:
            with pytest.raises(unillm.FanOutFailed, match="1 of 2 replicas") as e:
                await fleet.loras.load("sql", "/adapters/sql")
            assert await fleet.loras.list() == [unillm.LoraInfo(name="sql", path="/adapters/sql")]
        assert list(e.value.failures) == [b.url]
        assert isinstance(e.value.failures[b.url], unillm.InvalidRequest)
        assert e.value.succeeded == [a.url]


async def test_metrics_are_labelled_per_replica() -> None:
    with servers(2) as (a, b):
        a.metrics_text = "vllm:num_requests_running 2\n"
        b.metrics_text = "vllm:num_requests_running 3\n"
        async with fleet_of([a, b]) as fleet:
            m = await fleet.metrics()
            b.stop()
            partial = await fleet.metrics()
    assert m.value("vllm:num_requests_running") == 5
    assert m.value("vllm:num_requests_running", replica=b.url) == 3
    assert m.value("unillm_replica_up") == 2
    assert partial.value("unillm_replica_up", replica=b.url) == 0
    assert partial.value("vllm:num_requests_running") == 2


def _vllm_metrics(waiting: int, ttft_count: int, tokens: int) -> str:
    return (
        f"vllm:num_requests_waiting {waiting}\nvllm:generation_tokens_total {tokens}\n"
        "# TYPE vllm:time_to_first_token_seconds histogram\n"
        f'vllm:time_to_first_token_seconds_bucket{{le="0.1"}} {ttft_count}\n'
        f'vllm:time_to_first_token_seconds_bucket{{le="+Inf"}} {ttft_count}\n'
        f"vllm:time_to_first_token_seconds_sum {0.05 * ttft_count}\n"
        f"vllm:time_to_first_token_seconds_count {ttft_count}\n"
    )


async def test_metrics_normalize_per_replica_and_merged() -> None:
    with servers(2) as (a, b):
        a.metrics_text = _vllm_metrics(waiting=1, ttft_count=2, tokens=10)
        b.metrics_text = _vllm_metrics(waiting=4, ttft_count=6, tokens=30)
        async with fleet_of([a, b]) as fleet:
            m = await fleet.metrics()
    per = m.per_replica()
    assert (per[a.url].waiting, per[b.url].waiting) == (1, 4)
    merged = m.normalized()
    assert merged == unillm.metrics.merge([per[a.url], per[b.url]])
    assert (merged.waiting, merged.generation_tokens) == (5, 40)
    assert merged.ttft is not None and merged.ttft.count == 8 and merged.ttft.mean == pytest.approx(0.05)
    assert merged.running is None  # not exposed by these replicas: None, not 0


async def test_info_and_capabilities_are_the_replicas() -> None:
    with servers(2) as (a, b):
        async with fleet_of([a, b]) as fleet:
            info = await fleet.info()
            caps = await fleet.capabilities()
    assert (info.engine, info.model, info.version) == ("vllm", "tiny", "0.32.0")
    assert caps.engine == "vllm"
    assert caps.supports(unillm.Feature.REGEX)


def test_blocking_twin_of_a_fleet_routes_too() -> None:
    with servers(2) as (a, b):
        fleet = fleet_of([a, b])
        with fleet.blocking() as llm:
            assert llm.generate("hi", max_tokens=4).text == TEXT
            assert "".join(d.text for d in llm.stream("hi", max_tokens=4)) == TEXT
            assert llm.info().model == "tiny"
        assert (a.count(), b.count()) == (1, 1)


def test_from_config_with_a_list_of_urls_gives_a_fleet() -> None:
    fleet = unillm.from_config(
        {
            "engine": "vllm",
            "base_url": ["http://127.0.0.1:1", "http://127.0.0.1:2"],
            "policy": "least_load",
            "defaults": {"max_tokens": 8},
        }
    )
    assert isinstance(fleet, Fleet)
    assert (fleet.policy, fleet.defaults) == ("least_load", {"max_tokens": 8})
    env = {"UNILLM_BASE_URL": "http://127.0.0.1:1, http://127.0.0.1:2", "UNILLM_POLICY": "prefix"}
    from_env = unillm.from_config({"engine": "vllm"}, env=env)
    assert isinstance(from_env, Fleet)
    assert from_env.base_urls == ["http://127.0.0.1:1", "http://127.0.0.1:2"]
    with pytest.raises(unillm.ConfigError, match="policy routes between replicas"):
        unillm.load_config({"engine": "vllm", "base_url": "http://127.0.0.1:1", "policy": "prefix"})
    with pytest.raises(unillm.ConfigError, match="unknown routing policy"):
        unillm.from_config({"engine": "vllm", "base_url": ["http://127.0.0.1:1"], "policy": "nope"})


def test_sglang_dsl_programs_run_on_a_fleet() -> None:
    import sglang as sgl  # type: ignore[import-untyped]
    from unillm_sglang.dsl import UnillmBackend

    @sgl.function
    def greet(s: Any) -> None:
        s += "Say hi: " + sgl.gen("answer", max_tokens=4)

    with servers(2) as (a, b):
        with UnillmBackend(fleet_of([a, b])) as backend:
            states = greet.run_batch([{}, {}], backend=backend)
        assert [st["answer"] for st in states] == [TEXT, TEXT]
        assert (a.count(), b.count()) == (1, 1)


def test_stats_have_a_stable_shape() -> None:
    fleet = unillm.connect("vllm", ["http://127.0.0.1:1", "http://127.0.0.1:2"])
    stats = fleet.stats()
    assert stats.policy == "round_robin"
    assert stats.replica("http://127.0.0.1:2/").model_dump() == {
        "url": "http://127.0.0.1:2",
        "state": "healthy",
        "in_flight": 0,
        "requests": 0,
        "errors": 0,
        "overloads": 0,
        "available_in_s": None,
        "waiting": None,
        "last_error": None,
    }
    with pytest.raises(unillm.InvalidOptions, match="not a replica"):
        stats.replica("http://127.0.0.1:3")
    assert time.monotonic() > 0


async def test_a_half_open_replica_is_healthy_as_soon_as_its_trial_stream_starts() -> None:
    with servers(2) as (a, b):
        async with fleet_of([a, b], ejection=Backoff(0.05, 0.05)) as fleet:
            await fleet.info()
            a.stop()
            await fleet.generate("hi", max_tokens=4)  # a refused -> ejected, b answers
            a.start()
            a.endless()
            await anyio.sleep(0.06)
            async with fleet.stream("hi", max_tokens=4) as s:
                deltas = aiter(s)
                await anext(deltas)  # started and held open
                assert s.replica == a.url  # type: ignore[attr-defined]
                assert fleet.stats().replica(a.url).state == "healthy"  # while the trial streams


async def test_overloaded_retry_after_counts_an_ejected_replicas_next_trial() -> None:
    with servers(2) as (a, b):
        async with fleet_of([a, b], ejection=Backoff(5.0, 5.0)) as fleet:
            await fleet.info()
            a.fail(429, retry_after="60")
            b.stop()
            with pytest.raises(unillm.Overloaded) as e:
                await fleet.generate("hi", max_tokens=4)  # a: 429, b: refused
    assert e.value.retry_after is not None and 4 < e.value.retry_after <= 5


async def test_least_load_counts_the_engines_waiting_queue_from_its_metrics() -> None:
    with FaultServer(model="tiny") as a, FaultServer(model="tiny") as b:
        a.metrics_text = "vllm:num_requests_waiting 5\nvllm:num_requests_running 8\n"
        b.metrics_text = "vllm:num_requests_waiting 0\nvllm:num_requests_running 1\n"
        llms = [unillm.connect("vllm", s.url, timeouts=Timeouts(connect=1, read=2)) for s in (a, b)]
        async with Fleet(llms, policy="least_load") as fleet:
            await fleet.generate("hi", max_tokens=4)  # starts the first background scrape
            for _ in range(200):  # until the scrape has landed (bounded)
                if fleet.stats().replica(a.url).waiting is not None:
                    break
                await anyio.sleep(0.01)
            assert [r.waiting for r in fleet.stats().replicas] == [5, 0]
            before = a.count()
            for _ in range(4):
                await fleet.generate("hi", max_tokens=4)
        assert a.count() == before  # a's queue of 5 outweighs b's single request in flight
        assert a.count("/metrics") >= 1 and b.count("/metrics") >= 1


async def test_least_load_without_engine_metrics_counts_requests_in_flight_only() -> None:
    with servers(2) as (a, b):  # no /metrics: a 404, asked once, then never again
        async with fleet_of([a, b], policy="least_load", metrics_interval=0.0) as fleet:
            for _ in range(8):  # every pick may start a scrape (interval 0), after the last one
                await fleet.generate("hi", max_tokens=4)
                for _ in range(200):
                    if fleet._scrape is None:
                        break
                    await anyio.sleep(0.01)
        assert (a.count(), b.count()) == (4, 4)
        assert a.count("/metrics") == b.count("/metrics") == 1
