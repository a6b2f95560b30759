"""`unillm bench` against AIPerf and `vllm bench serve`: the same engine, workload and seeds.

Agreement: the three harnesses run as separate processes in interleaved rounds (the order rotates
each round) against one vLLM-CPU engine, prefix caching off (unillm's and vLLM's random prompts
may coincide for one seed: the second would find them cached). The engine serves ``--model``: by
default ``wide`` (cpu_engine.wide_model: the tiny model's tokenizer on 8 layers of width 1024, a
decode step ~10 ms on one core, as a real model's on a GPU), so the engine, not the harnesses' CPU,
sets the pace; with ``tiny`` (sub-millisecond steps) every harness's CPU moves the engine on two
cores and rounds spread by 30% and more. Random prompts
of ``--input-len`` tokens (the model's tokenizer), exactly ``--output-len`` generated tokens
(``ignore_eos``, temperature 0), streamed completions, ``--num-prompts`` requests at
``--max-concurrency`` after ``--warmups``. Each tool's median over rounds of P50/P99 TTFT, ITL,
TPOT and output throughput is compared (ratios of medians; goal: within 3%), with each round's own
ratio (the tools ran back to back: rounds that disagree on the sign are noise) and every figure's
spread over rounds.

Definitions differ in one place, recorded in the JSON: AIPerf's ``inter_token_latency`` is per
request, ``(latency - TTFT) / (output tokens - 1)``, i.e. what vLLM and unillm call TPOT; vLLM's
and unillm's ITL pools every gap between chunks, as AIPerf's ``inter_chunk_latency`` does. So the
issue's "ITL" agreement with AIPerf compares its ITL with unillm's TPOT, and the per-gap figures
are compared too (``ratios``). AIPerf counts output tokens from the engine's usage
(``--use-server-token-count``) as the other two do, not by re-tokenizing the text.

Known truth: the same three harnesses (``--paced-prompts`` requests each, the same concurrency)
against a look-alike that paces every stream like an engine but costs no CPU: the first chunk
after ``--paced-first-ms``, then 63 more ``--paced-gap-ms`` apart. Each tool's distance from those
figures is its own error (``paced.error_vs_truth``); each figure outside ±3% is judged against
the peer's distance from the truth (``paced.verdicts``). Every round also records each harness's
CPU seconds (``client_cpu_s``): on two cores, a harness that burns a core starves the engine.

Client overhead: each harness sends ``--overhead-requests`` streamed requests as fast as it can
(``--overhead-concurrency`` in flight) to a fast look-alike server (benchmarks/client_overhead.py's
loopback server, another process, 64 chunks per answer, no gap); the request rate it sustains is
the completed requests per second it reports (median of ``--overhead-rounds``). The harness
whose rate is highest adds the least between the engine and the measurement.

AIPerf runs at ``--concurrency`` with a request rate beside it (``--aiperf-request-rate``, by
default 500/s): with a concurrency alone its timing manager spins a core while every slot is taken,
which starved the engine (AIPerf then read 5.6 times the TTFT of the other two). The rate is a
trade: AIPerf issues at most one request per tick, so slots freed on the same engine step refill
one tick apart (1,000/s: its ticks cost 0.8 CPU seconds more a run, and the engine's TPOT read
4% higher beside them; 200/s: 3% fewer requests in flight; 20,000/s: it spins again). With
``--request-rate`` every harness sends on one fixed schedule instead (an open loop).

Placement: every harness gets the same CPU (``--client-cpus``) and niceness, as in
benchmarks/vs_vllm_bench.py (whose runners this reuses). AIPerf runs from its own venv
(``~/.cache/unillm/envs/aiperf``, ``python3.11 -m venv`` + ``pip install aiperf``).

    .venv/bin/python benchmarks/vs_aiperf.py                  # launches vLLM
    .venv/bin/python benchmarks/vs_aiperf.py --rounds 2 --num-prompts 32 --skip-overhead --skip-paced

Prints a table, then as its last line one JSON object (also written to
benchmarks/results/vs_aiperf.json, with every round and spread): the medians, ``ratios`` (every
figure, unillm/vllm, unillm/aiperf, aiperf/vllm), ``agreement`` (the issue's five figures per
comparison: ratio, ``within`` ±3%, per-round ratios), ``all_within``, ``goals`` and the overhead.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
import resource
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
TOOLS = ("unillm", "vllm", "aiperf")
#: Each measured figure under one name: (unillm's key, vllm bench serve's key, AIPerf's (metric, stat))
FIGURES: dict[str, tuple[str, str, tuple[str, str]]] = {
    "ttft_p50_ms": ("median_ttft_ms", "median_ttft_ms", ("time_to_first_token", "p50")),
    "ttft_p99_ms": ("p99_ttft_ms", "p99_ttft_ms", ("time_to_first_token", "p99")),
    # every gap between chunks, pooled over the requests (AIPerf: inter_chunk_latency)
    "itl_p50_ms": ("median_itl_ms", "median_itl_ms", ("inter_chunk_latency", "p50")),
    "itl_p99_ms": ("p99_itl_ms", "p99_itl_ms", ("inter_chunk_latency", "p99")),
    # per request (latency - TTFT) / (output tokens - 1) (AIPerf: inter_token_latency)
    "tpot_p50_ms": ("median_tpot_ms", "median_tpot_ms", ("inter_token_latency", "p50")),
    "tpot_p99_ms": ("p99_tpot_ms", "p99_tpot_ms", ("inter_token_latency", "p99")),
    "output_throughput": ("output_throughput", "output_throughput", ("output_token_throughput", "avg")),
}
#: The issue's five figures, per comparison: (unillm's figure, the other tool's figure). ITL is
#: each tool's own ITL: vLLM's pools the gaps (as unillm's does); AIPerf's is per request, a TPOT.
AGREEMENT: dict[str, dict[str, tuple[str, str]]] = {
    other: {
        "ttft_p50": ("ttft_p50_ms", "ttft_p50_ms"),
        "ttft_p99": ("ttft_p99_ms", "ttft_p99_ms"),
        "itl_p50": ("itl_p50_ms", "itl_p50_ms") if other == "vllm" else ("tpot_p50_ms", "tpot_p50_ms"),
        "itl_p99": ("itl_p99_ms", "itl_p99_ms") if other == "vllm" else ("tpot_p99_ms", "tpot_p99_ms"),
        "output_throughput": ("output_throughput", "output_throughput"),
    }
    for other in ("vllm", "aiperf")
}
DEFINITIONS = {
    "itl": "vllm bench serve's and unillm's ITL pool every gap between streamed chunks; AIPerf's "
    "inter_token_latency is per request (latency - TTFT) / (output tokens - 1), what vLLM and unillm "
    "call TPOT: agreement['unillm/aiperf']['itl_*'] compares it with unillm's TPOT, and AIPerf's "
    "per-gap inter_chunk_latency is compared with unillm's ITL in ratios (itl_*_ms)",
    "output_tokens": "every tool counts the engine's usage (AIPerf with --use-server-token-count)",
    "percentiles": "linear interpolation between ranks in all three tools, except AIPerf's "
    "inter_chunk_latency percentiles: a t-digest estimate (AIPerf 0.13)",
    "duration": "output throughput's denominator: unillm and vLLM from before the first request to "
    "after the last answer; AIPerf from the first request sent to the last response",
    "refill": "unillm and vLLM start the next request the moment a slot frees (slots freed on one "
    "engine step refill together); AIPerf issues one request per tick of its request rate, so they "
    "refill one tick apart: smaller prefill batches (a lower TTFT), more decode steps shared with a "
    "prefill (a higher TPOT) and fewer requests in flight (in_flight)",
}
#: AIPerf's default request rate beside ``--concurrency``. With a concurrency alone, AIPerf 0.13's
#: timing manager spins while every slot is taken (``yield_to_event_loop`` in a loop,
#: request_rate.py): one core burnt, which on two cores starves the engine. A rate far above any
#: the engine sustains keeps the concurrency the limit and lets the manager sleep between ticks; it
#: issues one request per tick, so a freed slot waits up to 2 ms, and 8 freed at once 16 ms.
AIPERF_TICKS = 500
Round = dict[str, float | None]


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
    cmd += ["--osl", str(args.output_len), "--output-tokens-stddev", "0", "--use-server-token-count"]
    cmd += ["--extra-inputs", "ignore_eos:true", "--extra-inputs", "temperature:0"]
    cmd += ["--concurrency", str(concurrency), "--request-count", str(count)]
    open_loop = not math.isinf(args.request_rate)  # else the rate only paces its ticks
    rate = args.request_rate if open_loop else args.aiperf_request_rate
    cmd += ["--request-rate", f"{rate:g}", "--arrival-pattern", "constant"]
    cmd += ["--warmup-request-count", str(warmups), "--random-seed", str(seed)]
    cmd += ["--artifact-dir", str(out), "--ui-type", "none", "--no-server-metrics"]
    done = run_client(cmd, args)
    found = out / "profile_export_aiperf.json"  # the profiling phase's summary (warm-up excluded)
    if done.returncode != 0 or not found.exists():
        raise SystemExit(f"aiperf failed ({done.returncode}):\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}")
    return dict(json.loads(found.read_text()))


def aiperf_value(summary: dict[str, Any], metric: str, stat: str) -> float | None:
    """One statistic of AIPerf's summary (None when AIPerf did not export that metric)."""
    entry = summary.get(metric)
    if entry is None:
        return None
    value = entry.get(stat) if isinstance(entry, dict) else entry
    return None if value is None else float(value)


