"""The semantic router's decision time on fixed vectors: no engine, no embedding call.

Builds CLINC150-shaped route sets from seeded, clustered 384-dimensional unit vectors (10
domain routes with descriptions and k = 3, 5, 10, 20 utterances each, plus the out-of-scope
default route; 2500 test prompts, 1000 of them out of scope; 300 labelled validation prompts
for ``calibrate``) and times every decision exactly as ``routing_accuracy.py`` does (its
``unillm_runs``: scores + choice, the router's index built first). Prints, per k and method,
the median and p99 µs by the clock and the p99 of this thread's CPU time, and the decisions'
digest (the same vectors give the same digest unless the routes taken change); ``--save`` /
``--compare`` check two versions of the router decide alike (route and top score).

Run::

    .venv/bin/python benchmarks/routing_decision_time.py [--routes 150] [--dimension 384]
    .venv/bin/python benchmarks/routing_decision_time.py --seeds 2 --save /tmp/before.json   # then
    .venv/bin/python benchmarks/routing_decision_time.py --seeds 2 --compare /tmp/before.json

The last line of stdout is one JSON object. No asserts: this is a measurement.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from routing_accuracy import SHOTS, clinc_routes, description, nearest_neighbour, unillm_runs

SEEDS = 5


def fixed_sample(routes: int, dimension: int, seed: int = 0) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """A CLINC150-shaped sample of made-up texts and a fixed vector per text (clusters per route)."""
    rng = np.random.default_rng(seed)
    domains = [f"domain_{i}" for i in range(routes)]
    centres = rng.normal(size=(routes, dimension))
    shared = rng.normal(size=dimension) * 2  # the direction every sentence of a model shares
    table: dict[str, np.ndarray] = {}

    def vector(centre: np.ndarray | None) -> np.ndarray:
        v = (
            shared
            + (centre if centre is not None else rng.normal(size=dimension))
            + rng.normal(size=dimension) * 1.2
        )
        unit: np.ndarray = (v / np.linalg.norm(v)).astype(np.float32)
        return unit

    for i, d in enumerate(domains):
        table[description(d)] = vector(centres[i])
    train = [{d: [f"{d} train {s}-{j}" for j in range(max(SHOTS))] for d in domains} for s in range(SEEDS)]
    val: list[tuple[str, str | None]] = [(f"{d} val {j}", d) for d in domains for j in range(20)] + [
        (f"oos val {j}", None) for j in range(100)
    ]
    test: list[tuple[str, str | None, str]] = [
        (f"{d} test {j}", d, "") for d in domains for j in range(1500 // routes)
    ]
    test += [(f"oos test {j}", None, "") for j in range(1000)]
    for i, d in enumerate(domains):
        for text in [u for draw in train for u in draw[d]] + [t for t, r in val if r == d]:
            table[text] = vector(centres[i])
        for text, _, _ in test:
            if text.startswith(f"{d} "):
                table[text] = vector(centres[i])
    outside = [t for t, label in val if label is None] + [t for t, label, _ in test if label is None]
    for text in outside:  # out of scope: no centre
        table[text] = vector(None)
    return {"domains": domains, "train": train, "val": val, "test": test}, table


def same_decisions(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """Whether every decision took the same route, and the largest change of a top score."""
    shared = sorted(set(before) & set(after))
    routes = sum(b == a for key in shared for b, a in zip(before[key][0], after[key][0], strict=True))
    total = sum(len(before[key][0]) for key in shared)
    drift = max(
        (abs(b - a) for key in shared for b, a in zip(before[key][1], after[key][1], strict=True)),
        default=0.0,
    )
    print(f"same route in {routes} of {total} decisions; largest top-score change {drift:.3g}")
    return {"decisions": total, "same_route": routes, "max_top_score_change": drift}


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--routes", type=int, default=10, help="routes (CLINC150's domains: 10; intents: 150)"
    )
    parser.add_argument("--dimension", type=int, default=384)
    parser.add_argument("--seeds", type=int, default=SEEDS, help="route draws per k (at most 5)")
    parser.add_argument("--save", type=Path, help="write every decision (route, top score) to this JSON file")
    parser.add_argument("--compare", type=Path, help="check the decisions against a file --save wrote")
    args = parser.parse_args()
    sample, table = fixed_sample(args.routes, args.dimension)
    test = [t for t, *_ in sample["test"]]
    val = [(t, d) for t, d in sample["val"]]
    out: dict[str, dict[str, dict[str, float]]] = {}
    digest = hashlib.sha256()
    decided: dict[str, Any] = {}
    for k in SHOTS:
        runs: dict[str, list[dict[str, float]]] = {}
        for seed in range(args.seeds):
            routes = clinc_routes(sample, seed, k)
            found = asyncio.run(unillm_runs(routes, table, val, test))
            found["nearest-neighbour"] = nearest_neighbour(routes, table, test)
            for method, (picked, top, times) in found.items():
                runs.setdefault(method, []).append(times)
                digest.update(json.dumps([k, seed, method, picked]).encode())
                decided[f"{k}/{seed}/{method}"] = [picked, top]
        out[str(k)] = {
            m: {f: round(float(np.mean([t[f] for t in ts])), 1) for f in ts[0]} for m, ts in runs.items()
        }
        for m, t in out[str(k)].items():
            print(f"k={k:>2} {m:<18} " + "  ".join(f"{f} {v:>9}" for f, v in t.items()), flush=True)
    load = [round(x, 1) for x in os.getloadavg()]
    record = {"routes": args.routes, "dimension": args.dimension, "load": load, "k": out}
    record["decisions_sha256"] = digest.hexdigest()
    print(f"decisions digest {record['decisions_sha256']}; load average {load}")
    if args.save:
        args.save.write_text(json.dumps(decided))
    if args.compare:
        record["same_decisions"] = same_decisions(json.loads(args.compare.read_text()), decided)
    print(json.dumps(record, separators=(",", ":")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
