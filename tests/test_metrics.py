"""Engine metrics normalized onto one schema: real captured /metrics text, TGI's documented names.

Fixtures in tests/data/metrics: ``vllm-*.prom`` and ``sglang-*.prom`` were captured from the real
engines running here by ``tests/data/metrics/capture.py`` (engine version in the file name and
header); ``tgi-3.3-documented.prom`` is hand-written from TGI's metrics reference (TGI cannot run here).
"""

from __future__ import annotations

import re
from pathlib import Path

import httpx
import pytest
from unillm_mlx import MLXAdapter
from unillm_sglang import SGLangAdapter
from unillm_tgi import TGIAdapter
from unillm_vllm import VLLMAdapter

import unillm
from unillm.metrics import EngineMetrics, Histogram, MetricNames, NormalizedMetrics, diff, merge

DATA = Path(__file__).parent / "data" / "metrics"
VLLM_FILE = next(DATA.glob("vllm-*.prom"))
VLLM_VERSION = VLLM_FILE.stem.removeprefix("vllm-")
SGLANG_FILE = next(DATA.glob("sglang-*.prom"))


def requests_in(path: Path) -> int:
    """The number of requests a capture's header says the engine had answered."""
    found = re.search(r"after (\d+) requests", path.read_text().splitlines()[0])
    assert found, path
    return int(found.group(1))


def vllm_metrics(text: str | None = None, version: str = VLLM_VERSION) -> EngineMetrics:
    return EngineMetrics.parse(text if text is not None else VLLM_FILE.read_text(), engine="vllm",
                               mapping=VLLMAdapter().metric_names(version))


def tgi_metrics() -> EngineMetrics:
    return EngineMetrics.parse((DATA / "tgi-3.3-documented.prom").read_text(), engine="tgi",
                               mapping=TGIAdapter(runtime="docker").metric_names("3.3.7"))


# -- histograms ------------------------------------------------------------------------------------
H = Histogram(buckets=((0.1, 2.0), (0.2, 6.0), (0.4, 10.0)), sum=2.5, count=12.0)


def test_quantile_interpolates_inside_the_bucket_like_prometheus() -> None:
    # rank 6 of 12 is the last observation of the (0.1, 0.2] bucket
    assert H.p50 == pytest.approx(0.2)
    # rank 3 of 12: one of the four observations in (0.1, 0.2]
    assert H.quantile(0.25) == pytest.approx(0.1 + 0.1 * (3 - 2) / 4)


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


# -- vLLM (captured) --------------------------------------------------------------------------------
def test_vllm_capture_normalizes_to_the_raw_values() -> None:
    m = vllm_metrics()
    n = m.normalized()
    assert n.engine == "vllm"
    assert n.running == m.value("vllm:num_requests_running")
    assert n.waiting == m.value("vllm:num_requests_waiting")
    assert n.kv_cache_usage == m.value("vllm:kv_cache_usage_perc")
    assert n.prompt_tokens == m.value("vllm:prompt_tokens_total") and n.prompt_tokens
    assert n.generation_tokens == m.value("vllm:generation_tokens_total") and n.generation_tokens
    for signal, family in (("ttft", "vllm:time_to_first_token_seconds"),
                           ("e2e", "vllm:e2e_request_latency_seconds"),
                           ("itl", "vllm:inter_token_latency_seconds"),
                           ("queue", "vllm:request_queue_time_seconds"),
                           ("tpot", "vllm:request_time_per_output_token_seconds")):
        h = getattr(n, signal)
        assert h is not None, signal
        assert h.count == m.value(f"{family}_count") and h.sum == m.value(f"{family}_sum")


def test_vllm_capture_has_one_ttft_per_request_and_many_more_token_gaps() -> None:
    n = vllm_metrics().normalized()
    assert n.ttft is not None and n.itl is not None and n.e2e is not None
    assert n.ttft.count == n.e2e.count == requests_in(VLLM_FILE)
    assert n.itl.count > n.ttft.count  # token-weighted: one observation per gap
    assert n.ttft.p50 is not None and 0 < n.ttft.p50 <= n.ttft.p99  # type: ignore[operator]


def test_vllm_prefix_and_speculative_ratios_come_from_the_counters() -> None:
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
    assert 0 <= n.spec_acceptance_rate <= 1  # type: ignore[operator]


