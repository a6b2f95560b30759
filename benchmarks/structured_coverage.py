"""How much of JSONSchemaBench each engine honours, through unillm and raw, side by side.

A stratified sample of real-world JSON schemas (JSONSchemaBench, Geng et al. 2025: the subsets
Github trivial/easy/medium/hard/ultra, Glaiveai2K, JsonSchemaStore, Kubernetes, Snowplow,
WashingtonPost) goes to every engine this machine runs, each launched by unillm with its CPU
recipe and the tiny model: vLLM with each structured-outputs backend (xgrammar, guidance, auto),
SGLang-CPU (xgrammar), llama.cpp, MLX in process (llguidance); TGI is held to its contract
(does unillm build a request, or refuse). Each schema is sent twice: through unillm
(``llm.generate(output=JsonSchema(schema))``) and raw (the engine's own field, over httpx).
Every outcome is one of:

* ``valid``      the answer parses and validates against the schema;
* ``refused``    unillm refused it before sending (UnsupportedFeature / InvalidOptions);
* ``engine_error`` the engine answered an error after sending (4xx, 5xx, dropped);
* ``violation``  a complete answer that does not validate (the engine did not enforce it);
* ``truncated``  cut by max_tokens before the JSON closed (enforcement unmeasured).

The sample (schema ids and the seed) lives in ``benchmarks/data/jsonschemabench_sample.json``;
the schemas themselves come from a checkout of github.com/guidance-ai/jsonschemabench (its
``data/`` folder): ``--data DIR``, ``$UNILLM_JSONSCHEMABENCH``, or ``~/.cache/unillm/jsonschemabench``
(cloned there with git when absent and the network allows).

    .venv/bin/python benchmarks/structured_coverage.py                      # ~15-25 min here
    .venv/bin/python benchmarks/structured_coverage.py --targets vllm:guidance,tgi --per-subset 10
    .venv/bin/python benchmarks/structured_coverage.py --resample --per-subset 40 --seed 2025

Writes ``benchmarks/results/structured_coverage/`` (``summary.md``, ``results.json`` with every
schema's outcome per target and path). Last line: JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import anyio
import httpx

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "benchmarks" / "data" / "jsonschemabench_sample.json"
OUT = ROOT / "benchmarks" / "results" / "structured_coverage"
REPO = "https://github.com/guidance-ai/jsonschemabench"
SUBSETS = (
    "Github_trivial", "Github_easy", "Github_medium", "Github_hard", "Github_ultra",
    "Glaiveai2K", "JsonSchemaStore", "Kubernetes", "Snowplow", "WashingtonPost",
)  # fmt: skip
TARGETS = ("vllm:xgrammar", "vllm:guidance", "vllm:auto", "sglang", "llamacpp", "mlx", "tgi")
OUTCOMES = ("valid", "refused", "engine_error", "violation", "truncated")
PROMPT = "Answer with one JSON value:"


# -- the sample -----------------------------------------------------------------------------
def data_dir(given: str | None) -> Path:
    """The checkout's ``data/`` folder, cloned into the cache when nothing is given or found."""
    base = Path(
        given or os.environ.get("UNILLM_JSONSCHEMABENCH") or Path.home() / ".cache/unillm/jsonschemabench"
    )
    if not (base / "data").is_dir():
        print(f"[coverage] cloning {REPO} into {base}", file=sys.stderr)
        done = subprocess.run(["git", "clone", "--depth", "1", REPO, str(base)], check=False)
        if done.returncode or not (base / "data").is_dir():
            sys.exit(f"no JSONSchemaBench at {base}: clone {REPO} there, or pass --data DIR")
    return base / "data"


def draw_sample(data: Path, per_subset: int, seed: int) -> dict[str, list[str]]:
    """``per_subset`` schema files from each subset, drawn with ``seed`` (sorted names first)."""
    rng = random.Random(seed)
    ids = {}
    for subset in SUBSETS:
        names = sorted(p.name for p in (data / subset).glob("*.json"))
        ids[subset] = sorted(rng.sample(names, min(per_subset, len(names))))
    return ids


def load_sample(data: Path, args: argparse.Namespace) -> list[tuple[str, str, dict[str, Any]]]:
    """(subset, id, schema) for the sample in the repo (or a new draw with ``--resample``)."""
    sample = Path(args.sample)
    if args.resample or not sample.exists():
        ids = draw_sample(data, args.per_subset, args.seed)
        head = subprocess.run(
            ["git", "-C", str(data.parent), "rev-parse", "HEAD"], capture_output=True, text=True
        )
        sample.parent.mkdir(parents=True, exist_ok=True)
        meta = {
            "source": REPO,
            "commit": head.stdout.strip() or None,
            "seed": args.seed,
            "per_subset": args.per_subset,
        }
        sample.write_text(json.dumps({**meta, "ids": ids}, indent=1) + "\n")
    ids = json.loads(sample.read_text())["ids"]
    out = []
    for subset, names in ids.items():
        for name in names[: args.per_subset]:
            path = data / subset / name
            if not path.exists():
                print(f"[coverage] missing from the checkout: {subset}/{name}", file=sys.stderr)
                continue
            schema = json.loads(path.read_text())
            if isinstance(schema, dict):
                out.append((subset, name, schema))
    return out


