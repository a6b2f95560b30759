"""SGLang's Prometheus names onto unillm's metrics schema, against /metrics of the real SGLang-CPU.

``data/metrics-sglang-0.5.23.prom`` was captured by ``tests/capture_metrics.py`` from SGLang 0.5.23
(the CPU test recipe, tiny model, launched with ``--enable-metrics``; no speculative decoding).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from unillm_sglang import SGLangAdapter

from unillm.metrics import EngineMetrics

CAPTURE = Path(__file__).parent / "data" / "metrics-sglang-0.5.23.prom"
TEXT = CAPTURE.read_text()
REQUESTS = int(re.search(r"after (\d+) requests", TEXT.splitlines()[0]).group(1))  # type: ignore[union-attr]
MAPPING = SGLangAdapter().metric_names("0.5.23")


def test_capture_normalizes_to_the_raw_values() -> None:
    m = EngineMetrics.parse(TEXT, engine="sglang", mapping=MAPPING)
    n = m.normalized()
    assert n.running == m.value("sglang:num_running_reqs")
    assert n.waiting == m.value("sglang:num_queue_reqs")
    assert n.kv_cache_usage == m.value("sglang:token_usage")
    assert n.generation_tokens == m.value("sglang:generation_tokens_total") and n.generation_tokens
    assert n.ttft is not None and n.e2e is not None and n.ttft.count == n.e2e.count == REQUESTS
    assert n.itl is not None and n.itl.count > n.ttft.count
    assert n.tpot is not None and n.queue is not None
    cached, prompt = m.value("sglang:cached_tokens_total"), m.value("sglang:prompt_tokens_total")
    assert cached and prompt and n.prefix_cache_hit_ratio == pytest.approx(cached / prompt)


def test_speculative_gauges_at_zero_when_not_speculating_are_none() -> None:
    n = EngineMetrics.parse(TEXT, engine="sglang", mapping=MAPPING).normalized()
    assert EngineMetrics.parse(TEXT).value("sglang:spec_accept_length") == 0  # SGLang's own zero
    assert n.spec_acceptance_rate is None and n.spec_acceptance_length is None


def test_speculation_comes_from_its_gauges() -> None:
    text = "sglang:spec_verify_calls_total 10\nsglang:spec_accept_length 2.5\nsglang:spec_accept_rate 0.5\n"
    n = EngineMetrics.parse(text, engine="sglang", mapping=MAPPING).normalized()
    assert (n.spec_drafts, n.spec_acceptance_length, n.spec_acceptance_rate) == (10, 2.5, 0.5)
