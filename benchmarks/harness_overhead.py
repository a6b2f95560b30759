"""What `unillm bench` adds to what it measures: runs against a zero-latency look-alike engine.

The look-alike (``client_overhead.py``'s loopback server, in its own process) answers every
streamed completion at once with 64 chunks, a usage chunk and ``[DONE]`` (``--chunk-gap-us 0``),
so whatever latency a harness reports is the harness's own (client, HTTP and event-loop time).
Three harnesses measure the same requests in interleaved rounds:

* ``raw``: a bare httpx loop timing each stream (first chunk, last chunk);
* ``raw-aiohttp``: the same loop on a bare aiohttp session (the floor of an aiohttp client);
* ``unillm``: ``unillm.bench.run_load`` through ``unillm.bench.Url`` (the code behind
  ``unillm bench``, which measures through aiohttp under httpx, see ``unillm.bench.http``);
* ``unillm-httpx``: the same with ``http="httpx"`` (the SDK's own client);
* ``vllm``: `vllm bench serve` (subprocess, from the vLLM env), with ``--with-vllm``.

Reported per concurrency: the median over rounds of each harness's median TTFT and E2EL (ms),
its request throughput, and unillm's overhead over ``raw`` (E2EL difference in microseconds
and throughput ratio), plus client CPU per request and per chunk (in-process harnesses; the
CPU of this process, so the server's is not counted).

    .venv/bin/python benchmarks/harness_overhead.py               # ~1 min
    .venv/bin/python benchmarks/harness_overhead.py --with-vllm   # + vllm bench serve, ~3 min

Last line: one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from client_overhead import Server

PROMPT = "hello"
CHUNKS = 64


BODY = {
    "model": "tiny",
    "prompt": PROMPT,
    "max_tokens": CHUNKS,
    "stream": True,
    "stream_options": {"include_usage": True},
}


def _is_chunk(line: str | bytes) -> bool:
    """A streamed line that carries a choice (not usage, not ``[DONE]``)."""
    data = line[6:] if line[:6] in ("data: ", b"data: ") else None
    return data is not None and data not in ("[DONE]", b"[DONE]") and bool(json.loads(data).get("choices"))


async def _bare_loop(
    request: Callable[[], Awaitable[tuple[float, float]]], n: int, concurrency: int
) -> dict[str, Any]:
    """Time ``n`` requests (``request`` returns its first and last chunk's time), ``concurrency``
    at once, after one warm-up round that opens the connections."""
    ttfts, e2els = [], []
    limit = asyncio.Semaphore(concurrency)

    async def one() -> None:
        async with limit:
            st = time.perf_counter()
            first, last = await request()
            ttfts.append(first - st)
            e2els.append(last - st)

    await asyncio.gather(*(one() for _ in range(concurrency)))  # connect
    ttfts.clear()
    e2els.clear()
    cpu0, t0 = time.process_time(), time.perf_counter()
    await asyncio.gather(*(one() for _ in range(n)))
    wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    return {
        "median_ttft_ms": 1000 * statistics.median(ttfts),
        "median_e2el_ms": 1000 * statistics.median(e2els),
        "request_throughput": n / wall,
        "cpu_us_per_request": 1e6 * cpu / n,
    }


async def raw_run(url: str, n: int, concurrency: int) -> dict[str, Any]:
    import httpx

    async with httpx.AsyncClient(base_url=url, limits=httpx.Limits(max_connections=256)) as client:

        async def request() -> tuple[float, float]:
            first = last = None
            async with client.stream("POST", "/v1/completions", json=BODY) as r:
                async for line in r.aiter_lines():
                    if _is_chunk(line):
                        last = time.perf_counter()
                        first = first or last
            assert first is not None and last is not None
            return first, last

        return await _bare_loop(request, n, concurrency)


async def raw_aiohttp_run(url: str, n: int, concurrency: int) -> dict[str, Any]:
    import aiohttp

    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=256)) as session:

        async def request() -> tuple[float, float]:
            first = last = None
            async with session.post(f"{url}/v1/completions", json=BODY) as r:
                async for raw in r.content:  # one line at a time
                    if _is_chunk(raw.strip()):
                        last = time.perf_counter()
                        first = first or last
            assert first is not None and last is not None
            return first, last

        return await _bare_loop(request, n, concurrency)


async def unillm_run(url: str, n: int, concurrency: int, http: str = "auto") -> dict[str, Any]:
    from unillm.bench import BenchRequest, Load, run_load
    from unillm.bench.targets import Url

    requests = [BenchRequest(max_tokens=CHUNKS, prompt=PROMPT)] * n
    async with Url("vllm", url, http=http).open() as opened:
        llm = opened.client
        cpu0 = time.process_time()
        result = await run_load(
            llm, requests, Load(max_concurrency=concurrency), warmup=concurrency, sample_every_s=None
        )
        cpu = time.process_time() - cpu0
    assert result.summary is not None and result.summary.completed == n
    assert set(result.output_lens) == {CHUNKS}
    return {
        "median_ttft_ms": result.metric("median_ttft_ms"),
        "median_e2el_ms": result.metric("median_e2el_ms"),
        "request_throughput": result.metric("request_throughput"),
        "cpu_us_per_request": 1e6 * cpu / n,
    }


def vllm_run(url: str, n: int, concurrency: int, tokenizer: str) -> dict[str, Any]:
    from vs_vllm_bench import bench_serve_command

    with tempfile.TemporaryDirectory() as d:
        cmd = bench_serve_command(
            url,
            "tiny",
            tokenizer,
            input_len=8,
            output_len=CHUNKS,
            num_prompts=n,
            concurrency=concurrency,
            warmups=concurrency,
            out=Path(d) / "r.json",
        )
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
        if done.returncode != 0:
            raise SystemExit(f"vllm bench serve failed:\n{done.stderr[-2000:]}")
        r = json.loads((Path(d) / "r.json").read_text())
    return {k: r[k] for k in ("median_ttft_ms", "median_e2el_ms", "request_throughput")}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--requests", type=int, default=400)
    p.add_argument("--concurrency", default="1,8")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument(
        "--harnesses",
        default="raw,raw-aiohttp,unillm,unillm-httpx",
        help="comma-separated: raw, raw-aiohttp, unillm, unillm-httpx",
    )
    p.add_argument("--with-vllm", action="store_true", help="add vllm bench serve (from the vLLM env)")
    args = p.parse_args()
    tokenizer = None
    if args.with_vllm:
        from unillm.testing.tiny_model import build_tiny_model

        tokenizer = str(build_tiny_model().path)
    load_before = os.getloadavg()
    server = Server(0)
    rows: dict[str, dict[str, list[dict[str, Any]]]] = {}
    try:
        for r in range(args.rounds):
            for c in (int(x) for x in args.concurrency.split(",")):
                tools = args.harnesses.split(",") + (["vllm"] if args.with_vllm else [])
                tools = tools[r % len(tools) :] + tools[: r % len(tools)]
                for tool in tools:
                    if tool == "raw":
                        out = asyncio.run(raw_run(server.base_url, args.requests, c))
                    elif tool == "raw-aiohttp":
                        out = asyncio.run(raw_aiohttp_run(server.base_url, args.requests, c))
                    elif tool in ("unillm", "unillm-httpx"):
                        http = "httpx" if tool == "unillm-httpx" else "auto"
                        out = asyncio.run(unillm_run(server.base_url, args.requests, c, http))
                    elif tool == "vllm":
                        assert tokenizer is not None
                        out = vllm_run(server.base_url, args.requests, c, tokenizer)
                    else:
                        raise SystemExit(f"unknown harness {tool!r}")
                    if "cpu_us_per_request" in out:
                        out["cpu_us_per_chunk"] = out["cpu_us_per_request"] / CHUNKS
                    rows.setdefault(str(c), {}).setdefault(tool, []).append(out)
                    print(
                        f"[bench] round {r + 1} c={c} {tool}: "
                        + ", ".join(f"{k}={v:.3f}" for k, v in out.items()),
                        file=sys.stderr,
                    )
    finally:
        server.stop()
    result: dict[str, Any] = {
        "requests": args.requests,
        "rounds": args.rounds,
        "chunks": CHUNKS,
        "load_average": {"before": load_before, "after": os.getloadavg()},
        "per_concurrency": {},
    }
    print(
        f"{'c':>3} {'harness':<13}{'TTFT p50 ms':>12}{'E2EL p50 ms':>13}{'req/s':>9}"
        f"{'CPU us/req':>12}{'us/chunk':>10}"
    )
    for c, tools in rows.items():
        med = {t: {k: statistics.median(x[k] for x in xs) for k in xs[0]} for t, xs in tools.items()}
        for t, m in med.items():
            print(
                f"{c:>3} {t:<13}{m['median_ttft_ms']:>12.3f}{m['median_e2el_ms']:>13.3f}"
                f"{m['request_throughput']:>9.0f}{m.get('cpu_us_per_request', float('nan')):>12.0f}"
                f"{m.get('cpu_us_per_chunk', float('nan')):>10.1f}"
            )
        if "unillm" not in med or "raw" not in med:
            result["per_concurrency"][c] = med
            continue
        med["unillm_overhead"] = {
            "e2el_us": 1000 * (med["unillm"]["median_e2el_ms"] - med["raw"]["median_e2el_ms"]),
            "ttft_us": 1000 * (med["unillm"]["median_ttft_ms"] - med["raw"]["median_ttft_ms"]),
            "throughput_ratio": med["unillm"]["request_throughput"] / med["raw"]["request_throughput"],
            "cpu_per_request_ratio": med["unillm"]["cpu_us_per_request"] / med["raw"]["cpu_us_per_request"],
        }
        result["per_concurrency"][c] = med
    print(json.dumps(result))


if __name__ == "__main__":
    main()
