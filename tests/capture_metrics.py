"""Capture real ``/metrics`` text from engines running here, as test fixtures (run by hand).

    .venv/bin/python tests/capture_metrics.py vllm      # adapters/vllm/tests/data/metrics-vllm-<version>.prom
    .venv/bin/python tests/capture_metrics.py sglang    # the same for SGLang (needs its CPU test env)

Each engine is launched through unillm with the tiny model (vLLM with ngram speculative
decoding), answers a fixed set of requests (a repeated prompt for prefix-cache hits, streamed
and not, a repetitive prompt the ngram drafter can predict), and its metrics text is saved
with a header naming the engine version. Each adapter's ``test_*_metric_names.py`` normalizes them.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import Any

import anyio

import unillm
from unillm.testing.engines import cpu_launch_settings
from unillm.testing.tiny_model import build_tiny_model

ROOT = Path(__file__).resolve().parents[1]
LONG = " ".join(f"item {i} of the list;" for i in range(20))  # > 1 KV block (vLLM CPU: 128 tokens)
PROMPTS = ["The capital of France is", LONG, LONG, "1 2 3 4 1 2 3 4 1 2 3 4 1 2 3 4"]

REQUESTS = 1 + 2 * len(PROMPTS) + 1  # unillm.launch's readiness probe, each prompt twice, one chat


def settings(engine: str, workdir: Path) -> dict[str, Any]:
    tiny = build_tiny_model()
    if engine == "vllm":
        return cpu_launch_settings(
            "vllm", tiny, workdir, speculative=unillm.Speculative(method="ngram", num_tokens=4, lookup_min=1)
        )
    sys.path.insert(0, str(ROOT / "adapters" / "sglang" / "tests"))
    import cpu_env  # type: ignore[import-not-found]  # adapters/sglang/tests, on sys.path here

    # a larger static fraction than the test recipe's: SGLang counts other processes' memory too
    return dict(cpu_env.launch_settings(tiny.path, workdir, memory_fraction=0.3))


async def capture(engine: str) -> Path:
    with tempfile.TemporaryDirectory(prefix="unillm-capture-") as d:
        async with unillm.launch(engine, **settings(engine, Path(d)), log_path=Path(d) / "engine.log") as llm:
            for prompt in PROMPTS:
                await llm.generate(prompt, max_tokens=24, temperature=0)
                async with llm.stream(prompt, max_tokens=24, temperature=0) as s:
                    await s.collect()
            await llm.generate(messages=[{"role": "user", "content": "hi"}], max_tokens=8)
            info = await llm.info()
            text = (await llm._transport.send(unillm.adapter.base.HttpCall("GET", "/metrics"))).text
    out = ROOT / "adapters" / engine / "tests" / "data" / f"metrics-{engine}-{info.version}.prom"
    out.write_text(
        f"# Captured by tests/capture_metrics.py from {engine} {info.version} (tiny "
        f"random-weight Llama on CPU) after {REQUESTS} requests (launch's readiness probe "
        f"included)\n" + text
    )
    return out


if __name__ == "__main__":
    print(anyio.run(capture, sys.argv[1] if len(sys.argv) > 1 else "vllm"))