def _as_old_vllm(text: str) -> str:
    """The capture as vLLM < 0.9.2 named it (gpu_* cache names; the per-iteration gap as TPOT)."""
    lines = [line for line in text.splitlines() if "request_time_per_output_token" not in line]
    old = "\n".join(lines) + "\n"
    return (old.replace("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")
            .replace("vllm:prefix_cache_", "vllm:gpu_prefix_cache_")
            .replace("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds"))


def test_old_vllm_names_are_picked_by_the_detected_version() -> None:
    new = vllm_metrics().normalized()
    old = vllm_metrics(_as_old_vllm(VLLM_FILE.read_text()), version="0.9.0").normalized()
    assert old.kv_cache_usage == new.kv_cache_usage
    assert old.prefix_cache_hit_ratio == new.prefix_cache_hit_ratio and old.prefix_cache_hits
    assert old.itl == new.itl and old.itl is not None
    assert old.tpot is None  # no per-request TPOT histogram before 0.11


def test_new_names_on_an_old_capture_are_absent_not_zero() -> None:
    n = vllm_metrics(_as_old_vllm(VLLM_FILE.read_text())).normalized()
    assert n.kv_cache_usage is None and n.prefix_cache_hits is None and n.itl is None


def test_speculative_signals_of_an_engine_without_speculation_are_none() -> None:
    text = "\n".join(line for line in VLLM_FILE.read_text().splitlines() if "spec_decode" not in line)
    n = vllm_metrics(text + "\n").normalized()
    assert (n.spec_drafts, n.spec_acceptance_rate, n.spec_acceptance_length) == (None, None, None)


# -- SGLang (captured) ----------------------------------------------------------------------------
def test_sglang_capture_normalizes_to_the_raw_values() -> None:
    path = SGLANG_FILE
    m = EngineMetrics.parse(path.read_text(), engine="sglang",
                            mapping=SGLangAdapter().metric_names(path.stem.removeprefix("sglang-")))
    n = m.normalized()
    assert n.running == m.value("sglang:num_running_reqs")
    assert n.waiting == m.value("sglang:num_queue_reqs")
    assert n.kv_cache_usage == m.value("sglang:token_usage")
    assert n.generation_tokens == m.value("sglang:generation_tokens_total") and n.generation_tokens
    assert n.ttft is not None and n.e2e is not None
    assert n.ttft.count == n.e2e.count == requests_in(path)
    assert n.itl is not None and n.itl.count > n.ttft.count
    assert n.spec_acceptance_rate is None and n.spec_acceptance_length is None  # not speculating
    cached, prompt = m.value("sglang:cached_tokens_total"), m.value("sglang:prompt_tokens_total")
    assert cached and prompt and n.prefix_cache_hit_ratio == pytest.approx(cached / prompt)


def test_sglang_speculation_comes_from_its_gauges() -> None:
    text = ("sglang:spec_verify_calls_total 10\nsglang:spec_accept_length 2.5\n"
            "sglang:spec_accept_rate 0.5\n")
    mapping = SGLangAdapter().metric_names("0.5.23")
    n = EngineMetrics.parse(text, engine="sglang", mapping=mapping).normalized()
    assert (n.spec_drafts, n.spec_acceptance_length, n.spec_acceptance_rate) == (10, 2.5, 0.5)


# -- TGI (documented names) -----------------------------------------------------------------------
def test_tgi_documented_names_normalize() -> None:
    n = tgi_metrics().normalized()
    assert (n.running, n.waiting) == (2, 1)
    assert n.e2e is not None and n.e2e.count == 4 and n.e2e.p50 == pytest.approx(0.3)
    assert n.queue is not None and n.queue.mean == pytest.approx(0.0035)
    assert n.tpot is not None and n.tpot.count == 4
    assert (n.prompt_tokens, n.generation_tokens, n.spec_accepted_tokens) == (120, 90, 12)


def test_tgi_signals_it_does_not_measure_are_none() -> None:
    n = tgi_metrics().normalized()
    assert n.ttft is None and n.itl is None and n.kv_cache_usage is None
    assert n.prefix_cache_hit_ratio is None
    assert n.spec_acceptance_rate is None  # it counts speculated tokens, not proposals


