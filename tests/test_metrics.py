"""The normalized metrics schema: histograms, ratios, snapshots (diff) and replicas (merge).

Engine-independent: the samples here are synthetic. Each adapter's own names are tested against
/metrics captured from the real engines (vLLM, SGLang) or TGI's documented names, in
``adapters/<engine>/tests/test_<engine>_metric_names.py``.
"""

from __future__ import annotations

import pytest

from unillm.metrics import EngineMetrics, Histogram, MetricNames, NormalizedMetrics, diff, merge

NAMES = MetricNames(
    ttft="e:ttft_seconds",
    itl="e:itl_seconds",
    e2e="e:e2e_seconds",
    running="e:running",
    waiting="e:waiting",
    kv_cache_usage="e:kv_usage",
    prefix_cache_hits="e:prefix_hits_total",
    prefix_cache_queries="e:prefix_queries_total",
    spec_drafts="e:drafts_total",
    spec_draft_tokens="e:draft_tokens_total",
    spec_accepted_tokens="e:accepted_tokens_total",
    prompt_tokens="e:prompt_tokens_total",
    generation_tokens="e:generation_tokens_total",
)


def engine_text(requests: int = 4, tokens: int = 40, drafts: int = 10) -> str:
    """Two label sets (a data-parallel engine), as Prometheus text."""
    lines = [
        "# TYPE e:ttft_seconds histogram",
        "# TYPE e:e2e_seconds histogram",
        "# TYPE e:itl_seconds histogram",
    ]
    for rank in ("0", "1"):
        lab = f'rank="{rank}"'
        lines += [
            f'e:ttft_seconds_bucket{{{lab},le="0.1"}} {requests // 2}',
            f'e:ttft_seconds_bucket{{{lab},le="0.2"}} {requests}',
            f'e:ttft_seconds_bucket{{{lab},le="+Inf"}} {requests}',
            f"e:ttft_seconds_sum{{{lab}}} {0.1 * requests}",
            f"e:ttft_seconds_count{{{lab}}} {requests}",
            f'e:e2e_seconds_bucket{{{lab},le="1.0"}} {requests}',
            f'e:e2e_seconds_bucket{{{lab},le="+Inf"}} {requests}',
            f"e:e2e_seconds_sum{{{lab}}} {0.5 * requests}",
            f"e:e2e_seconds_count{{{lab}}} {requests}",
            f'e:itl_seconds_bucket{{{lab},le="0.01"}} {tokens}',
            f'e:itl_seconds_bucket{{{lab},le="+Inf"}} {tokens}',
            f"e:itl_seconds_sum{{{lab}}} {0.005 * tokens}",
            f"e:itl_seconds_count{{{lab}}} {tokens}",
            f"e:running{{{lab}}} 1",
            f"e:waiting{{{lab}}} {rank}",
            f"e:kv_usage{{{lab}}} {0.2 if rank == '0' else 0.4}",
            f"e:prefix_hits_total{{{lab}}} 30",
            f"e:prefix_queries_total{{{lab}}} 120",
            f"e:drafts_total{{{lab}}} {drafts}",
            f"e:draft_tokens_total{{{lab}}} {4 * drafts}",
            f"e:accepted_tokens_total{{{lab}}} {2 * drafts}",
            f"e:prompt_tokens_total{{{lab}}} 120",
            f"e:generation_tokens_total{{{lab}}} {tokens + requests}",
        ]
    return "\n".join(lines) + "\n"


def snapshot(**kw: int) -> NormalizedMetrics:
    return EngineMetrics.parse(engine_text(**kw), engine="e", mapping=NAMES).normalized()


# -- histograms ------------------------------------------------------------------------------------
H = Histogram(buckets=((0.1, 2.0), (0.2, 6.0), (0.4, 10.0)), sum=2.5, count=12.0)


def test_quantile_interpolates_inside_the_bucket_like_prometheus() -> None:
    assert H.p50 == pytest.approx(0.2)  # rank 6 of 12: the last observation of (0.1, 0.2]
    assert H.quantile(0.25) == pytest.approx(0.1 + 0.1 * (3 - 2) / 4)  # rank 3: 1 of 4 in (0.1, 0.2]


def test_quantile_beyond_the_last_finite_bucket_is_that_bound() -> None:
    assert H.p99 == 0.4  # 2 of 12 observations are above 0.4: the estimate cannot say more


def test_mean_is_exact_and_empty_histograms_have_no_statistics() -> None:
    assert H.mean == pytest.approx(2.5 / 12)
    empty = Histogram(buckets=((0.1, 0.0),), sum=0.0, count=0.0)
    assert empty.mean is None and empty.p50 is None


def test_quantile_outside_0_1_is_refused() -> None:
    with pytest.raises(ValueError, match=r"0\.\.1"):
        H.quantile(1.5)


def test_histograms_subtract_to_the_window_and_add_across_engines() -> None:
    before = Histogram(buckets=((0.1, 1.0), (0.2, 2.0), (0.4, 2.0)), sum=0.3, count=2.0)
    window = H - before
    assert window.count == 10 and window.buckets == ((0.1, 1.0), (0.2, 4.0), (0.4, 8.0))
    assert window.sum == pytest.approx(2.2)
    both = H + before
    assert both.count == 14 and both.buckets[-1] == (0.4, 12.0)


