"""Every probe cell on all seven engines, through unillm, the openai SDK and LiteLLM.

The real engines this machine runs are launched by unillm one at a time, each with its CPU recipe
and the tiny random model: vLLM (with its 'sql' LoRA), SGLang (the ``sglang-cpu`` env),
llama.cpp (llama-cpp-python's server), mlx_lm.server (both LoRAs) and MLX in process (the 'sql'
LoRA). Ollama, TensorRT-LLM and TGI cannot run here: each is probed through its adapter against
its look-alike, held to the engine's complete contract (Ollama's Go types as its handlers decode
them, trtllm-serve's protocol models with ``extra="forbid"``, TGI's published OpenAPI schema),
in process. ``unillm.probe`` measures every option by its effect, then the same cells go through
the openai SDK (standard parameters, the rest in ``extra_body``) and LiteLLM (the provider its
docs name for the engine, the rest as keyword arguments) on the same server: a column per client
where the client applies (the openai SDK needs an OpenAI-compatible route; MLX in process has no
server).

    .venv/bin/python benchmarks/probe_matrix.py                                 # all eight runs
    .venv/bin/python benchmarks/probe_matrix.py --engines ollama,tensorrt_llm,tgi   # look-alikes only
    .venv/bin/python benchmarks/probe_matrix.py --engines llamacpp,mlx --samples 3

Writes ``benchmarks/results/probe_matrix.json`` (every report, with ``goals``); the recorded runs
of engines not probed this time are kept (``--fresh``: dropped). ``engines`` counts distinct
engines (mlx_lm.server and MLX in process are one engine, two runs). Last line: JSON
``{"engines", "runs", "cells", "honoured", "refused", "ignored_unrefused", "litellm_silent_drops", ...}``.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results" / "probe_matrix.json"
#: Each run: the engine it probes (mlx_server and mlx are mlx_lm.server and MLX in process).
RUNS = {
    "vllm": "vllm",
    "sglang": "sglang",
    "llamacpp": "llamacpp",
    "mlx_server": "mlx",
    "mlx": "mlx",
    "ollama": "ollama",
    "tensorrt_llm": "tensorrt_llm",
    "tgi": "tgi",
}
LOOKALIKES = ("ollama", "tensorrt_llm", "tgi")
#: LiteLLM's provider for each run, as its docs name it for that engine (MLX in process: none).
LITELLM = {
    "vllm": "hosted_vllm",
    "sglang": "openai",
    "llamacpp": "openai",
    "mlx_server": "openai",
    "ollama": "ollama_chat",
    "tensorrt_llm": "openai",
    "tgi": "openai",
}
#: The runs whose server has an OpenAI-compatible route for the openai SDK (the Ollama
#: look-alike serves Ollama's native API only).
OPENAI_SDK = ("vllm", "sglang", "llamacpp", "mlx_server", "tensorrt_llm", "tgi")


def settings(run: str, workdir: Path) -> dict[str, Any] | str:
    """Launch settings for a real engine's run here, or why it cannot run."""
    from unillm.launching.envs import env_dir, managed_python
    from unillm.testing.engines import cpu_launch_settings
    from unillm.testing.tiny_model import build_tiny_model

    tiny, engine = build_tiny_model(), RUNS[run]
    if engine == "sglang":  # SGLang's CPU build: the test suite's sglang-cpu env (as cross_engine.py)
        if not (env_dir("sglang-cpu") / "bin" / "python").exists():
            return "no SGLang CPU env: run `python adapters/sglang/tests/cpu_env.py`"
        _tests_of("sglang")
        import cpu_env

        launched: dict[str, Any] = cpu_env.launch_settings(tiny.path, workdir)
        return launched
    if run != "mlx" and managed_python(engine) is None:
        return f"no {engine} env: run `unillm setup {engine}`"
    loras = {name: str(path) for name, path in tiny.loras.items()}
    if engine == "vllm":
        sql = {"sql": loras["sql"]}
        return cpu_launch_settings(
            "vllm", tiny, workdir, served_name="tiny", lora=sql, max_lora_rank=8, max_loras=2
        )  # fmt: skip
    if run == "mlx":
        return {"model": str(tiny.path), "in_process": True, "lora": {"sql": loras["sql"]}}
    if run == "mlx_server":
        return cpu_launch_settings("mlx", tiny, workdir, lora=loras)
    return cpu_launch_settings(engine, tiny, workdir, served_name="tiny")


