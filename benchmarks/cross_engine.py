"""One workload on every engine that runs on this machine, through `unillm bench`.

vLLM-CPU, SGLang (the CPU test recipe), mlx-lm's server and mlx-lm in-process each serve the
tiny model (built locally), are started through ``unillm.launch``, measured under the same
loads, and stopped in turn (a launch matrix). Same workload everywhere: synthetic prompts of
``--input-len`` tokens (the model's tokenizer), ``--output-len`` tokens each (greedy; the tiny
model never emits its end token, so every answer runs to the limit, which the results check),
at maximum concurrencies ``--concurrency``. Each engine uses its own CPU recipe (vLLM bfloat16,
SGLang float32 with torch-native attention, MLX float32 on its CPU backend), so this compares
the engines as they can run here, not kernels at equal settings.

    .venv/bin/python benchmarks/cross_engine.py                  # ~10-15 min here
    .venv/bin/python benchmarks/cross_engine.py --engines vllm,mlx-inprocess --num-prompts 16

Writes ``benchmarks/results/cross_engine/`` (``summary.md``, ``results.json`` with the
aggregates of every run, ``latency_vs_load.png``, ``throughput_vs_latency.png``); an engine
whose environment is missing is listed in ``missing`` with the reason. Last line: JSON.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import anyio

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results" / "cross_engine"
ENGINES = ("vllm", "sglang", "mlx-server", "mlx-inprocess")
LISTS = {"input_lens", "output_lens", "ttfts", "itls", "latencies", "errors"}


def replot() -> None:
    """Redraw the plots from a committed results.json (no engine needed)."""
    from unillm.bench import RunResult
    from unillm.bench.plots import write_plots

    data = json.loads((OUT / "results.json").read_text())
    if "results" in data:
        runs = [RunResult.model_validate(r) for r in data["results"]]
    else:  # an older file: rebuild each run from its vLLM-layout aggregates
        runs = [from_vllm_layout(r) for r in data["runs"]]
    write_plots(runs, OUT)


def from_vllm_layout(r: dict[str, Any]) -> Any:
    """A RunResult (aggregates only) from a run's vLLM-layout JSON without the per-request lists."""
    from unillm.bench import Load, RunResult, Summary, TargetInfo

    # the aggregates every Summary has, which the vLLM layout holds under the same names
    fields = [
        name for name, field in Summary.model_fields.items() if field.is_required() and name != "metrics"
    ]
    metrics = {k: v for k, v in r.items() if k.endswith("_ms")}
    return RunResult(
        target=TargetInfo.model_validate(r["unillm_target"]),
        load=Load.model_validate(r["unillm_load"]),
        workload=r["unillm_workload"],
        num_prompts=r["num_prompts"],
        error=r.get("unillm_error"),
        summary=Summary(**{k: r[k] for k in fields}, metrics=metrics),
    )


