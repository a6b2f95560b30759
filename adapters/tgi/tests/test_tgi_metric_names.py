"""TGI's documented Prometheus names onto unillm's metrics schema.

TGI cannot run here; ``data/metrics-tgi-3.3-documented.prom`` is hand-written from TGI's metrics
reference (names, types and units of TGI 3.x).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from unillm_tgi import TGIAdapter

from unillm.metrics import EngineMetrics, NormalizedMetrics

TEXT = (Path(__file__).parent / "data" / "metrics-tgi-3.3-documented.prom").read_text()


def tgi() -> NormalizedMetrics:
    mapping = TGIAdapter(runtime="docker").metric_names("3.3.7")
    return EngineMetrics.parse(TEXT, engine="tgi", mapping=mapping).normalized()


def test_documented_names_normalize() -> None:
    n = tgi()
    assert (n.running, n.waiting) == (2, 1)
    assert n.e2e is not None and n.e2e.count == 4 and n.e2e.p50 == pytest.approx(0.3)
    assert n.queue is not None and n.queue.mean == pytest.approx(0.0035)
    assert n.tpot is not None and n.tpot.count == 4
    assert (n.prompt_tokens, n.generation_tokens, n.spec_accepted_tokens) == (120, 90, 12)


def test_signals_tgi_does_not_measure_are_none() -> None:
    n = tgi()
    assert n.ttft is None and n.itl is None and n.kv_cache_usage is None
    assert n.prefix_cache_hit_ratio is None
    assert n.spec_acceptance_rate is None  # it counts speculated tokens, not proposals