def _tests_of(engine: str) -> None:
    """Make an adapter's test helpers (look-alikes, contracts, CPU recipes) importable."""
    folder = str(ROOT / "adapters" / engine / "tests")
    if folder not in sys.path:
        sys.path.insert(0, folder)


@contextmanager
def lookalike(engine: str) -> Iterator[tuple[Any, dict[str, Any]]]:
    """The engine's look-alike, serving, and what ``unillm.connect`` needs beside its URL.

    Ollama's thinks as Ollama's thinking models do; TensorRT-LLM's answers 400 to what
    trtllm-serve's protocol models refuse; TGI's is held to TGI's OpenAPI schema, one token per
    character (stop strings cut anywhere) with room for the probe's long prompt.
    """
    _tests_of(engine)
    if engine == "ollama":
        from ollama_server import OllamaServer

        with OllamaServer(store={"tiny:1b"}, thinking={"tiny:1b": ["Let", " me think."]}) as server:
            yield server, {"model": "tiny:1b"}
    elif engine == "tensorrt_llm":
        from trtllm_protocol import request_problem

        from unillm.testing.honest_server import HonestServer

        with HonestServer(model="tiny", version="1.2.1") as server:
            server.check = request_problem
            yield server, {}
    else:
        from tgi_server import TGIServer

        pieces = tuple("Hello, world! The cat sat on the mat.")
        with TGIServer(pieces=pieces, max_input_tokens=2048, max_total_tokens=4096) as server:
            yield server, {}


async def probe_run(run: str, samples: int, clients: list[str]) -> dict[str, Any] | str:
    """{client: report} for one run, or why it did not run."""
    import unillm

    if RUNS[run] in LOOKALIKES:
        with lookalike(RUNS[run]) as (server, connect):
            async with unillm.connect(RUNS[run], server.url, **connect) as llm:
                reports = await _through_unillm(run, llm, samples)
            contract = list(server.errors) + list(getattr(server, "dropped", []))
            reports.update(await _through_peers(run, server.url, None, reports, samples, clients))
        return {**reports, "contract_errors": contract}
    with tempfile.TemporaryDirectory(prefix="unillm-probe-") as d:
        launched = settings(run, Path(d))
        if isinstance(launched, str):
            return launched
        launch = unillm.launch(RUNS[run], **launched, log_path=Path(d) / "engine.log")
        async with launch as llm:
            reports = await _through_unillm(run, llm, samples)
            url = getattr(launch, "base_url", None)
            if url is not None:
                key = launch.spec.key() or "unused"
                reports.update(await _through_peers(run, url, key, reports, samples, clients))
        return reports


async def _through_unillm(run: str, llm: Any, samples: int) -> dict[str, Any]:
    import unillm

    report = await unillm.probe(llm, samples=samples, progress=_progress(run, "unillm"))
    print(report.text(), file=sys.stderr)
    return {"unillm": report.model_dump()}


