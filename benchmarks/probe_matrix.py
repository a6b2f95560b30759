"""Every probe cell on the engines this machine runs, through unillm, the openai SDK and LiteLLM.

Each engine is launched by unillm with its CPU recipe and the tiny random model (vLLM with its
'sql' LoRA); ``unillm.probe`` measures every option by its effect, then the same cells go through
the openai SDK (standard parameters, the rest in ``extra_body``) and LiteLLM's ``hosted_vllm/``
provider (the rest as keyword arguments) on the same server: a column per client.

    .venv/bin/python benchmarks/probe_matrix.py                       # vLLM, llama.cpp, MLX, SGLang
    .venv/bin/python benchmarks/probe_matrix.py --engines llamacpp,mlx --samples 3

Writes ``benchmarks/results/probe_matrix.json`` (every report, with ``goals``); the recorded runs
of engines not probed this time are kept (``--fresh``: dropped). Last line: JSON
``{"engines", "cells", "honoured", "refused", "ignored_unrefused", "litellm_silent_drops", ...}``.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results" / "probe_matrix.json"
PEERS = {"vllm": "hosted_vllm", "sglang": "openai", "llamacpp": "openai"}  # LiteLLM's provider


def settings(engine: str, workdir: Path) -> dict[str, Any] | str:
    """Launch settings for ``engine`` here, or why it cannot run."""
    from unillm.launching.envs import env_dir, managed_python
    from unillm.testing.engines import cpu_launch_settings
    from unillm.testing.tiny_model import build_tiny_model

    tiny = build_tiny_model()
    if engine == "sglang":  # SGLang's CPU build: the test suite's sglang-cpu env (as cross_engine.py)
        if not (env_dir("sglang-cpu") / "bin" / "python").exists():
            return "no SGLang CPU env: run `python adapters/sglang/tests/cpu_env.py`"
        sys.path.insert(0, str(ROOT / "adapters" / "sglang" / "tests"))
        import cpu_env

        settings: dict[str, Any] = cpu_env.launch_settings(tiny.path, workdir)
        return settings
    if engine != "mlx" and managed_python(engine) is None:
        return f"no {engine} env: run `unillm setup {engine}`"
    if engine == "vllm":
        return cpu_launch_settings(
            "vllm", tiny, workdir, served_name="tiny", lora={"sql": str(tiny.loras["sql"])},
            max_lora_rank=8, max_loras=2,
        )  # fmt: skip
    if engine == "mlx":
        return {"model": str(tiny.path), "in_process": True}
    return cpu_launch_settings(engine, tiny, workdir, served_name="tiny")


async def probe_engine(engine: str, samples: int, clients: list[str]) -> dict[str, Any] | str:
    """{client: report} for one engine, or why it did not run."""
    import unillm
    from unillm.probing import run_cells
    from unillm.probing.peers import LiteLLMClient, OpenAIClient

    with tempfile.TemporaryDirectory(prefix="unillm-probe-") as d:
        launched = settings(engine, Path(d))
        if isinstance(launched, str):
            return launched
        reports: dict[str, Any] = {}
        launch = unillm.launch(engine, **launched, log_path=Path(d) / "engine.log")
        async with launch as llm:
            report = await unillm.probe(llm, samples=samples, progress=_progress(engine, "unillm"))
            reports["unillm"] = report.model_dump()
            print(report.text(), file=sys.stderr)
            url = getattr(launch, "base_url", None)
            peers: dict[str, Any] = {}
            if url is not None and engine in PEERS:
                key = launch.spec.key() or "unused"
                if "openai" in clients:
                    peers["openai"] = OpenAIClient(url, report.model, api_key=key)
                if "litellm" in clients:
                    peers["litellm"] = LiteLLMClient(url, report.model, api_key=key, provider=PEERS[engine])
            for name, client in peers.items():
                async with client:
                    peer = await run_cells(
                        client, engine=engine, model=report.model, version=report.version,
                        samples=samples, progress=_progress(engine, name),
                    )  # fmt: skip
                reports[name] = peer.model_dump()
                print(peer.text(), file=sys.stderr)
        return reports


def _progress(engine: str, client: str) -> Any:
    def show(option: str, done: int, total: int) -> None:
        if option:
            print(f"[probe] {engine} via {client}: {done + 1}/{total} {option}", file=sys.stderr)

    return show


def summary(runs: dict[str, Any]) -> dict[str, Any]:
    """The last line: cells and verdicts through unillm, and each peer's silent drops."""
    ran = {e: r for e, r in runs.items() if isinstance(r, dict)}
    cells = [c for r in ran.values() for c in r["unillm"]["cells"]]

    def count(verdict: str, of: list[dict[str, Any]]) -> int:
        return sum(c["verdict"] == verdict for c in of)

    def drops(client: str) -> int:
        return sum(count("ignored", r[client]["cells"]) for r in ran.values() if client in r)

    return {
        "engines": len(ran),
        "cells": len(cells),
        "honoured": count("honoured", cells),
        "refused": count("refused", cells),
        "rejected": count("rejected", cells),
        "unmeasurable": count("unmeasurable", cells),
        "ignored_unrefused": count("ignored", cells),
        "openai_silent_drops": drops("openai"),
        "litellm_silent_drops": drops("litellm"),
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
    parser.add_argument(
        "--engines", default="vllm,llamacpp,mlx,sglang", help="comma-separated: vllm, llamacpp, mlx, sglang"
    )
    parser.add_argument(
        "--fresh", action="store_true", help="drop the recorded runs of engines not probed this time"
    )
    parser.add_argument("--clients", default="unillm,openai,litellm", help="peers beside unillm")
    parser.add_argument("--samples", type=int, default=2)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    runs: dict[str, Any] = {}
    for engine in args.engines.split(","):
        started = time.perf_counter()
        try:
            runs[engine] = anyio.run(probe_engine, engine, args.samples, args.clients.split(","))
        except Exception as e:  # an engine that cannot start is reported, the others still run
            runs[engine] = f"failed: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        print(f"[probe] {engine}: {time.perf_counter() - started:.0f} s", file=sys.stderr)
    if not args.fresh:  # the engines not probed this time keep their recorded runs
        runs = {**recorded(args.out), **runs}
    line = summary(runs)
    goals = {
        "ignored_unrefused": line["ignored_unrefused"],
        "goal": "0 ignored-and-unrefused cells through unillm",
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"goals": goals, "summary": line, "runs": runs}, indent=1) + "\n")
    print(json.dumps({**line, "goals": goals}))


if __name__ == "__main__":
    main()