# -- outcomes -------------------------------------------------------------------------------
def judge(text: str, finish: str | None, schema: Mapping[str, Any]) -> str:
    """valid / violation / truncated for an answer the engine sent back."""
    from jsonschema import validators

    try:
        value = json.loads(text)
    except ValueError:
        return "truncated" if finish == "length" else "violation"
    try:
        error = next(iter(validators.validator_for(schema)(schema).iter_errors(value)), None)
    except Exception:  # a schema Python's validator cannot run (e.g. an engine-dialect regex)
        return "valid"
    return "valid" if error is None else "violation"


async def through_unillm(
    llm: Any, schema: dict[str, Any], args: argparse.Namespace, chat: bool
) -> tuple[str, str]:
    """The outcome through unillm, and the error's message (empty when valid)."""
    import unillm

    where = {"messages": [{"role": "user", "content": PROMPT}]} if chat else {"prompt": PROMPT}
    try:
        with anyio.fail_after(args.timeout):
            await llm.generate(
                **where, output=unillm.JsonSchema(schema), max_tokens=args.max_tokens, temperature=0
            )
    except (unillm.UnsupportedFeature, unillm.InvalidOptions) as e:
        return "refused", str(e)
    except unillm.OutputParseError as e:
        return ("truncated" if e.finish_reason == "length" else "violation"), f"{e} | {e.text[:300]}"
    except (unillm.EngineError, unillm.EngineUnavailable, unillm.MalformedResponse, TimeoutError) as e:
        return "engine_error", str(e) or type(e).__name__
    except unillm.UnillmError as e:
        return f"other:{type(e).__name__}", str(e)
    except Exception as e:  # outside the typed promise: a bug to report
        return f"escaped:{type(e).__name__}", str(e)
    return "valid", ""


def raw_body(engine: str, schema: dict[str, Any], args: argparse.Namespace) -> tuple[str, dict[str, Any]]:
    """The engine's own constrained request for ``schema``, as its docs show it."""
    base = {"model": "tiny", "max_tokens": args.max_tokens, "temperature": 0}
    if engine == "vllm":
        return "/v1/completions", {**base, "prompt": PROMPT, "structured_outputs": {"json": schema}}
    chat = {**base, "messages": [{"role": "user", "content": PROMPT}]}
    if engine == "llamacpp":  # llama-cpp-python's server
        return "/v1/chat/completions", {**chat, "response_format": {"type": "json_object", "schema": schema}}
    fmt = {"type": "json_schema", "json_schema": {"name": "output", "schema": schema}}
    return "/v1/chat/completions", {**chat, "response_format": fmt}


async def raw(
    client: httpx.AsyncClient, engine: str, schema: dict[str, Any], args: argparse.Namespace
) -> str:
    path, body = raw_body(engine, schema, args)
    try:
        answer = await client.post(path, json=body, timeout=args.timeout)
    except httpx.HTTPError:
        return "engine_error"
    if answer.status_code != 200:
        return "engine_error"
    try:
        choice = answer.json()["choices"][0]
        text = choice["text"] if "text" in choice else choice["message"]["content"]
    except (ValueError, LookupError, TypeError):
        return "engine_error"  # a 200 without an answer in it
    return judge(text or "", choice.get("finish_reason"), schema)


def test_model(kind: str) -> Any:
    """The project's trained tiny model (it closes its strings) or the random-weights one."""
    if kind == "trained":
        from unillm.testing.trained_model import build_trained_model

        return build_trained_model()
    from unillm.testing.tiny_model import build_tiny_model

    return build_tiny_model()