# -- snapshots: diff and merge ---------------------------------------------------------------------
def _scaled(n: NormalizedMetrics, extra_tokens: float, extra_requests: float) -> NormalizedMetrics:
    assert n.generation_tokens is not None and n.ttft is not None
    ttft = Histogram(buckets=tuple((b, c + extra_requests) for b, c in n.ttft.buckets),
                     sum=n.ttft.sum + 0.01 * extra_requests, count=n.ttft.count + extra_requests)
    return n.model_copy(update={"generation_tokens": n.generation_tokens + extra_tokens, "ttft": ttft,
                                "waiting": 7.0})


def test_diff_gives_counter_and_histogram_deltas_and_the_latest_gauges() -> None:
    before = vllm_metrics().normalized()
    after = _scaled(before, extra_tokens=40, extra_requests=2)
    window = after - before
    assert window == diff(before, after)
    assert window.generation_tokens == 40 and window.waiting == 7
    assert window.ttft is not None and window.ttft.count == 2 and window.ttft.mean == pytest.approx(0.01)
    assert window.prompt_tokens == 0  # exposed but unchanged: 0, not None
    assert window.spec_acceptance_rate is None  # no drafts in the window


def test_diff_after_an_engine_restart_counts_from_zero() -> None:
    before = vllm_metrics().normalized()
    assert before.generation_tokens is not None
    restarted = before.model_copy(update={"generation_tokens": 5.0})
    assert (restarted - before).generation_tokens == 5


def test_merge_sums_counters_and_histograms_and_averages_usage() -> None:
    one = vllm_metrics().normalized()
    two = merge([one, one])
    assert two.generation_tokens == 2 * one.generation_tokens  # type: ignore[operator]
    assert two.ttft is not None and one.ttft is not None and two.ttft.count == 2 * one.ttft.count
    assert two.ttft.p50 == pytest.approx(one.ttft.p50)  # same distribution, twice the observations
    assert two.kv_cache_usage == one.kv_cache_usage
    assert two.spec_acceptance_rate == pytest.approx(one.spec_acceptance_rate)
    assert two.engine == "vllm"


def test_merge_keeps_a_signal_only_when_every_replica_exposes_it() -> None:
    mixed = merge([vllm_metrics().normalized(), tgi_metrics().normalized()])
    assert mixed.engine == "vllm+tgi"
    assert mixed.ttft is None  # TGI has none: a partial sum would pass for a total
    assert mixed.e2e is not None and mixed.waiting is not None


def test_merge_of_nothing_is_refused() -> None:
    with pytest.raises(ValueError, match="at least one"):
        merge([])


def test_normalizing_without_a_mapping_says_how() -> None:
    with pytest.raises(ValueError, match="mapping="):
        EngineMetrics.parse(VLLM_FILE.read_text()).normalized()
    mapping = MetricNames(prompt_tokens="x_total")
    assert EngineMetrics.parse("x_total 1\n").normalized(mapping).prompt_tokens == 1


def test_normalized_view_serializes_to_standard_json() -> None:
    text = vllm_metrics().normalized().model_dump_json()
    assert "Infinity" not in text and "NaN" not in text
    assert NormalizedMetrics.model_validate_json(text) == vllm_metrics().normalized()


# -- engines without a metrics endpoint ------------------------------------------------------------
@pytest.mark.anyio
async def test_mlx_server_metrics_are_refused_before_sending() -> None:
    seen: list[str] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request.url.path)
        if request.url.path == "/v1/models":
            return httpx.Response(200, json={"data": [{"id": "m"}]})
        return httpx.Response(404)  # mlx_lm.server has no /version (server mode)

    transport = httpx.MockTransport(answer)
    async with unillm.LLM(MLXAdapter(), "http://mlx.invalid", http_transport=transport) as llm:
        with pytest.raises(unillm.UnsupportedFeature, match="no metrics endpoint") as e:
            await llm.metrics()
    assert "in_process=True" in e.value.alternative and "r.timings" in e.value.alternative
    assert "/metrics" not in seen


def test_mlx_in_process_maps_its_own_counters() -> None:
    names = MLXAdapter().metric_names("0.32.2+in-process")
    text = ("mlx:requests_total 2\nmlx:prompt_tokens_total 10\nmlx:generation_tokens_total 16\n"
            "mlx:spec_decode_num_accepted_tokens_total 0\nmlx:num_requests_running 1\n")
    n = EngineMetrics.parse(text, engine="mlx", mapping=names).normalized()
    assert (n.prompt_tokens, n.generation_tokens, n.running) == (10, 16, 1)
    assert n.ttft is None and n.waiting is None