def test_a_histogram_that_shrank_means_a_restart_so_the_window_is_all_of_after() -> None:
    assert (Histogram(buckets=((0.1, 1.0),), sum=0.05, count=1.0) - H).count == 1


# -- normalizing samples ---------------------------------------------------------------------------
def test_label_sets_add_up_and_fractions_average() -> None:
    n = snapshot()
    assert n.engine == "e"
    assert (n.running, n.waiting) == (2, 1)  # summed over the two ranks
    assert n.kv_cache_usage == pytest.approx(0.3)  # a fraction: averaged, never above 1
    assert n.ttft is not None and n.ttft.count == 8 and n.ttft.p50 == pytest.approx(0.1)
    assert n.itl is not None and n.itl.count == 80 and n.itl.mean == pytest.approx(0.005)


def test_ratios_come_from_the_counters() -> None:
    n = snapshot(drafts=10)
    assert n.prefix_cache_hit_ratio == pytest.approx(60 / 240)
    assert n.spec_acceptance_rate == pytest.approx(40 / 80)  # accepted / proposed tokens
    assert n.spec_acceptance_length == pytest.approx(1 + 40 / 20)  # tokens per verification step


def test_signals_not_mapped_or_not_exposed_are_none_not_zero() -> None:
    n = snapshot()
    assert n.tpot is None and n.queue is None  # not mapped
    missing = MetricNames(ttft="absent_seconds", waiting="absent_waiting")
    m = EngineMetrics.parse(engine_text(), engine="e", mapping=missing).normalized()
    assert m.ttft is None and m.waiting is None and m.generation_tokens is None


def test_speculation_exposed_but_idle_has_no_acceptance_figures() -> None:
    n = snapshot(drafts=0)
    assert n.spec_drafts == 0 and n.spec_acceptance_rate is None and n.spec_acceptance_length is None


def test_engine_gauges_stand_in_when_there_are_no_counters() -> None:
    gauges = MetricNames(
        prefix_cache_hit_ratio="hit_rate",
        spec_acceptance_rate="rate",
        spec_acceptance_length="length",
        spec_drafts="verify_total",
    )
    n = EngineMetrics.parse(
        "hit_rate 0.25\nrate 0.5\nlength 2.5\nverify_total 10\n", mapping=gauges
    ).normalized()
    assert (n.prefix_cache_hit_ratio, n.spec_acceptance_rate, n.spec_acceptance_length) == (0.25, 0.5, 2.5)
    idle = EngineMetrics.parse("rate 0\nlength 0\n", mapping=gauges).normalized()
    assert idle.spec_acceptance_rate is None and idle.spec_acceptance_length is None  # 0: nothing speculated


def test_normalizing_without_a_mapping_says_how() -> None:
    with pytest.raises(ValueError, match="mapping="):
        EngineMetrics.parse(engine_text()).normalized()
    mapping = MetricNames(prompt_tokens="x_total")
    assert EngineMetrics.parse("x_total 1\n").normalized(mapping).prompt_tokens == 1


def test_normalized_view_serializes_to_standard_json() -> None:
    text = snapshot().model_dump_json()
    assert "Infinity" not in text and "NaN" not in text
    assert NormalizedMetrics.model_validate_json(text) == snapshot()


# -- snapshots: diff ------------------------------------------------------------------------------
def test_diff_gives_counter_and_histogram_deltas_and_the_latest_gauges() -> None:
    before = snapshot(requests=4, tokens=40, drafts=10)
    after = snapshot(requests=6, tokens=70, drafts=10)
    window = after - before
    assert window == diff(before, after)
    assert window.generation_tokens == 2 * ((70 + 6) - (40 + 4))
    assert window.ttft is not None and window.ttft.count == 4  # 2 more requests on each rank
    assert window.prompt_tokens == 0  # exposed but unchanged: 0, not None
    assert window.spec_acceptance_rate is None  # no drafts in the window
    assert (window.running, window.kv_cache_usage) == (after.running, after.kv_cache_usage)


def test_diff_after_an_engine_restart_counts_from_zero() -> None:
    before = snapshot(tokens=40)
    restarted = before.model_copy(update={"generation_tokens": 5.0})
    assert (restarted - before).generation_tokens == 5


# -- replicas: merge -------------------------------------------------------------------------------
def test_merge_sums_counters_and_histograms_and_averages_usage() -> None:
    one = snapshot()
    two = merge([one, one])
    assert two.generation_tokens == 2 * one.generation_tokens  # type: ignore[operator]
    assert two.ttft is not None and one.ttft is not None and two.ttft.count == 2 * one.ttft.count
    assert two.ttft.p50 == pytest.approx(one.ttft.p50)  # same distribution, twice the observations
    assert two.kv_cache_usage == one.kv_cache_usage
    assert two.spec_acceptance_rate == pytest.approx(one.spec_acceptance_rate)
    assert two.engine == "e"


def test_merge_keeps_a_signal_only_when_every_replica_exposes_it() -> None:
    other = EngineMetrics.parse("q 3\n", engine="other", mapping=MetricNames(waiting="q")).normalized()
    mixed = merge([snapshot(), other])
    assert mixed.engine == "e+other"
    assert mixed.waiting == 1 + 3
    assert mixed.ttft is None  # one replica has none: a partial sum would pass for a total


def test_merge_of_nothing_is_refused() -> None:
    with pytest.raises(ValueError, match="at least one"):
        merge([])