def one_round(args: argparse.Namespace, engine: Engine, tool: str, d: Path, i: int) -> Round:
    """One tool's run of the agreement workload: every figure (ms, tokens/s) and its token counts."""
    out = d / f"{tool}-{i}"
    if tool in ("unillm", "vllm"):
        if tool == "unillm":
            r = unillm_bench(args, engine, out, i)
            figures: Round = {name: float(r[mine]) for name, (mine, _, _) in FIGURES.items()}
        else:
            r = vllm_bench(args, engine, out.with_suffix(".json"), i)
            figures = {name: float(r[theirs]) for name, (_, theirs, _) in FIGURES.items()}
        completed = int(r["completed"])
        return figures | {
            "completed": completed,
            "mean_input_tokens": r["total_input_tokens"] / completed,
            "mean_output_tokens": r["total_output_tokens"] / completed,
            "in_flight": sum(r["latencies"]) / r["duration"],
        }
    s = aiperf_bench(
        args, engine, out, i, count=args.num_prompts, concurrency=args.max_concurrency, warmups=args.warmups
    )
    return {name: aiperf_value(s, *keys[2]) for name, keys in FIGURES.items()} | {
        "completed": aiperf_value(s, "request_count", "avg"),
        "mean_input_tokens": aiperf_value(s, "input_sequence_length", "avg"),
        "mean_output_tokens": aiperf_value(s, "output_sequence_length", "avg"),
        "in_flight": aiperf_in_flight(out / "profile_export.jsonl"),
    }


