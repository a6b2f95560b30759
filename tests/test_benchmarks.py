"""The benchmarks still run and end with their JSON line (numbers are reported, never asserted)."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any, cast

import pytest

import unillm

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def last_json_line(script: str, *args: str) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / script), *args],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def test_client_overhead_benchmark_compares_every_client_in_one_run() -> None:
    result = last_json_line("client_overhead.py", "--quick")
    assert result["errors"] == {}
    for key in ("per_request_vs_httpx", "per_stream_vs_httpx", "import_s", "openai_per_stream_vs_httpx"):
        assert isinstance(result[key], float)


def test_semantic_routing_benchmark_measures_the_decision() -> None:
    result = last_json_line("semantic_routing.py", "--quick")
    assert isinstance(result["decision_us"], float) and result["routes"] == 6


@pytest.mark.engine
def test_mlx_constrained_benchmark_measures_each_grammar_engine() -> None:
    result = last_json_line("mlx_constrained.py", "--quick")
    assert result


def test_routing_benchmark_compares_the_fleet_with_a_direct_client() -> None:
    result = last_json_line("routing.py", "--quick", "--no-engines")
    for key in (
        "fleet_per_request_vs_direct",
        "fleet_per_stream_vs_direct",
        "fleet_prefix_per_request_vs_direct",
    ):
        assert isinstance(result[key], float)
    assert result["requests_per_s"] == {}  # --no-engines: the real-replica part is left out


def test_harness_overhead_benchmark_compares_unillm_bench_with_a_bare_loop() -> None:
    result = last_json_line("harness_overhead.py", "--rounds", "1", "--requests", "40", "--concurrency", "2")
    overhead = result["per_concurrency"]["2"]["unillm_overhead"]  # type: ignore[index]
    assert isinstance(overhead["throughput_ratio"], float) and isinstance(overhead["e2el_us"], float)


def test_embed_overhead_benchmark_compares_unillm_with_httpx() -> None:
    result = last_json_line("embed_overhead.py", "--quick")
    assert isinstance(result["embed_vs_httpx"], float) and result["dimensions"] == 384


def test_structured_coverage_benchmark_classifies_every_schema_of_a_checkout(tmp_path: Path) -> None:
    sys.path.insert(0, str(BENCHMARKS))
    from structured_coverage import SUBSETS  # type: ignore[import-not-found]  # benchmarks/ is no package

    recursive = {"$defs": {"n": {"properties": {"next": {"$ref": "#/$defs/n"}}}}, "$ref": "#/$defs/n"}
    for subset in SUBSETS:  # a stand-in checkout: one plain schema and one recursive one per subset
        (tmp_path / "data" / subset).mkdir(parents=True)
        plain = {"type": "object", "properties": {"a": {"type": "integer"}}}
        (tmp_path / "data" / subset / "plain.json").write_text(json.dumps(plain))
        (tmp_path / "data" / subset / "loop.json").write_text(json.dumps(recursive))
    out = tmp_path / "out"
    result = last_json_line(
        "structured_coverage.py",
        *("--data", str(tmp_path), "--sample", str(tmp_path / "sample.json"), "--out", str(out)),
        *("--resample", "--per-subset", "2", "--targets", "tgi"),
    )
    assert result["schemas"] == 2 * len(SUBSETS)
    assert result["totals"] == {"tgi": {"unillm": {"valid": len(SUBSETS), "refused": len(SUBSETS)}}}
    assert "| tgi | unillm |" in (out / "summary.md").read_text()


def test_agents_benchmark_reports_the_tool_corpus_without_engines() -> None:
    result = last_json_line("agents.py", "--quick", "--engines", "none")
    assert result["tool_parse_identical"] == 1.0 and result["replay_tokens_lost"] is None


@pytest.mark.skipif(
    not (Path.home() / ".cache/unillm/envs/aiperf/bin/aiperf").exists()
    or not (Path.home() / ".cache/unillm/envs/vllm/bin/python").exists(),
    reason="needs AIPerf's and vLLM's envs under ~/.cache/unillm/envs",
)
def test_vs_aiperf_measures_each_harness_rate_and_the_paced_truth_against_look_alikes() -> None:
    result = last_json_line(
        "vs_aiperf.py",
        *("--skip-agreement", "--overhead-rounds", "1", "--overhead-requests", "60", "--no-save"),
        *("--rounds", "1", "--paced-prompts", "16", "--paced-first-ms", "30", "--paced-gap-ms", "2"),
    )
    rates = result["overhead"]["sustained_req_per_s"]  # type: ignore[index]
    assert set(rates) == {"unillm", "vllm", "aiperf"} and all(r > 0 for r in rates.values())
    paced = cast(dict[str, Any], result["paced"])
    for tool, figures in paced["medians"].items():  # no tool sees a first chunk before it was sent
        assert figures["completed"] == 16 and figures["ttft_p50_ms"] >= 30, (tool, figures)
        assert 0 < figures["in_flight"] <= 8, (tool, figures)  # never more than --max-concurrency
    assert set(paced["error_vs_truth"]) == {"unillm", "vllm", "aiperf"}
    assert "goals" in result


@pytest.mark.skipif(
    not (Path.home() / ".cache/unillm/envs/aiperf/bin/aiperf").exists()
    or not (Path.home() / ".cache/unillm/envs/vllm/bin/python").exists(),
    reason="needs AIPerf's and vLLM's envs under ~/.cache/unillm/envs",
)
def test_vs_aiperf_sends_every_harness_on_one_fixed_schedule_with_a_request_rate() -> None:
    sys.path.insert(0, str(BENCHMARKS))
    from client_overhead import Server  # type: ignore[import-not-found]  # benchmarks/ is no package

    from unillm.testing.tiny_model import build_tiny_model

    server = Server(2000, first_us=20_000)  # 20 ms, then 63 chunks 2 ms apart: 146 ms a request
    try:
        result = last_json_line(
            "vs_aiperf.py",
            *("--url", server.base_url, "--model-path", str(build_tiny_model().path), "--no-save"),
            *(
                "--skip-paced",
                "--skip-overhead",
                "--rounds",
                "1",
                "--warmup-rounds",
                "0",
                "--num-prompts",
                "24",
            ),
            *("--input-len", "16", "--request-rate", "40", "--max-concurrency", "64", "--warmups", "1"),
        )
    finally:
        server.stop()
    assert cast(dict[str, Any], result["workload"])["request_rate"] == 40
    for tool, figures in cast(dict[str, dict[str, float]], result["medians"]).items():
        assert figures["completed"] == 24, (tool, figures)
        # 24 requests 25 ms apart: ~2,000 tokens/s; all at once (the rate ignored) would be ~10,000
        assert 1000 < figures["output_throughput"] < 3000, (tool, figures)
        assert figures["in_flight"] < 10, (tool, figures)


def test_fleet_cache_benchmark_replays_every_client_policy_against_look_alikes() -> None:
    result = last_json_line(
        "fleet_cache.py",
        "--look-alike",
        "--rounds",
        "1",
        "--sessions",
        "3",
        "--turns",
        "2",
        "--system-len",
        "32",
    )
    per = result["per_setup"]
    assert isinstance(per, dict) and set(per) == {
        "round_robin",
        "least_load",
        "prefix",
        "session",
        "cache_aware",
        "cache_aware_tree",
    }
    assert all(f["failed"] == 0 and isinstance(f["ttft_p90_ms"], float) for f in per.values())
    assert set(cast(dict[str, Any], result["goals"])) == {"hit_rate", "ttft_p90"}


def test_fleet_cache_goals_need_cache_aware_ahead_on_hit_rate_and_half_round_robins_p90() -> None:
    sys.path.insert(0, str(BENCHMARKS))
    from fleet_cache import goals  # type: ignore[import-not-found]  # benchmarks/ is no package

    per = {
        "round_robin": {"hit_rate": 0.4, "ttft_p90_ms": 100.0},
        "cache_aware": {"hit_rate": 0.8, "ttft_p90_ms": 50.0},
        "smg cache_aware": {"hit_rate": 0.8, "ttft_p90_ms": 40.0},
    }
    met = goals(per)
    assert met["hit_rate"]["met"] and met["ttft_p90"] == {**met["ttft_p90"], "ratio": 0.5, "met": True}
    per["smg cache_aware"]["hit_rate"] = 0.9
    per["cache_aware"]["ttft_p90_ms"] = 60.0
    met = goals(per)
    assert not met["hit_rate"]["met"] and met["hit_rate"]["highest"] == "smg cache_aware"
    assert not met["ttft_p90"]["met"]


def test_cancel_and_overload_goals_fail_on_an_unmeasured_path_or_a_missed_ratio() -> None:
    sys.path.insert(0, str(BENCHMARKS))
    from cancel_and_overload import goals, p99  # type: ignore[import-not-found]

    result: dict[str, Any] = {
        "cancel": {"direct": {"to_idle_s": 0.2}, "vllm-router": {"to_idle_s": 0.9}},
        "overload": {"goodput_vs_naive": 1.5},
        "priority": {"p99_ratio": 2.0, "batch_share": 0.9},
    }
    assert all(goals(result).values())
    result["cancel"]["vllm-router"] = {"to_idle_s": None, "error": "LaunchError: ..."}
    result["priority"]["batch_share"] = 0.89
    assert goals(result) == {
        "cancel_s": False,
        "goodput_vs_naive": True,
        "priority_p99_ratio": True,
        "batch_share": False,
    }
    assert p99([float(i) for i in range(1, 101)]) == 99.01 and p99([3.0]) == 3.0
    assert goals({"priority": {"p99_ratio": 2.5, "batch_share": 0.95}}) == {  # that part alone
        "priority_p99_ratio": False,
        "batch_share": True,
    }


def test_cancel_and_overload_runs_the_parts_asked_for_with_the_reserve_on_the_loaded_run() -> None:
    sys.path.insert(0, str(BENCHMARKS))
    from cancel_and_overload import parts, priority_figures  # type: ignore[import-not-found,unused-ignore]

    assert parts("priority") == ("priority",) and parts("priority, cancel") == ("cancel", "priority")
    with pytest.raises(argparse.ArgumentTypeError, match="pick from"):
        parts("priorty")
    rounds = {
        "unloaded": [{"ttfts": [0.02, 0.03], "batch_tok_s": 0.0, "refused": 0}],
        "flood": [{"ttfts": [], "batch_tok_s": 100.0, "refused": 1}],
        "both": [{"ttfts": [0.04], "batch_tok_s": 95.0, "refused": 0}],
    }
    figures = priority_figures(rounds, unillm.Reserve(slots=2, capacity=8))
    assert figures["p99_ratio"] == pytest.approx(0.04 / 0.0299, abs=1e-3)
    assert figures["batch_share"] == 0.95 and figures["refused"] == 1
    assert figures["reserve"] == {"slots": 2, "above": 0, "capacity": 8}
    assert figures["batch_share_all_slots"] == 0.95  # no flood alone through the reserve: the same
    rounds["flood_reserved"] = [{"ttfts": [], "batch_tok_s": 100.0 * 0.75, "refused": 0}]
    figures = priority_figures(rounds, None)
    assert (figures["batch_share"], figures["batch_share_all_slots"]) == (round(95 / 75, 3), 0.95)


def test_vs_aiperf_compares_each_tool_on_its_own_definition_of_itl() -> None:
    """AIPerf's ITL is a per-request TPOT: unillm's TPOT is what agreement holds it against, while
    vLLM's pooled ITL meets unillm's; each round's own ratio shows whether the rounds agree."""
    sys.path.insert(0, str(BENCHMARKS))
    from vs_aiperf import FIGURES, summarize  # type: ignore[import-not-found]  # benchmarks/ is no package

    def round_(itl: float, tpot: float | None, ttft: float) -> dict[str, float | None]:
        figures = {k: 100.0 for k in FIGURES} | {"ttft_p50_ms": ttft, "itl_p50_ms": itl, "tpot_p50_ms": tpot}
        return figures | {"completed": 48.0}

    rounds = {
        "unillm": [round_(10.0, 12.0, ttft) for ttft in (50.0, 50.0, 50.0)],
        "vllm": [round_(10.1, 11.0, ttft) for ttft in (45.0, 52.0, 60.0)],
        "aiperf": [round_(8.0, 12.2, 50.0), round_(8.0, 12.2, 50.0), round_(8.0, None, 50.0)],
    }
    summary = summarize(rounds)
    vs_aiperf, vs_vllm = summary["agreement"]["unillm/aiperf"], summary["agreement"]["unillm/vllm"]
    assert vs_aiperf["itl_p50"]["ratio"] == pytest.approx(12.0 / 12.2) and vs_aiperf["itl_p50"]["within"]
    assert vs_aiperf["itl_p50"]["per_round"][2] is None  # a figure AIPerf did not report
    assert summary["ratios"]["unillm/aiperf"]["itl_p50_ms"] == pytest.approx(10.0 / 8.0)  # per gap, apart
    assert vs_vllm["itl_p50"]["ratio"] == pytest.approx(10.0 / 10.1) and vs_vllm["itl_p50"]["within"]
    assert vs_vllm["ttft_p50"]["ratio"] == pytest.approx(50.0 / 52.0) and not vs_vllm["ttft_p50"]["within"]
    assert vs_vllm["ttft_p50"]["rounds_straddle_1"] and not vs_aiperf["ttft_p50"]["rounds_straddle_1"]
    assert not summary["all_within"]
    assert summary["spread"]["vllm"]["ttft_p50_ms"]["spread_pct"] == pytest.approx(100 * 15 / 52)


