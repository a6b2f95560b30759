"""unillm demo: launch a real engine on this machine and use the whole SDK against it.

    ./run demo                 # vLLM (CPU build) with a tiny model built locally; MLX on Apple Silicon
    ./run demo --engine mlx    # MLX in-process (mlx-lm in this process, constraints by unillm)
    python examples/demo.py --model /path/to/hf-model --no-speculative

What it shows: generate, stream, token counting, JSON -> pydantic, regex, choice, grammar, a
tool call the model decides to make and its answer from the tool's result, a LoRA switch (at
launch and loaded at runtime), engine metrics, and ngram speculative decoding giving the same
greedy text as plain decoding, with timings. The model is tiny (2 layers) and trained here on
a synthetic corpus (a few minutes the first time, then cached), so greedy answers make sense
for what it learnt: small sums, capitals, JSON, and calls of get_weather / get_time.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
from pydantic import BaseModel

import unillm
from unillm.testing.engines import cpu_launch_settings
from unillm.testing.tiny_model import build_tiny_model
from unillm.testing.trained_model import build_trained_model


class Capital(BaseModel):
    """A country and its capital, as the model must answer."""

    country: str
    capital: str


def default_engine() -> str:
    """ "mlx" on Apple Silicon (where vLLM's CPU build does not apply), else "vllm"."""
    return "mlx" if sys.platform == "darwin" and platform.machine() == "arm64" else "vllm"


def get_weather(city: str) -> str:
    """Get the current weather in a city."""
    return json.dumps({"city": city, "forecast": "sunny", "temperature": 21})


def get_time(city: str) -> str:
    """Get the local time in a city."""
    return json.dumps({"city": city, "time": "09:30"})


def ask(question: str) -> list[dict[str, Any]]:
    return [{"role": "user", "content": question}]


def show(label: str, r: unillm.Completion[Any]) -> None:
    t = r.timings
    print(
        f"  {label:<18} {r.text!r:<48.48} [{r.finish_reason}, {r.usage.completion_tokens} tok, "
        f"{t.total_s * 1000:.0f} ms]"
    )


async def tour(llm: unillm.LLM, tiny_loras: dict[str, Path], tool_choice: str) -> str:
    info = await llm.info()
    print(f"\nconnected: {llm.engine} {info.version}, model {info.model!r}, context {info.max_model_len}")

    print("\n1. generate (prompt and chat)")
    base = await llm.generate("The capital of France is", max_tokens=16, temperature=0)
    show("prompt", base)
    for question in ("What is 5+3?", "What is the capital of Japan?", "Hello"):
        show(question, await llm.generate(messages=ask(question), max_tokens=12, temperature=0))
    tokens = await llm.tokenize(messages=ask("What is 5+3?"))
    print(
        f"  tokenize(messages) {tokens.count} tokens as the chat template renders them: {tokens.ids[:8]}..."
    )

    print("\n2. stream")
    async with llm.stream("The capital of France is", max_tokens=16, temperature=0) as s:
        print("  ", end="")
        async for d in s:
            print(d.text, end="|", flush=True)
            if d.usage is not None and d.timings is not None:  # the final delta
                t = d.timings
                print(
                    f"\n   first token after {ms(t.ttft_s)}, then {ms(t.tpot_s)} per token "
                    f"({len(t.itl_s)} gaps between chunks), {d.usage.completion_tokens} tokens, "
                    f"finish={d.finish_reason}"
                )
    print(f"   same text as generate(): {s.text == base.text}")

    print("\n3. constrained output (enforced while decoding: by the engine, or by unillm on MLX)")
    r = await llm.generate(
        messages=ask("What is the capital of Kenya? Reply in JSON."),
        output=Capital,
        max_tokens=40,
        temperature=0,
    )
    print(f"  pydantic           {r.parsed!r}")
    r = await llm.generate(
        messages=ask("What is 2+2?"), output=unillm.Regex(r"[0-9]{1,3}"), max_tokens=4, temperature=0
    )
    print(f"  regex              {r.parsed!r}")
    r = await llm.generate(
        messages=ask("Is Paris the capital of France?"),
        max_tokens=4,
        output=unillm.Choice(["yes", "no"]),
        temperature=0,
    )
    print(f"  choice             {r.parsed!r}")
    r = await llm.generate(
        messages=ask("What is the capital of Italy?"),
        max_tokens=8,
        temperature=0,
        output=unillm.Grammar("root ::= [A-Z] [a-z]+"),
    )
    print(f"  grammar            {r.parsed!r}")

    print(f"\n4. tools (tool_choice={tool_choice!r}): the model decides to call, then answers")
    msgs, tools = ask("What is the weather in Paris?"), [get_weather, get_time]
    r = await llm.generate(messages=msgs, tools=tools, tool_choice=tool_choice, max_tokens=60, temperature=0)
    for call in r.tool_calls:
        print(f"  tool call          {call.name}({call.parsed})  [{r.finish_reason}]")
        msgs += [
            r.message(),
            {"role": "tool", "tool_call_id": call.id, "content": get_weather(**(call.parsed or {}))},
        ]
        answer = await llm.generate(messages=msgs, tools=tools, max_tokens=40, temperature=0)
        show("after the result", answer)

    print("\n5. LoRA adapters")
    show("base", base)
    show(
        "lora='sql'", await llm.generate("The capital of France is", max_tokens=16, temperature=0, lora="sql")
    )
    await llm.loras.load("poem", str(tiny_loras["poem"]))
    show(
        "loaded 'poem'",
        await llm.generate("The capital of France is", max_tokens=16, temperature=0, lora="poem"),
    )
    print(f"  adapters now:      {[a.name for a in await llm.loras.list()]}")
    await llm.loras.unload("poem")

    print("\n6. typed errors carry the engine's own message")
    try:
        await llm.generate("x", lora="missing", max_tokens=4)
    except unillm.UnknownLora as e:
        print(f"  UnknownLora:    {str(e)[:110]}...")

    m = await llm.metrics()
    n = m.normalized()  # the same schema on every engine; None where an engine measures nothing
    print(
        f"\n7. metrics: {len(m.names())} series; tokens so far: {num(n.prompt_tokens)} prompt, "
        f"{num(n.generation_tokens)} generated; engine-side TTFT p50 "
        f"{ms(n.ttft.p50 if n.ttft else None)}, waiting {num(n.waiting)}"
    )
    return base.text


def ms(seconds: float | None) -> str:
    return "n/a" if seconds is None else f"{seconds * 1000:.0f} ms"


def num(value: float | None) -> str:
    """A normalized metric for display: "n/a" when the engine does not expose it."""
    if value is None:
        return "n/a"
    return f"{value:.0f}" if value == int(value) else f"{value:.2f}"


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--engine", default=default_engine(), help="vllm (default) or mlx (default on Apple Silicon)"
    )
    parser.add_argument("--model", help="a model folder (default: the tiny model built here)")
    parser.add_argument("--no-speculative", action="store_true", help="skip the second launch")
    args = parser.parse_args()

    t0 = time.perf_counter()
    try:
        tiny = build_trained_model()  # trained once on this machine (a few minutes), then cached
    except RuntimeError as e:  # no interpreter with torch here (e.g. only MLX is set up)
        print(f"cannot train the tiny model ({e}); using the random-weight one (gibberish text)")
        tiny = build_tiny_model()
    print(f"tiny model ready in {time.perf_counter() - t0:.1f}s: {tiny.path}")
    with tempfile.TemporaryDirectory(prefix="unillm-demo-") as tmp:
        lora_settings: dict[str, Any] = {
            "lora": {"sql": str(tiny.loras["sql"])},
            "max_loras": 2,
            "runtime_lora": True,
        }
        if args.engine == "mlx":
            lora_settings["in_process"] = True  # mlx-lm in this process: constraints by unillm
        else:
            lora_settings["max_lora_rank"] = 8  # mlx-lm reads the rank from each adapter
        # the engine's CPU recipe (memory-conscious settings for a CPU-only machine), and what
        # the test model needs there (its adapter package's test recipe)
        settings = cpu_launch_settings(
            args.engine, tiny, Path(tmp), model=args.model or tiny.path, **lora_settings
        )
        t0 = time.perf_counter()
        async with unillm.launch(args.engine, **settings) as llm:
            print(f"{args.engine} launched and answering in {time.perf_counter() - t0:.1f}s")
            # in-process MLX forces calls itself ("required"); reading them from text needs a parser
            auto = tiny.trained and args.engine != "mlx"
            plain = await tour(llm, tiny.loras, "auto" if auto else "required")

        if args.no_speculative:
            return
        if args.engine == "mlx":  # mlx-lm speculates with a draft model: here the model itself
            print("\n8. speculative decoding (draft model, 3 tokens), launched with the same model")
            spec = unillm.Speculative(method="draft", draft_model=settings["model"], num_tokens=3)
        else:
            print("\n8. speculative decoding (ngram, 4 tokens), launched with the same model")
            spec = unillm.Speculative(method="ngram", num_tokens=4, lookup_min=1)
        settings.update(speculative=spec, lora={}, runtime_lora=False)
        settings.pop("max_lora_rank", None), settings.pop("max_loras")
        async with unillm.launch(args.engine, **settings) as llm:
            r = await llm.generate("The capital of France is", max_tokens=16, temperature=0)
            show("speculative", r)
            print(f"  same greedy text as without: {r.text == plain}")
            await llm.generate("1 2 3 4 1 2 3 4 1 2 3 4 1 2 3 4", max_tokens=32, temperature=0)
            n = (await llm.metrics()).normalized()
            print(
                f"  draft tokens proposed {num(n.spec_draft_tokens)}, accepted "
                f"{num(n.spec_accepted_tokens)}, acceptance rate {num(n.spec_acceptance_rate)}, "
                f"tokens per step {num(n.spec_acceptance_length)}"
            )
    print("\nall engines stopped.")


if __name__ == "__main__":
    anyio.run(main)