def aiperf_in_flight(records: Path) -> float | None:
    """The requests AIPerf kept in flight on average while profiling: every request's time from
    sent to its last response, over the span from the first sent to the last answered."""
    spans = []
    for line in records.read_text().splitlines():
        meta = json.loads(line).get("metadata", {})
        if meta.get("benchmark_phase") == "profiling" and meta.get("request_end_ns"):
            spans.append((meta["request_start_ns"], meta["request_end_ns"]))
    if not spans:
        return None
    return float(
        sum(end - start for start, end in spans) / (max(e for _, e in spans) - min(s for s, _ in spans))
    )


def interleaved(
    args: argparse.Namespace, engine: Engine, label: str, *, warm: int = 0
) -> dict[str, list[Round]]:
    """Every tool's rounds against ``engine``, the order rotating each round, after ``warm``
    rounds whose figures are dropped (a fresh engine's first batches run slow for whichever tool
    comes first); each round also records the tool's CPU seconds (its process tree's user + system
    time) and the load before."""
    rounds: dict[str, list[Round]] = {tool: [] for tool in TOOLS}
    with tempfile.TemporaryDirectory(prefix=f"vs-aiperf-{label}-") as d:
        for i in range(-warm, args.rounds):
            for tool in TOOLS[i % 3 :] + TOOLS[: i % 3]:
                if i < 0:  # seeds past the measured rounds' (AIPerf takes no negative seed)
                    one_round(args, engine, tool, Path(d), args.rounds - i - 1)
                    print(f"[vs-aiperf] {label} warm-up round {i + warm + 1}/{warm} {tool}", file=sys.stderr)
                    continue
                started, load, cpu = time.perf_counter(), os.getloadavg()[0], children_cpu_s()
                figures = one_round(args, engine, tool, Path(d), i)
                figures |= {
                    "client_cpu_s": children_cpu_s() - cpu,
                    "load_average_1m": load,
                    "wall_s": time.perf_counter() - started,
                }
                rounds[tool].append(figures)
                print(
                    f"[vs-aiperf] {label} round {i + 1}/{args.rounds} {tool}: "
                    + ", ".join(f"{k}={v:.2f}" for k, v in figures.items() if v is not None),
                    file=sys.stderr,
                )
    return rounds