async def _through_peers(
    run: str, url: str, key: str | None, reports: dict[str, Any], samples: int, clients: list[str]
) -> dict[str, Any]:
    """The same cells through each peer client that applies to the run."""
    from unillm.probing import run_cells
    from unillm.probing.peers import LiteLLMClient, OpenAIClient

    first = reports["unillm"]
    peers: dict[str, Any] = {}
    if "openai" in clients and run in OPENAI_SDK:
        peers["openai"] = OpenAIClient(url, first["model"], api_key=key or "unused")
    if "litellm" in clients and run in LITELLM:
        peers["litellm"] = LiteLLMClient(url, first["model"], api_key=key or "unused", provider=LITELLM[run])
    out = {}
    for name, client in peers.items():
        async with client:
            peer = await run_cells(
                client, engine=first["engine"], model=first["model"], version=first["version"],
                samples=samples, progress=_progress(run, name),
            )  # fmt: skip
        out[name] = peer.model_dump()
        print(peer.text(), file=sys.stderr)
    return out


def _progress(engine: str, client: str) -> Any:
    def show(option: str, done: int, total: int) -> None:
        if option:
            print(f"[probe] {engine} via {client}: {done + 1}/{total} {option}", file=sys.stderr)

    return show


def summary(runs: dict[str, Any]) -> dict[str, Any]:
    """The last line: engines and runs, cells and verdicts through unillm, each peer's silent drops."""
    ran = {e: r for e, r in runs.items() if isinstance(r, dict)}
    cells = [c for r in ran.values() for c in r["unillm"]["cells"]]

    def count(verdict: str, of: list[dict[str, Any]]) -> int:
        return sum(c["verdict"] == verdict for c in of)

    def drops(client: str) -> int:
        return sum(count("ignored", r[client]["cells"]) for r in ran.values() if client in r)

    return {
        "engines": len({r["unillm"]["engine"] for r in ran.values()}),
        "runs": len(ran),
        "cells": len(cells),
        "honoured": count("honoured", cells),
        "refused": count("refused", cells),
        "rejected": count("rejected", cells),
        "unmeasurable": count("unmeasurable", cells),
        "ignored_unrefused": count("ignored", cells),
        "openai_silent_drops": drops("openai"),
        "litellm_silent_drops": drops("litellm"),
        "lookalike_contract_errors": sum(len(r.get("contract_errors", ())) for r in ran.values()),
        "not_run": {e: r for e, r in runs.items() if isinstance(r, str)},
    }


def recorded(path: Path) -> dict[str, Any]:
    """The runs recorded in ``path`` (none when it does not exist)."""
    if not path.exists():
        return {}
    runs: dict[str, Any] = json.loads(path.read_text())["runs"]
    return runs


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--engines", default=",".join(RUNS), help=f"comma-separated runs: {', '.join(RUNS)}")
    parser.add_argument(
        "--fresh", action="store_true", help="drop the recorded runs of engines not probed this time"
    )
    parser.add_argument("--clients", default="unillm,openai,litellm", help="peers beside unillm")
    parser.add_argument("--samples", type=int, default=2)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    runs: dict[str, Any] = {}
    for run in args.engines.split(","):
        if run not in RUNS:
            parser.error(f"unknown run {run!r}; known: {', '.join(RUNS)}")
        started = time.perf_counter()
        try:
            runs[run] = anyio.run(probe_run, run, args.samples, args.clients.split(","))
        except Exception as e:  # an engine that cannot start is reported, the others still run
            runs[run] = f"failed: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        print(f"[probe] {run}: {time.perf_counter() - started:.0f} s", file=sys.stderr)
    if not args.fresh:  # the engines not probed this time keep their recorded runs
        runs = {**recorded(args.out), **runs}
    runs = dict(sorted(runs.items(), key=lambda kv: list(RUNS).index(kv[0]) if kv[0] in RUNS else len(RUNS)))
    line = summary(runs)
    goals = {
        "engines": line["engines"],
        "ignored_unrefused": line["ignored_unrefused"],
        "lookalike_contract_errors": line["lookalike_contract_errors"],
        "goal": "7 engines; 0 ignored-and-unrefused cells through unillm; 0 look-alike contract errors",
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"goals": goals, "summary": line, "runs": runs}, indent=1) + "\n")
    print(json.dumps({**line, "goals": goals}))


if __name__ == "__main__":
    main()