def targets(names: list[str], workdir: Path) -> tuple[list[Any], dict[str, str]]:
    """Launch targets for the engines whose env exists here, and why the others are missing."""
    from unillm_mlx.testing import mlx_launch_settings

    from unillm.bench import Launched
    from unillm.launching.envs import env_dir, managed_python
    from unillm.testing.engines import cpu_launch_settings
    from unillm.testing.tiny_model import build_tiny_model

    tiny = build_tiny_model()
    out, missing = [], {}
    for name in names:
        wd = workdir / name
        wd.mkdir(parents=True, exist_ok=True)
        if name == "vllm":
            if managed_python("vllm") is None:
                missing[name] = "no vLLM env: run `unillm setup vllm`"
                continue
            settings = cpu_launch_settings("vllm", tiny, wd, max_num_seqs=16)
            out.append(Launched("vllm", settings, label="vLLM-CPU 0.32 (bf16)", show={}))
        elif name == "sglang":
            if not (env_dir("sglang-cpu") / "bin" / "python").exists():
                missing[name] = "no SGLang CPU env: run `python adapters/sglang/tests/cpu_env.py`"
                continue
            sys.path.insert(0, str(ROOT / "adapters" / "sglang" / "tests"))
            import cpu_env

            settings = cpu_env.launch_settings(tiny.path, wd, max_num_seqs=16)
            out.append(Launched("sglang", settings, label="SGLang 0.5.23 CPU (fp32)", show={}))
        elif name in ("mlx-server", "mlx-inprocess"):
            if managed_python("mlx") is None and name == "mlx-server":
                missing[name] = "no MLX env: run `unillm setup mlx`"
                continue
            in_process = name == "mlx-inprocess"
            if in_process:
                try:
                    import mlx_lm  # noqa: F401
                except ImportError:
                    missing[name] = "mlx-lm is not importable here: pip install 'unillm-sdk[mlx]'"
                    continue
            settings = mlx_launch_settings(tiny, wd, in_process=in_process)
            label = "MLX in-process (mlx-lm)" if in_process else "MLX server (mlx_lm.server)"
            out.append(Launched("mlx", settings, label=label, show={}))
        else:
            raise SystemExit(f"unknown engine {name!r} (known: {', '.join(ENGINES)})")
    return out, missing


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    from unillm.bench import Load, Synthetic, run_suite, write_report
    from unillm.bench.live import live_progress
    from unillm.testing.tiny_model import build_tiny_model

    with tempfile.TemporaryDirectory(prefix="cross-engine-") as d:
        found, missing = targets([e.strip() for e in args.engines.split(",")], Path(d))
        workload = Synthetic(
            num_prompts=args.num_prompts,
            input_len=args.input_len,
            output_len=args.output_len,
            tokenizer=str(build_tiny_model().path),
        )
        loads = [Load(max_concurrency=int(c)) for c in args.concurrency.split(",")]
        with live_progress() as hook:
            report = await run_suite(
                found, workload, loads, options={"temperature": 0}, warmup=args.warmup, progress=hook
            )
        tmp = Path(d) / "report"
        write_report(report, tmp)
        OUT.mkdir(parents=True, exist_ok=True)
        for name in ("summary.md", "latency_vs_load.png", "throughput_vs_latency.png"):
            if (tmp / name).exists():
                shutil.copy(tmp / name, OUT / name)
    runs = [{k: v for k, v in r.to_vllm_json().items() if k not in LISTS} for r in report.runs]
    full_length = {r.target.label: all(n == args.output_len for n in r.output_lens if n) for r in report.runs}
    result = {
        "workload": workload.model_dump(),
        "loads": [x.label() for x in loads],
        "missing": missing,
        "every_answer_full_length": full_length,
        "runs": runs,
        "results": [r.model_dump(mode="json", exclude=LISTS) for r in report.runs],
    }
    (OUT / "results.json").write_text(json.dumps(result, indent=1) + "\n")
    return result


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--engines", default=",".join(ENGINES))
    p.add_argument("--num-prompts", type=int, default=32)
    p.add_argument("--input-len", type=int, default=64)
    p.add_argument("--output-len", type=int, default=32)
    p.add_argument("--concurrency", default="1,4,8")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--replot", action="store_true", help="only redraw the plots from results.json")
    args = p.parse_args()
    if args.replot:
        replot()
        return
    result = anyio.run(main_async, args)
    print((OUT / "summary.md").read_text())
    if result["missing"]:
        print("missing:", result["missing"])
    print(
        json.dumps(
            {
                "missing": result["missing"],
                "every_answer_full_length": result["every_answer_full_length"],
                "runs": [
                    {
                        k: r.get(k)
                        for k in (
                            "label",
                            "max_concurrency",
                            "completed",
                            "failed",
                            "output_throughput",
                            "median_ttft_ms",
                            "median_tpot_ms",
                            "median_e2el_ms",
                            "unillm_error",
                        )
                    }
                    for r in result["runs"]
                ],
            }
        )
    )


if __name__ == "__main__":
    main()