def children_cpu_s() -> float:
    """User + system CPU seconds of every finished child process so far (the harness runs)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


async def agreement(args: argparse.Namespace) -> tuple[dict[str, list[Round]], str]:
    """Every tool's rounds on one engine (prefix caching off: the tools' prompts may coincide)."""
    async with vllm_target(
        args.url,
        args.model_path,
        max_num_seqs=args.max_num_seqs,
        prefix_caching=False,
        wide=args.model == "wide",
        deep=args.model == "deep",
    ) as engine:
        rounds = await anyio.to_thread.run_sync(
            functools.partial(interleaved, args, engine, "engine", warm=args.warmup_rounds)
        )
        return rounds, engine.command


def paced(args: argparse.Namespace, model_path: str) -> dict[str, Any]:
    """The agreement workload against a look-alike that paces its answers like an engine but costs
    no CPU: every stream's first chunk after ``--paced-first-ms``, then a chunk every
    ``--paced-gap-ms`` (64 in all). The truth is known, so each tool's error is its own."""
    first, gap = args.paced_first_ms, args.paced_gap_ms
    server = Server(gap * 1000, first_us=first * 1000)
    fast = Engine(server.base_url, model_path, "tiny", "(paced look-alike)")
    saved = (args.num_prompts, args.input_len, args.output_len, args.request_rate)
    args.num_prompts, args.input_len, args.output_len = args.paced_prompts, 16, 64
    args.request_rate = math.inf  # a closed loop: the truth is known for it
    try:
        rounds = interleaved(args, fast, "paced")
    finally:
        server.stop()
        args.num_prompts, args.input_len, args.output_len, args.request_rate = saved
    summary = summarize(rounds)
    at_most = args.max_concurrency * 64 / ((first + 63 * gap) / 1000)
    truth = {"ttft_p50_ms": first, "itl_p50_ms": gap, "tpot_p50_ms": gap, "output_throughput": at_most}
    error = {tool: {k: abs(summary["medians"][tool][k] / v - 1) for k, v in truth.items()} for tool in TOOLS}
    return {
        "server": {"first_chunk_ms": first, "chunk_gap_ms": gap, "chunks": 64},
        "num_prompts": args.paced_prompts,
        "truth": truth,
        # |median / truth - 1| per tool (throughput: against the most the pacing allows)
        "error_vs_truth": error,
        "verdicts": truth_verdicts(summary["agreement"], error),
    } | {k: summary[k] for k in ("medians", "spread", "ratios", "agreement", "all_within")}


def truth_verdicts(
    agreement: dict[str, dict[str, Any]], error: dict[str, dict[str, float]]
) -> dict[str, str]:
    """Per comparison and figure: ``within`` ±3%, or ``peer_off_truth`` when the peer is further
    from the paced server's known figure than unillm, else ``out``."""
    verdicts = {}
    for pair, figures in agreement.items():
        peer = pair.split("/")[1]
        for name, f in figures.items():
            mine, theirs = AGREEMENT[peer][name]
            known = mine in error["unillm"] and theirs in error[peer]
            verdicts[f"{pair} {name}"] = (
                "within"
                if f["within"]
                else "peer_off_truth"
                if known and error[peer][theirs] > error["unillm"][mine]
                else "out"
            )
    return verdicts


def median_of(rounds: list[Round], key: str) -> float | None:
    """The median over rounds of one figure (None when a tool never reported it)."""
    values = [v for r in rounds if (v := r.get(key)) is not None]
    return statistics.median(values) if values else None


def ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or not b else a / b


def spread(rounds: list[Round]) -> dict[str, dict[str, float | None]]:
    """Per figure: the rounds' min and max and (max - min) / median in percent (the noise)."""
    out: dict[str, dict[str, float | None]] = {}
    for key in FIGURES:
        values = [v for r in rounds if (v := r.get(key)) is not None]
        if values:
            low, high, mid = min(values), max(values), statistics.median(values)
            out[key] = {"min": low, "max": high, "spread_pct": 100 * (high - low) / mid if mid else None}
    return out


