"""Proof that a conversation keeps its thoughts: drive a transcript of many turns (thoughts, tool
calls, tool results) against a real engine and compare, at every turn, the prompt tokens the
engine counted with the engine's own tokenizer on the transcript unillm rendered.

    model = reasoning_template_copy(build_trained_model(thinking=True).path, workdir / "m")
    turns = await drive(llm, turns=10, tools=[get_weather], mode="field")
    sum(t.lost for t in turns), all(t.thoughts_rendered == t.thoughts_expected for t in turns)

Nothing lost: ``prompt_tokens`` of each turn equals the rendered transcript's token count.
Nothing doubled: the rendered transcript holds each earlier thought exactly once (its ``<think>``
tokens), or none when the mode drops them.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from unillm.client.tool_loop import execute
from unillm.tools import to_tools

__all__ = ["QUESTIONS", "ReplayTurn", "drive", "reasoning_template_copy", "replay_launch_settings"]

#: The user turns of a driven transcript, in turn (weather questions call a tool).
QUESTIONS = (
    "What is the weather in Oslo?",
    "What is 2+2?",
    "What is the weather in Paris?",
    "What is the capital of France?",
    "What is the weather in Tokyo?",
)
#: What the copied template writes before an assistant message's content (Qwen3's layout).
_THOUGHT = "{% if message.reasoning_content %}<think>{{ message.reasoning_content }}</think>{% endif %}"


@dataclass(frozen=True, slots=True)
class ReplayTurn:
    """One turn of a driven transcript: what the engine counted and what its tokenizer rendered."""

    turn: int
    prompt_tokens: int  #: the engine's usage for this turn's request
    rendered_tokens: int  #: the engine's tokenizer on the same messages, tools and replay mode
    thoughts_rendered: int  #: ``<think>`` tokens in the rendered prompt
    thoughts_expected: int  #: earlier thoughts the mode sends back (0 for "drop")
    called: bool = False  #: the turn answered with tool calls (else with text)

    @property
    def lost(self) -> int:
        """Tokens of the rendered transcript the engine did not count (0: nothing lost)."""
        return max(0, self.rendered_tokens - self.prompt_tokens)

    @property
    def doubled(self) -> int:
        """Tokens the engine counted beyond the rendered transcript (0: nothing doubled)."""
        return max(0, self.prompt_tokens - self.rendered_tokens)


def reasoning_template_copy(model: Path, dest: Path) -> Path:
    """A copy of a tiny-model folder whose chat template renders an assistant message's
    ``reasoning_content`` before its content, as Qwen3's does (the field a server hands over).

    Args:
        model: The model folder (``TinyModel.path``).
        dest: Where the copy goes (replaced if there).

    Returns:
        ``dest``.
    """
    if dest.exists():
        shutil.rmtree(dest)
    shutil.copytree(model, dest)
    config_path = dest / "tokenizer_config.json"
    config = json.loads(config_path.read_text())
    template: str = config["chat_template"]
    template = template.replace(
        "<|assistant|>\n{% if message.content %}", "<|assistant|>\n" + _THOUGHT + "{% if message.content %}"
    )
    template = template.replace(
        "<|{{ message.role }}|>\n{{ message.content }}",
        "<|{{ message.role }}|>\n{% if message.role == 'assistant' %}"
        + _THOUGHT
        + "{% endif %}{{ message.content }}",
    )
    config["chat_template"] = template
    config_path.write_text(json.dumps(config, indent=2))
    return dest


def replay_launch_settings(engine: str, workdir: Path, **overrides: Any) -> dict[str, Any]:
    """Launch settings for the thinking tiny model, its template taught to render
    ``reasoning_content`` (:func:`reasoning_template_copy`), on ``engine``'s CPU recipe; vLLM and
    SGLang get the qwen3 reasoning parser and the hermes tool parser.

    Args:
        engine: The engine to launch.
        workdir: Where the model copy and the engine's private dirs go.
        **overrides: More launch settings (they win).
    """
    from unillm.testing.engines import cpu_launch_settings
    from unillm.testing.trained_model import build_trained_model

    tiny = build_trained_model(thinking=True)
    model = reasoning_template_copy(tiny.path, workdir / f"{engine}-replay-model")
    parsers = {"tool_parser": "hermes", "reasoning_parser": "qwen3"} if engine in ("vllm", "sglang") else {}
    return cpu_launch_settings(
        engine, tiny, workdir / f"{engine}-replay", model=str(model), **{**parsers, **overrides}
    )


def _functions(tools: Sequence[Callable[..., Any]]) -> dict[str, Callable[..., Any]]:
    return {t.name: t.function for t in to_tools(tools) if t.function is not None}


async def drive(
    llm: Any,
    *,
    turns: int,
    tools: Sequence[Callable[..., Any]],
    mode: str,
    max_tokens: int = 60,
    questions: Sequence[str] = QUESTIONS,
    turn_options: Callable[[Sequence[Mapping[str, Any]]], Mapping[str, Any]] | None = None,
    **options: Any,
) -> list[ReplayTurn]:
    """Drive ``turns`` assistant turns (greedy), each sent with the whole transcript so far.

    After a tool call the tools run and their results follow; after an answer the next question
    does. Before each turn the same messages are tokenized with the chat template.

    Args:
        llm: A connected client of an engine with a tokenize endpoint.
        turns: How many assistant turns.
        tools: Typed Python functions the model may call.
        mode: ``replay_reasoning=`` for every turn ("field", "inline" or "drop").
        max_tokens: The most tokens per answer.
        questions: The user turns, in turn (cycled).
        turn_options: Options for one turn from the transcript so far (they win): a forced call.
        **options: More per-call options for every turn (``tool_choice``, ``thinking``, ...).

    Returns:
        One :class:`ReplayTurn` per turn.
    """
    think, functions = (await llm.tokenize("<think>")).ids[-1], _functions(tools)
    transcript: list[dict[str, Any]] = [{"role": "user", "content": questions[0]}]
    asked, out = 1, []
    for turn in range(turns):
        rendered = (await llm.tokenize(messages=transcript, tools=tools, replay_reasoning=mode)).ids
        dropped = (await llm.tokenize(messages=transcript, tools=tools, replay_reasoning="drop")).ids
        this_turn = {"temperature": 0, **options, **(turn_options(transcript) if turn_options else {})}
        r = await llm.generate(
            messages=transcript, tools=tools, replay_reasoning=mode, max_tokens=max_tokens, **this_turn
        )
        thoughts = sum(1 for m in transcript if m.get("reasoning")) if mode != "drop" else 0
        out.append(
            ReplayTurn(
                turn=turn,
                prompt_tokens=r.usage.prompt_tokens,
                rendered_tokens=len(rendered),
                thoughts_rendered=rendered.count(think),
                thoughts_expected=dropped.count(think) + thoughts,
                called=bool(r.tool_calls),
            )
        )
        transcript.append(r.message())
        if r.tool_calls:
            transcript += [(await execute(c, functions)).message() for c in r.tool_calls]
        else:
            transcript.append({"role": "user", "content": questions[asked % len(questions)]})
            asked += 1
    return out
