"""Rebuild ``clinc150-sample.json.gz`` from the full CLINC150 release (clinc/oos-eval).

    python benchmarks/data/clinc150/make_sample.py path/to/data_full.json path/to/domains.json

Not needed to run the benchmark: the sample it writes is vendored next to it. Fixed seeds, so
the output is the same on every machine.
"""

from __future__ import annotations

import gzip
import json
import random
import sys
from pathlib import Path

SEEDS = 5  # independent k-shot draws
SHOTS = 20  # per domain and seed; k = 3, 5, 10 take the first k
VAL_PER_DOMAIN = 20  # the labelled set router.calibrate() learns from
TEST_PER_INTENT = 10  # 150 per domain; all 1000 out-of-scope test prompts are kept
OUT = Path(__file__).with_name("clinc150-sample.json.gz")


def main(full: str, domains_file: str) -> None:
    """Write the sample."""
    data = json.loads(Path(full).read_text())
    domains: dict[str, list[str]] = json.loads(Path(domains_file).read_text())
    domain_of = {intent: domain for domain, intents in domains.items() for intent in intents}
    rng = random.Random(150)
    by_domain: dict[str, list[str]] = {d: [] for d in domains}
    for text, intent in data["train"]:
        by_domain[domain_of[intent]].append(text)
    train = [{d: rng.sample(texts, SHOTS) for d, texts in by_domain.items()} for _ in range(SEEDS)]
    val_by_domain: dict[str, list[str]] = {d: [] for d in domains}
    for text, intent in data["val"]:
        val_by_domain[domain_of[intent]].append(text)
    val = [[t, d] for d, texts in val_by_domain.items() for t in rng.sample(texts, VAL_PER_DOMAIN)]
    val += [[t, None] for t, _ in data["oos_val"]]
    test_by_intent: dict[str, list[str]] = {}
    for text, intent in data["test"]:
        test_by_intent.setdefault(intent, []).append(text)
    test = [
        [t, domain_of[i], i]
        for i in sorted(test_by_intent)
        for t in rng.sample(test_by_intent[i], TEST_PER_INTENT)
    ]
    test += [[t, None, None] for t, _ in data["oos_test"]]
    sample = {"domains": domains, "train": train, "val": val, "test": test}
    OUT.write_bytes(gzip.compress(json.dumps(sample, separators=(",", ":")).encode(), mtime=0))
    print(f"{OUT}: {len(val)} val, {len(test)} test, {SEEDS}x{SHOTS} train per domain")


if __name__ == "__main__":
    main(*sys.argv[1:3])