def compare(rounds: dict[str, list[Round]], other: str) -> dict[str, dict[str, Any]]:
    """The issue's five figures for unillm / ``other``: the ratio of medians over rounds, whether
    it is within the goal, and each round's own ratio (the two tools ran back to back)."""
    out: dict[str, dict[str, Any]] = {}
    for name, (mine, theirs) in AGREEMENT[other].items():
        r = ratio(median_of(rounds["unillm"], mine), median_of(rounds[other], theirs))
        per_round = [
            ratio(u.get(mine), o.get(theirs)) for u, o in zip(rounds["unillm"], rounds[other], strict=True)
        ]
        known = [x for x in per_round if x is not None]
        out[name] = {
            "ratio": r,
            "within": r is not None and abs(r - 1) <= GOAL,
            "per_round": per_round,
            # the rounds disagree on the sign of the difference: not told apart from noise
            "rounds_straddle_1": bool(known) and min(known) < 1 < max(known),
        }
    return out


def summarize(rounds: dict[str, list[Round]]) -> dict[str, Any]:
    """Medians, spreads, every figure's ratios and the issue's agreement verdicts."""
    med = {tool: {k: median_of(rs, k) for k in rs[0]} for tool, rs in rounds.items()}
    pairs = (("unillm", "vllm"), ("unillm", "aiperf"), ("aiperf", "vllm"))
    agreement = {f"unillm/{other}": compare(rounds, other) for other in ("vllm", "aiperf")}
    return {
        "medians": med,
        "spread": {tool: spread(rs) for tool, rs in rounds.items()},
        "ratios": {f"{a}/{b}": {k: ratio(med[a][k], med[b][k]) for k in FIGURES} for a, b in pairs},
        "agreement": agreement,
        "all_within": all(f["within"] for per in agreement.values() for f in per.values()),
        "rounds_detail": rounds,
    }


def print_table(summary: dict[str, Any]) -> None:
    med, ratios = summary["medians"], summary["ratios"]
    print(f"{'figure':<20}{'unillm':>10}{'vllm':>10}{'aiperf':>10}{'u/vllm':>8}{'u/aiperf':>10}")
    for k in FIGURES:
        cells = [med[t][k] for t in TOOLS] + [ratios["unillm/vllm"][k], ratios["unillm/aiperf"][k]]
        print(
            f"{k:<20}"
            + "".join(
                "-".rjust(w) if v is None else f"{v:>{w}.3f}"
                for v, w in zip(cells, (10, 10, 10, 8, 10), strict=True)
            )
        )
    for pair, figures in summary["agreement"].items():
        print(
            pair,
            {
                k: f"{f['ratio']:.3f}{'' if f['within'] else ' (out)'}"
                for k, f in figures.items()
                if f["ratio"]
            },
        )


def tool_rate(args: argparse.Namespace, fast: Engine, tool: str, out: Path, i: int) -> float:
    """The completed requests per second one harness reports against the look-alike."""
    if tool == "unillm":
        return float(unillm_bench(args, fast, out, i)["request_throughput"])
    if tool == "vllm":
        return float(vllm_bench(args, fast, out.with_suffix(".json"), i)["request_throughput"])
    s = aiperf_bench(args, fast, out, i, count=args.num_prompts, concurrency=args.max_concurrency, warmups=8)
    return float(aiperf_value(s, "request_throughput", "avg") or 0.0)


def overhead(args: argparse.Namespace, model_path: str) -> dict[str, Any]:
    """The request rate each harness sustains against the fast look-alike (median of rounds)."""
    server = Server(0)
    rates: dict[str, list[float]] = {tool: [] for tool in TOOLS}
    fast = Engine(server.base_url, model_path, "tiny", "(look-alike)")
    saved = (args.num_prompts, args.max_concurrency, args.warmups, args.input_len, args.output_len)
    saved_rate, args.request_rate = args.request_rate, math.inf  # as fast as each can
    args.num_prompts, args.max_concurrency, args.warmups = (
        args.overhead_requests,
        args.overhead_concurrency,
        8,
    )
    args.input_len, args.output_len = 16, 64  # the look-alike always answers 64 chunks
    try:
        with tempfile.TemporaryDirectory(prefix="vs-aiperf-fast-") as d:
            for i in range(args.overhead_rounds):
                for tool in TOOLS[i % 3 :] + TOOLS[: i % 3]:
                    rates[tool].append(tool_rate(args, fast, tool, Path(d) / f"{tool}-{i}", i))
                    print(
                        f"[vs-aiperf] overhead round {i + 1} {tool}: {rates[tool][-1]:.0f} req/s",
                        file=sys.stderr,
                    )
    finally:
        server.stop()
        args.num_prompts, args.max_concurrency, args.warmups, args.input_len, args.output_len = saved
        args.request_rate = saved_rate
    medians = {tool: statistics.median(v) for tool, v in rates.items()}
    return {
        "requests": args.overhead_requests,
        "concurrency": args.overhead_concurrency,
        "sustained_req_per_s": medians,
        "rounds": rates,
        "unillm_over_aiperf": medians["unillm"] / medians["aiperf"],
        "unillm_over_vllm": medians["unillm"] / medians["vllm"],
    }


