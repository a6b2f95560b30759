"""The thinking tiny model on a real llama-cpp-python server: its GGUF keeps ``<think>`` as a
printed token (the tokenizer does not flag it special), so unillm splits the thought off the
answer client-side, whole and streamed, as the engines with a reasoning parser do."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

import unillm
from unillm.testing.engines import RunningEngine, cpu_launch_settings
from unillm.testing.trained_model import THOUGHT, build_trained_model

pytestmark = [pytest.mark.anyio, pytest.mark.engine, pytest.mark.trained]
ASK = [{"role": "user", "content": "What is 2+2?"}]


@pytest.fixture(scope="module")
def thinking_llamacpp(workdir: Path) -> Iterator[RunningEngine]:
    """llama.cpp serving the thinking model (converted to GGUF by the CPU recipe)."""
    settings = cpu_launch_settings(
        "llamacpp",
        build_trained_model(thinking=True),
        workdir / "llamacpp-thinking",
        served_name="tiny-thinking",
    )
    yield from RunningEngine.serving("llamacpp", workdir / "llamacpp-thinking.log", **settings, progress=None)


async def test_the_thought_comes_back_apart_from_the_answer(thinking_llamacpp: RunningEngine) -> None:
    async with thinking_llamacpp.connect() as llm:
        r = await llm.generate(messages=ASK, max_tokens=24, temperature=0)
    assert r.reasoning == THOUGHT and r.text and "think>" not in r.text


async def test_a_stream_splits_the_same_way(thinking_llamacpp: RunningEngine) -> None:
    async with thinking_llamacpp.connect() as llm:
        r = await llm.generate(messages=ASK, max_tokens=24, temperature=0)
        async with llm.stream(messages=ASK, max_tokens=24, temperature=0) as s:
            await s.collect()
    assert (s.reasoning, s.text) == (r.reasoning, r.text)


class Sum(BaseModel):
    answer: int


def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"Sunny in {city}"


JSON_ASK = [{"role": "user", "content": "What is 2+3? Reply in JSON."}]
WEATHER_ASK = [{"role": "user", "content": "What is the weather in Oslo?"}]
DIGITS = r"[0-9]{1,3}"
CONSTRAINED: dict[str, tuple[list[dict[str, str]], dict[str, Any]]] = {
    "json": (JSON_ASK, {"output": Sum}),
    "choice": (ASK, {"output": unillm.Choice(["yes", "no"])}),
    "regex": (ASK, {"output": unillm.Regex(DIGITS)}),
    "forced call": (WEATHER_ASK, {"tools": [get_weather], "tool_choice": "get_weather"}),
}


def check_answer(kind: str, reasoning: str | None, text: str, parsed: Any, calls: list[Any]) -> None:
    """What the grammar guarantees: a valid answer; the thought, if any, outside it."""
    if kind == "json":
        assert isinstance(parsed, Sum)
    elif kind == "choice":
        assert text in ("yes", "no")
    elif kind == "regex":
        assert re.fullmatch(DIGITS, text)
    else:
        assert [c.name for c in calls] == ["get_weather"] and isinstance(json.loads(calls[0].arguments), dict)
    assert "think>" not in text and "think>" not in (reasoning or "")
    assert not reasoning or reasoning not in text


@pytest.mark.parametrize("kind", sorted(CONSTRAINED))
async def test_a_constrained_answer_comes_after_the_thought(
    thinking_llamacpp: RunningEngine, kind: str
) -> None:
    messages, options = CONSTRAINED[kind]
    async with thinking_llamacpp.connect() as llm:
        r = await llm.generate(messages=messages, thinking=True, max_tokens=96, temperature=0, **options)
        async with llm.stream(messages=messages, thinking=True, max_tokens=96, temperature=0, **options) as s:
            await s.collect()
    assert r.finish_reason != "length", r
    check_answer(kind, r.reasoning, r.text, r.parsed, r.tool_calls)
    check_answer(
        kind, s.reasoning, s.text, None if kind != "json" else Sum.model_validate_json(s.text), s.tool_calls
    )