# -- targets --------------------------------------------------------------------------------
def settings_for(target: str, tiny: Any, workdir: Path, compact: bool) -> dict[str, Any] | str:
    """Launch settings for a target, or why it cannot run here."""
    from unillm.launching.envs import managed_python
    from unillm.testing.engines import cpu_launch_settings

    engine, _, backend = target.partition(":")
    if engine == "vllm":
        if managed_python("vllm") is None:
            return "no vLLM env: run `unillm setup vllm`"
        return cpu_launch_settings(
            "vllm",
            tiny,
            workdir,
            served_name="tiny",
            structured_backend=backend,
            compact_json=compact if backend != "auto" else None,  # vLLM: not with auto
        )
    if engine == "sglang":
        sys.path.insert(0, str(ROOT / "adapters" / "sglang" / "tests"))
        import cpu_env

        if not cpu_env.is_ready():
            return "no SGLang CPU env: run `python adapters/sglang/tests/cpu_env.py`"
        return cpu_env.launch_settings(tiny.path, workdir, compact_json=compact)
    if engine == "llamacpp":
        if managed_python("llamacpp") is None:
            return "no llama.cpp env: run `unillm setup llamacpp`"
        return cpu_launch_settings("llamacpp", tiny, workdir, served_name="tiny")
    if engine == "mlx":
        try:
            import mlx_lm  # noqa: F401
        except ImportError:
            return "mlx-lm is not importable here (unillm-sdk[mlx])"
        return {"model": str(tiny.path), "in_process": True}
    return f"unknown target {target!r}"


async def run_target(
    target: str, schemas: list[tuple[str, str, dict[str, Any]]], args: argparse.Namespace
) -> Any:
    """{"unillm": [...], "raw": [...] or None} outcomes in sample order, or why it did not run."""
    import unillm

    if target == "tgi":
        return {"unillm": tgi_contract(schemas), "raw": None}
    tiny = test_model(args.model)
    with tempfile.TemporaryDirectory(prefix="unillm-coverage-") as d:
        settings = settings_for(target, tiny, Path(d), args.compact)
        if isinstance(settings, str):
            return settings
        engine = target.partition(":")[0]
        launch = unillm.launch(engine, **settings, log_path=Path(d) / "engine.log")
        limit = anyio.CapacityLimiter(args.concurrency)
        done: list[int] = []
        results: dict[str, list[str]] = {key: [""] * len(schemas) for key in ("unillm", "raw", "why")}
        async with launch as llm:
            key = launch.spec.key()
            headers = {"Authorization": f"Bearer {key}"} if key else {}
            async with httpx.AsyncClient(base_url=launch.base_url, headers=headers) as client:

                async def one(path: str, i: int, schema: dict[str, Any]) -> None:
                    async with limit:
                        if path == "unillm":
                            chat = engine == "llamacpp"
                            outcome, why = await through_unillm(llm, schema, args, chat=chat)
                            results["unillm"][i], results["why"][i] = outcome, why[:600]
                        else:
                            results["raw"][i] = await raw(client, engine, schema, args)
                        done.append(i)
                        if len(done) % 50 == 0 or len(done) == len(schemas):
                            print(f"[coverage] {target} {path}: {len(done)}/{len(schemas)}", file=sys.stderr)

                # every unillm request first, then the raw ones: a raw request that kills the
                # server (llama-cpp-python's, on a schema unillm refuses) fails only raw ones
                paths = ["unillm", "raw"] if engine != "mlx" and args.raw else ["unillm"]
                for path in paths:  # in process (mlx): no wire to send it raw over
                    done.clear()
                    async with anyio.create_task_group() as tg:
                        for i, (_, _, schema) in enumerate(schemas):
                            tg.start_soon(one, path, i, schema)
        if engine == "mlx" or not args.raw:
            results.pop("raw")
        return results


def tgi_contract(schemas: list[tuple[str, str, dict[str, Any]]]) -> list[str]:
    """TGI: does unillm build the grammar request (``valid`` = sendable) or refuse before sending."""
    import unillm
    from unillm.adapter.base import EngineInfo
    from unillm.adapter.registry import get_adapter
    from unillm.options import make_request

    adapter, info = get_adapter("tgi"), EngineInfo(engine="tgi", model="tiny", version="3.3.0")
    out = []
    for _, _, schema in schemas:
        try:
            request = make_request(PROMPT, None, unillm.JsonSchema(schema), {"max_tokens": 8}, stream=False)
            adapter.build(request, info)
            out.append("valid")
        except (unillm.UnsupportedFeature, unillm.InvalidOptions):
            out.append("refused")
        except Exception as e:
            out.append(f"escaped:{type(e).__name__}")
    return out


# -- report ---------------------------------------------------------------------------------
def tally(schemas: list[tuple[str, str, dict[str, Any]]], outcomes: list[str]) -> dict[str, Counter[str]]:
    by: dict[str, Counter[str]] = {"all": Counter()}
    for (subset, _, _), outcome in zip(schemas, outcomes, strict=True):
        by.setdefault(subset, Counter())[outcome] += 1
        by["all"][outcome] += 1
    return by