def parse_args() -> argparse.Namespace:
    p = harness_parser(__doc__ or "", rounds=3, num_prompts=96)
    p.add_argument(
        "--model",
        choices=("wide", "deep", "tiny"),
        default="wide",
        help="the engine's model: wide (cpu_engine.wide_model, ~10 ms a decode step: the engine sets "
        "the pace), deep (three times its layers, ~30 ms) or tiny (sub-millisecond steps: on two "
        "cores each harness's CPU moves the engine)",
    )
    p.add_argument(
        "--aiperf-request-rate",
        type=float,
        default=AIPERF_TICKS,
        help="AIPerf's request rate beside its concurrency (a freed slot waits up to 1/rate s)",
    )
    p.add_argument(
        "--warmup-rounds",
        type=int,
        default=1,
        help="rounds on the engine whose figures are dropped, before --rounds (each tool once)",
    )
    p.add_argument("--overhead-requests", type=int, default=400)
    p.add_argument("--overhead-concurrency", type=int, default=32)
    p.add_argument("--overhead-rounds", type=int, default=3)
    p.add_argument("--skip-overhead", action="store_true")
    p.add_argument("--skip-agreement", action="store_true")
    p.add_argument("--skip-paced", action="store_true")
    p.add_argument("--paced-first-ms", type=float, default=40.0)
    p.add_argument("--paced-gap-ms", type=float, default=8.0)
    p.add_argument("--paced-prompts", type=int, default=200)
    p.add_argument("--no-save", action="store_true", help="do not write benchmarks/results/vs_aiperf.json")
    return p.parse_args()


def header(args: argparse.Namespace) -> dict[str, Any]:
    """The result's goals, definitions, workload and the load before the run."""
    return {
        "goals": {
            "agreement": f"unillm / AIPerf and unillm / vllm bench serve within ±{GOAL:.0%} on P50 and P99 "
            "TTFT, ITL and output throughput (or the difference explained by a definition)",
            "overhead": "unillm sustains at least AIPerf's request rate against a fast look-alike",
            "paced": "against the paced look-alike (known TTFT, ITL and the most throughput allows), "
            "every figure within ±3% of each peer, or the peer further from the known figure",
        },
        "definitions": DEFINITIONS,
        "workload": {
            k: getattr(args, k) for k in ("input_len", "output_len", "num_prompts", "max_concurrency")
        }
        | {"warmups": args.warmups, "rounds": args.rounds, "warmup_rounds": args.warmup_rounds}
        | {"api": "completions", "ignore_eos": True}
        | {"temperature": 0, "prefix_caching": False, "client_cpus": args.client_cpus}
        | {"model": args.model, "request_rate": None if math.isinf(args.request_rate) else args.request_rate}
        | {"aiperf_request_rate": args.aiperf_request_rate},
        "cores": os.cpu_count(),
        "load_average_1m_start": os.getloadavg()[0],
        "started_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def main() -> None:
    args = parse_args()
    result = header(args)
    model_path = args.model_path
    if not args.skip_agreement:
        rounds, command = anyio.run(agreement, args)
        result |= {"engine_command": command} | summarize(rounds)
        print_table(result)
    if model_path is None and not (args.skip_paced and args.skip_overhead):
        from unillm.testing.tiny_model import build_tiny_model

        model_path = str(build_tiny_model().path)
    if not args.skip_paced:
        assert model_path is not None
        result["paced"] = paced(args, model_path)
        print("against the paced look-alike:")
        print_table(result["paced"])
    if not args.skip_overhead:
        assert model_path is not None
        result["overhead"] = overhead(args, model_path)
        print(f"sustained req/s against the look-alike: {result['overhead']['sustained_req_per_s']}")
    result["load_average_1m_end"] = os.getloadavg()[0]
    if not args.no_save:  # a part skipped (--skip-*) keeps its figures from the last run
        earlier = json.loads(RESULT.read_text()) if RESULT.exists() else {}
        RESULT.parent.mkdir(parents=True, exist_ok=True)
        result = earlier | result
        RESULT.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k not in ("rounds_detail", "spread")}))


if __name__ == "__main__":
    main()