def test_vs_aiperf_counts_the_requests_aiperf_kept_in_flight_while_profiling(tmp_path: Path) -> None:
    sys.path.insert(0, str(BENCHMARKS))
    from vs_aiperf import aiperf_in_flight

    def line(phase: str, start: int, end: int) -> str:
        meta = {"benchmark_phase": phase, "request_start_ns": start, "request_end_ns": end}
        return json.dumps({"metadata": meta, "metrics": {}})

    records = tmp_path / "profile_export.jsonl"
    records.write_text(
        "\n".join([line("warmup", 0, 100), line("profiling", 100, 110), line("profiling", 105, 115)])
    )
    assert aiperf_in_flight(records) == pytest.approx(20 / 15)  # the warm-up is left out
    records.write_text(line("warmup", 0, 100))
    assert aiperf_in_flight(records) is None


def test_batch_benchmark_refuses_an_unknown_path_before_any_engine() -> None:
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / "batch.py"), "--paths", "ray,gpu"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode != 0 and "--paths takes in_process, http and/or ray" in done.stderr


def test_batch_ray_leg_config_is_a_two_replica_ray_launch(tmp_path: Path) -> None:
    """The Ray leg's config (the compare leg's engine flags, an unset key left out of the TOML)
    loads as a launch of two replicas spread over the cluster's nodes; nothing is started."""
    sys.path.insert(0, str(BENCHMARKS))
    from batch_ray import write_config  # type: ignore[import-not-found]  # benchmarks/ is no package

    import unillm
    from unillm.launching.ray_cluster import RayLaunch

    settings = {"model": str(tmp_path / "m"), "cpu": True, "max_num_seqs": 16, "api_key": None}
    config = write_config(tmp_path / "ray.toml", settings, "127.0.0.1:6379", replicas=2)
    run = unillm.from_config(str(config))
    assert isinstance(run, RayLaunch)
    assert (run.cluster.address, run.cluster.placement, len(run.actor_names)) == (
        "127.0.0.1:6379",
        "STRICT_SPREAD",
        2,
    )
    assert "api_key" not in config.read_text() and run.spec.max_num_seqs == 16
