"""In process, the thinking tiny model with ``thinking=True`` and a constraint: it thinks, then
answers within the constraint (JSON schema, choice, regex, a forced tool call); the thought comes
back in ``r.reasoning`` and the answer alone is parsed. benchmarks/agents.py measures 200 prompts."""

from __future__ import annotations

import re

import pytest
from pydantic import BaseModel

import unillm
from unillm.testing.trained_model import THOUGHT, build_trained_model

pytestmark = [pytest.mark.anyio, pytest.mark.engine, pytest.mark.trained]
ASK = [{"role": "user", "content": "What is 2+3?"}]


class Sum(BaseModel):
    answer: int


def get_weather(city: str) -> str:
    """Get the current weather in a city."""
    return city


async def test_the_thought_then_a_constrained_answer_of_each_kind() -> None:
    tiny = build_trained_model(thinking=True)
    got = {}
    async with unillm.launch("mlx", model=str(tiny.path), in_process=True, progress=None) as llm:
        for kind, output in (
            ("json", Sum),
            ("choice", unillm.Choice(["yes", "no"])),
            ("regex", unillm.Regex("[0-9]+")),
        ):
            r = await llm.generate(messages=ASK, output=output, thinking=True, temperature=0, max_tokens=60)
            valid = (
                isinstance(r.parsed, Sum) if kind == "json" else bool(re.fullmatch("yes|no|[0-9]+", r.text))
            )
            got[kind] = (r.reasoning, valid)
        weather = [{"role": "user", "content": "What is the weather in Oslo?"}]
        r = await llm.generate(
            messages=weather,
            tools=[get_weather],
            tool_choice="get_weather",
            thinking=True,
            temperature=0,
            max_tokens=60,
        )
        got["tool"] = (r.reasoning, bool(r.tool_calls) and r.tool_calls[0].valid)
    assert got == dict.fromkeys(("json", "choice", "regex", "tool"), (THOUGHT, True))
