"""Client-side CPU of ``llm.embed`` against raw httpx on the same loopback server.

What is measured: ``time.process_time()`` (this process's CPU, all threads) per call that
embeds ``--texts`` texts into 384-dimensional vectors (all-MiniLM-L6-v2's shape) through
vLLM's ``POST /v1/embeddings``, over N sequential calls after a warm-up:

* **httpx**: what a careful caller writes by hand: post the JSON body, decode the answer,
  order the vectors by index, take the usage count;
* **unillm**: ``await llm.embed(texts)`` (one batch), which also checks the count and the
  dimensions and returns validated pydantic ``Embeddings``.

The server is a tiny HTTP/1.1 server in a **separate process** on 127.0.0.1 (the one of
``client_overhead.py``, so its CPU is not counted) answering a pre-encoded body with realistic
floats. Rounds alternate the two clients and the best round counts (as ``timeit`` does; the
medians are in the JSON too). Every answer is checked (vector count, length, a known value).

Run (from the repository root, with the dev venv)::

    .venv/bin/python benchmarks/embed_overhead.py [--calls N] [--texts K] [--quick]

It prints a table, then, as the very last line of stdout, one JSON object:
``embed_vs_httpx`` (CPU ratio, the goal is <= 1.05), the microseconds per call of each client
and their medians. No timing asserts anywhere: this is a measurement.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from client_overhead import _read_body, _recv_until, _response, stop_child

MODEL = "minilm"
DIMENSIONS = 384


def _answer(texts: int) -> bytes:
    rng = random.Random(0)
    data = [
        {"object": "embedding", "index": i, "embedding": [rng.uniform(-0.2, 0.2) for _ in range(DIMENSIONS)]}
        for i in range(texts)
    ]
    data[0]["embedding"][0] = 0.125  # a value every client must read back
    body = {
        "id": "embd-1",
        "object": "list",
        "created": 0,
        "model": MODEL,
        "data": data,
        "usage": {"prompt_tokens": 8 * texts, "total_tokens": 8 * texts, "completion_tokens": 0},
    }
    return json.dumps(body).encode()


def serve(texts: int) -> None:
    """Run the loopback server until killed; print its port on the first line of stdout."""
    plain = {
        b"/version": _response("200 OK", b'{"version": "0.32.0"}'),
        b"/v1/models": _response(
            "200 OK",
            json.dumps(
                {"object": "list", "data": [{"id": MODEL, "object": "model", "max_model_len": 256}]}
            ).encode(),
        ),
        b"/v1/embeddings": _response("200 OK", _answer(texts)),
    }
    missing = _response("404 Not Found", b'{"error": "not found"}')
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    print(listener.getsockname()[1], flush=True)

    def handle(conn: socket.socket) -> None:
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        buf = b""
        with conn:
            while (got := _recv_until(conn, buf, b"\r\n\r\n")) is not None:
                head, buf = got
                lines = head.split(b"\r\n")
                target = lines[0].split(b" ")[1].split(b"?")[0]
                headers = {k.strip().lower(): v.strip() for k, _, v in (x.partition(b":") for x in lines[1:])}
                _, buf = _read_body(conn, buf, headers)
                conn.sendall(plain.get(target, missing))

    while True:
        conn, _ = listener.accept()
        threading.Thread(target=handle, args=(conn,), daemon=True).start()


class Server:
    """The loopback server in a child process; ``stop()`` ends it by PID."""

    def __init__(self, texts: int) -> None:
        argv = [sys.executable, os.path.abspath(__file__), "--serve", "--texts", str(texts)]
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL)
        assert self.proc.stdout is not None
        self.base_url = f"http://127.0.0.1:{int(self.proc.stdout.readline())}"

    def stop(self) -> None:
        stop_child(self.proc)


def _check(vectors: list[list[float]], texts: int) -> None:
    if len(vectors) != texts or len(vectors[0]) != DIMENSIONS or vectors[0][0] != 0.125:
        raise AssertionError("wrong embeddings")


async def measure(base_url: str, texts: list[str], calls: int, rounds: int) -> dict[str, list[float]]:
    import httpx

    import unillm

    raw = httpx.AsyncClient(base_url=base_url, headers={"Authorization": "Bearer k"})
    llm = unillm.connect("vllm", base_url, api_key="k")

    async def by_hand() -> None:
        body = {"model": MODEL, "input": texts, "encoding_format": "float"}
        r = await raw.post("/v1/embeddings", json=body)
        r.raise_for_status()
        answer = r.json()
        data = sorted(answer["data"], key=lambda d: d["index"])
        vectors = [d["embedding"] for d in data]
        _ = answer["usage"]["prompt_tokens"]
        _check(vectors, len(texts))

    async def through_unillm() -> None:
        e = await llm.embed(texts)
        _check(e.vectors, len(texts))

    clients = {"httpx": by_hand, "unillm": through_unillm}
    for fn in clients.values():  # warm-up (and unillm's discovery)
        for _ in range(max(10, calls // (4 * rounds))):
            await fn()
    results: dict[str, list[float]] = {name: [] for name in clients}
    for r in range(rounds):
        order = list(clients) if r % 2 == 0 else list(clients)[::-1]
        for name in order:
            gc.collect()
            start = time.process_time()
            for _ in range(calls // rounds):
                await clients[name]()
            results[name].append((time.process_time() - start) / (calls // rounds))
    await raw.aclose()
    await llm.aclose()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=1600, help="embed calls per client (default 1600)")
    parser.add_argument("--texts", type=int, default=16, help="texts per call (default 16)")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--quick", action="store_true", help="a few calls (smoke test)")
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.texts)
        return
    if args.quick:
        args.calls, args.rounds = 160, 4
    server = Server(args.texts)
    try:
        texts = [f"sentence number {i} to embed" for i in range(args.texts)]
        rounds = asyncio.run(measure(server.base_url, texts, args.calls, args.rounds))
    finally:
        server.stop()
    best = {name: min(v) * 1e6 for name, v in rounds.items()}
    median = {name: statistics.median(v) * 1e6 for name, v in rounds.items()}
    print(f"{'client':<8} {'CPU/call best':>14} {'median':>10}   ({args.texts} texts x {DIMENSIONS} floats)")
    for name in rounds:
        print(f"{name:<8} {best[name]:>12.0f}us {median[name]:>8.0f}us")
    ratio = best["unillm"] / best["httpx"]
    print(f"unillm / httpx: {ratio:.3f}x (goal <= 1.05x)")
    print(
        json.dumps(
            {
                "embed_vs_httpx": round(ratio, 4),
                "embed_median_vs_httpx": round(median["unillm"] / median["httpx"], 4),
                "httpx_us": round(best["httpx"], 1),
                "unillm_us": round(best["unillm"], 1),
                "texts": args.texts,
                "dimensions": DIMENSIONS,
                "calls": args.calls,
                "rounds": args.rounds,
            }
        )
    )


if __name__ == "__main__":
    main()