def summary(
    schemas: list[tuple[str, str, dict[str, Any]]], runs: dict[str, Any]
) -> tuple[str, dict[str, Any]]:
    lines = [
        "| target | path | subset | " + " | ".join(OUTCOMES) + " | other |",
        "|" + "---|" * (len(OUTCOMES) + 4),
    ]
    totals: dict[str, Any] = {}
    for target, result in runs.items():
        if isinstance(result, str):
            totals[target] = {"skipped": result}
            continue
        for path in ("unillm", "raw"):
            if not result.get(path):
                continue
            by = tally(schemas, result[path])
            for subset, counts in by.items():
                other = sum(v for k, v in counts.items() if k not in OUTCOMES)
                cells = " | ".join(str(counts[o]) for o in OUTCOMES)
                lines.append(f"| {target} | {path} | {subset} | {cells} | {other} |")
            totals.setdefault(target, {})[path] = dict(by["all"])
    return "\n".join(lines), totals


def matrix(totals: dict[str, Any]) -> str:
    """One row per target and path over the whole sample (the docs' table)."""
    rows = ["| engine (backend) | path | " + " | ".join(OUTCOMES) + " |", "|" + "---|" * (len(OUTCOMES) + 2)]
    for target, paths in totals.items():
        if "skipped" in paths:
            rows.append(f"| {target} | — | {paths['skipped']} |" + " |" * (len(OUTCOMES) - 1))
            continue
        for path, counts in paths.items():
            rows.append(
                f"| {target} | {path} | " + " | ".join(str(counts.get(o, 0)) for o in OUTCOMES) + " |"
            )
    return "\n".join(rows)


def earlier_runs(ids: list[str], out: Path) -> dict[str, Any]:
    """The runs in results.json when it holds the same sample (``--keep`` adds to them)."""
    path = out / "results.json"
    earlier = json.loads(path.read_text()) if path.exists() else {}
    return dict(earlier.get("runs", {})) if earlier.get("schemas") == ids else {}


def write_results(ids: list[str], runs: dict[str, Any], out: Path) -> tuple[str, dict[str, Any]]:
    schemas = [(i.split("/", 1)[0], i, {}) for i in ids]
    table, totals = summary(schemas, runs)
    out.mkdir(parents=True, exist_ok=True)
    (out / "summary.md").write_text(matrix(totals) + "\n\nPer subset:\n\n" + table + "\n")
    (out / "results.json").write_text(json.dumps({"schemas": ids, "runs": runs, "totals": totals}, indent=1))
    return table, totals


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", help="a checkout of guidance-ai/jsonschemabench")
    parser.add_argument("--targets", default=",".join(TARGETS))
    parser.add_argument("--per-subset", type=int, default=40)
    parser.add_argument("--seed", type=int, default=2025)
    parser.add_argument("--resample", action="store_true", help="draw a new sample and save its ids")
    parser.add_argument("--max-tokens", type=int, default=160)
    parser.add_argument("--model", choices=("trained", "random"), default="trained")
    parser.add_argument(
        "--spaced", dest="compact", action="store_false", help="allow whitespace in JSON (vLLM, SGLang)"
    )
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--timeout", type=float, default=120.0)
    parser.add_argument("--sample", default=str(SAMPLE), help="the sample's ids and seed (JSON)")
    parser.add_argument("--out", default=str(OUT), help="where summary.md and results.json go")
    parser.add_argument("--keep", action="store_true", help="keep other targets' results from results.json")
    parser.add_argument(
        "--no-raw",
        dest="raw",
        action="store_false",
        help="through unillm only",
    )
    args = parser.parse_args()
    schemas = load_sample(data_dir(args.data), args)
    print(f"[coverage] {len(schemas)} schemas from {len(SUBSETS)} subsets", file=sys.stderr)
    ids = [f"{s}/{n}" for s, n, _ in schemas]
    out = Path(args.out)
    runs = earlier_runs(ids, out) if args.keep else {}
    for target in args.targets.split(","):
        started = time.perf_counter()
        try:
            runs[target] = anyio.run(run_target, target, schemas, args)
        except Exception as e:  # a target that cannot start is reported, the others still run
            runs[target] = f"failed: {type(e).__name__}: {str(e).splitlines()[0]}"
        print(f"[coverage] {target}: {time.perf_counter() - started:.0f} s", file=sys.stderr)
        write_results(ids, runs, out)  # after every target: a long run keeps what it measured
    table, totals = write_results(ids, runs, out)
    print(table)
    through = {t: v["unillm"] for t, v in totals.items() if isinstance(v, dict) and "unillm" in v}
    goals = {
        "engine_errors_through_unillm": sum(c.get("engine_error", 0) for c in through.values()),
        "violations_through_unillm": sum(c.get("violation", 0) for c in through.values()),
        "escaped": sum(n for c in through.values() for k, n in c.items() if k.startswith("escaped")),
    }
    print(
        json.dumps(
            {
                "schemas": len(schemas),
                "model": args.model,
                "compact": args.compact,
                "max_tokens": args.max_tokens,
                "totals": totals,
                "goals": goals,
            }
        )
    )


if __name__ == "__main__":
    main()
