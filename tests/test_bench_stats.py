"""unillm bench's statistics follow `vllm bench serve`'s definitions (hand-computed numbers)."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from unillm.bench.stats import RequestRecord, Slo, describe, percentile, summarize


def records() -> list[RequestRecord]:
    return [
        RequestRecord(start=0.0, ttft=0.1, itl=[0.02, 0.04], latency=0.16, input_tokens=10, output_tokens=3),
        RequestRecord(start=0.1, ttft=0.3, itl=[0.05], latency=0.35, input_tokens=20, output_tokens=2),
        RequestRecord(start=0.2, success=False, error="EngineUnavailable: refused", input_tokens=7),
        RequestRecord(start=0.3, ttft=0.2, itl=[], latency=0.2, input_tokens=5, output_tokens=1),
    ]


def test_counts_and_throughputs_cover_successful_requests_only() -> None:
    s = summarize(records(), duration=2.0)
    assert (s.completed, s.failed) == (3, 1)
    assert (s.total_input_tokens, s.total_output_tokens) == (35, 6)
    assert s.request_throughput == pytest.approx(1.5)
    assert s.output_throughput == pytest.approx(3.0)
    assert s.total_token_throughput == pytest.approx(20.5)
    assert s.request_goodput is None  # no SLO given


def test_ttft_statistics_in_milliseconds() -> None:
    m = summarize(records(), duration=2.0).metrics
    assert m["mean_ttft_ms"] == pytest.approx(200.0)
    assert m["median_ttft_ms"] == pytest.approx(200.0)
    assert m["std_ttft_ms"] == pytest.approx(math.sqrt(20000 / 3))  # population std, as numpy
    assert m["p90_ttft_ms"] == pytest.approx(280.0)  # linear between closest ranks
    assert m["p99_ttft_ms"] == pytest.approx(298.0)


def test_tpot_excludes_the_first_token_and_single_token_answers() -> None:
    m = summarize(records(), duration=2.0).metrics
    # (0.16 - 0.1) / (3 - 1) = 30 ms and (0.35 - 0.3) / (2 - 1) = 50 ms; the 1-token answer is left out
    assert m["mean_tpot_ms"] == pytest.approx(40.0)
    assert m["std_tpot_ms"] == pytest.approx(10.0)
    assert m["p90_tpot_ms"] == pytest.approx(48.0)


def test_itl_pools_every_gap_of_every_request() -> None:
    m = summarize(records(), duration=2.0).metrics
    assert m["mean_itl_ms"] == pytest.approx((20 + 40 + 50) / 3)
    assert m["median_itl_ms"] == pytest.approx(40.0)
    assert m["p99_itl_ms"] == pytest.approx(49.8)


def test_e2el_is_the_request_latency() -> None:
    m = summarize(records(), duration=2.0).metrics
    assert m["median_e2el_ms"] == pytest.approx(200.0)
    assert m["mean_e2el_ms"] == pytest.approx((160 + 350 + 200) / 3)


def test_goodput_counts_requests_meeting_every_slo() -> None:
    # ttft 100 ok / tpot 30 ok; ttft 300 too slow; ttft 200 ok and a 1-token answer has TPOT 0
    s = summarize(records(), duration=2.0, slo=Slo(ttft_ms=250, tpot_ms=40))
    assert s.request_goodput == pytest.approx(1.0)
    assert summarize(records(), duration=2.0, slo=Slo(e2el_ms=100)).request_goodput == 0.0


def test_percentile_keys_follow_the_requested_percentiles() -> None:
    m = summarize(records(), duration=1.0, percentiles=(25, 99.9)).metrics
    assert "p25_ttft_ms" in m and "p99.9_itl_ms" in m and "p90_ttft_ms" not in m


def test_empty_series_are_none_not_zero() -> None:
    failed = [RequestRecord(start=0.0, success=False, error="x")]
    s = summarize(failed, duration=1.0)
    assert s.completed == 0 and s.failed == 1
    assert s.metrics["median_ttft_ms"] is None and s.metrics["p99_e2el_ms"] is None


def test_percentile_matches_numpy_default() -> None:
    rng = random.Random(7)
    for n in (1, 2, 5, 50, 333):
        values = [rng.expovariate(3.0) for _ in range(n)]
        for p in (0, 1, 25, 50, 90, 99, 99.9, 100):
            assert percentile(values, p) == pytest.approx(float(np.percentile(values, p)))


def test_describe_std_matches_numpy() -> None:
    values = [0.011, 0.02, 0.5, 0.031, 0.07]
    d = describe("itl", values)
    assert d["std_itl_ms"] == pytest.approx(float(np.std(values)) * 1000)
    assert d["mean_itl_ms"] == pytest.approx(float(np.mean(values)) * 1000)


def test_bad_inputs_are_refused() -> None:
    with pytest.raises(ValueError, match="duration"):
        summarize(records(), duration=0)
    with pytest.raises(ValueError, match="empty"):
        percentile([], 50)
    with pytest.raises(ValueError, match="greater than 0"):
        Slo(ttft_ms=-1)


def test_mean_ci_uses_students_t() -> None:
    from unillm.bench.stats import mean_ci, t_quantile_975

    mean, half = mean_ci([10.0, 12.0, 11.0])
    assert mean == 11.0 and half == pytest.approx(4.303 * 1.0 / 3**0.5, rel=1e-3)
    assert mean_ci([5.0]) == (5.0, None)
    assert t_quantile_975(1) == pytest.approx(12.706, rel=1e-3)
    assert t_quantile_975(100) == pytest.approx(1.984, rel=1e-3)
    with pytest.raises(ValueError, match="degrees of freedom"):
        t_quantile_975(0)


def test_pareto_front_keeps_the_points_nothing_beats() -> None:
    from unillm.bench.stats import pareto_front

    points = [(10.0, 5.0), (20.0, 8.0), (15.0, 9.0), (30.0, 20.0), (5.0, 6.0), (float("nan"), 1.0)]
    assert pareto_front(points) == [0, 1, 3]


def test_cancelled_requests_are_counted_apart_and_sessions_judged_on_the_rest() -> None:
    from unillm.bench.stats import RequestRecord, Slo, summarize

    def rec(session: str, ttft: float, **kw: object) -> RequestRecord:
        return RequestRecord(start=0, ttft=ttft, latency=ttft, output_tokens=1, session=session, **kw)  # type: ignore[arg-type]

    records = [
        rec("a", 0.1),
        rec("a", 0.1, success=False, cancelled_after=1),
        rec("b", 0.1),
        rec("b", 2.0),
        rec("c", 0.1, success=False, error="boom"),
    ]
    s = summarize(records, 1.0, slo=Slo(ttft_ms=500))
    assert (s.completed, s.cancelled, s.failed, s.sessions) == (3, 1, 1, 3)
    assert s.session_goodput == 1.0  # a: its answered turn met the SLO; b: too slow; c: failed
    assert s.request_goodput == 2.0
