"""Run aurelio-labs ``semantic-router`` on vectors computed elsewhere (called by routing_accuracy.py).

Runs in the peer's own venv, so it imports nothing from unillm:

    <venv>/bin/python benchmarks/peer_semantic_router.py TASKS.json VECTORS.npy

TASKS.json holds ``texts`` (the rows of VECTORS.npy) and ``tasks``: each with ``routes``
(name -> utterances), ``val`` and ``test`` as [text, route or null] pairs. For each task it
prints one JSON line: the test predictions with the peer's defaults (the best route always
wins) and after its documented calibration (``fit`` on the validation pairs, then
``confidence_threshold = 0.5``), and the median microseconds of one ``router(text)`` call.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import sys
import time
from importlib.metadata import version
from pathlib import Path
from typing import Any

import numpy as np
from semantic_router import IndexedRouter, Route
from semantic_router.encoders import DenseEncoder


class CachedEncoder(DenseEncoder):
    """Hands back the vectors routing_accuracy.py embedded through unillm."""

    table: dict[str, list[float]]

    def __call__(self, docs: list[Any]) -> list[list[float]]:
        return [self.table[d] for d in docs]

    async def acall(self, docs: list[Any]) -> list[list[float]]:
        return self(docs)


def predictions(router: IndexedRouter, texts: list[str]) -> tuple[list[str | None], list[float]]:
    """Each text's route and the best route's raw score (router(text)'s choice, scored in a batch)."""
    scored = asyncio.run(router._scores_many(texts))
    return [getattr(router._choose(s, 1, None), "name", None) for s in scored], [
        max(s.values()) for s in scored
    ]


def call_us(router: IndexedRouter, texts: list[str]) -> float:
    times = []
    for text in texts:
        started = time.perf_counter()
        router(text)
        times.append((time.perf_counter() - started) * 1e6)
    return round(statistics.median(times), 1)


def main(tasks_file: str, vectors_file: str) -> None:
    spec = json.loads(Path(tasks_file).read_text())
    vectors = np.load(vectors_file)
    encoder = CachedEncoder(
        name="unillm-cache", table=dict(zip(spec["texts"], vectors.tolist(), strict=True))
    )
    print(json.dumps({"version": version("semantic-router")}), flush=True)
    for task in spec["tasks"]:
        routes = [Route(name=name, utterances=list(u)) for name, u in task["routes"].items()]
        router = IndexedRouter(encoder=encoder, routes=routes)
        test = [t for t, _ in task["test"]]
        default, top = predictions(router, test)
        default_us = call_us(router, test[:: max(1, len(test) // 100)])
        router.fit([t for t, _ in task["val"]], [r for _, r in task["val"]])
        router.confidence_threshold = 0.5
        fitted, _ = predictions(router, test)
        fitted_us = call_us(router, test[:: max(1, len(test) // 100)])
        print(
            json.dumps(
                {
                    "default": default,
                    "top": top,
                    "fitted": fitted,
                    "default_us": default_us,
                    "fitted_us": fitted_us,
                }
            ),
            flush=True,
        )


if __name__ == "__main__":
    main(*sys.argv[1:3])
