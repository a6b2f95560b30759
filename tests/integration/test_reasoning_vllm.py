"""The thinking tiny model on real vLLM-CPU with its reasoning parser: the thought comes back in
``r.reasoning`` (whole and streamed), ``r.text`` is the answer alone, ``output=`` binds the answer
after the thought, a tool call after the thought is parsed, and a tool loop over two typed
functions runs to the final answer."""

from __future__ import annotations

import json

import pytest
from pydantic import BaseModel

import unillm
from unillm.client.tool_loop import ToolResult, ToolRun
from unillm.testing.engines import RunningEngine
from unillm.testing.trained_model import THOUGHT

pytestmark = [pytest.mark.anyio, pytest.mark.engine]
ASK = [{"role": "user", "content": "What is 2+2?"}]


def get_weather(city: str) -> str:
    """Get the current weather in a city."""
    return json.dumps({"city": city, "forecast": "snowy", "temperature": 2})


async def get_time(city: str) -> str:
    """Get the local time in a city."""
    return json.dumps({"city": city, "time": "09:30"})


async def test_the_parser_returns_the_thought_apart_from_the_answer(thinking_server: RunningEngine) -> None:
    async with thinking_server.connect() as llm:
        r = await llm.generate(messages=ASK, max_tokens=24, temperature=0)
    # the split is the point (the tiny model's arithmetic is right ~3 times in 4)
    assert r.reasoning == THOUGHT and r.text and "think>" not in r.text


async def test_usage_counts_the_thoughts_tokens(thinking_server: RunningEngine) -> None:
    async with thinking_server.connect() as llm:
        r = await llm.generate(messages=ASK, max_tokens=24, temperature=0)
    assert r.usage.reasoning_tokens is not None and 0 < r.usage.reasoning_tokens < r.usage.completion_tokens


async def test_a_stream_splits_the_same_way(thinking_server: RunningEngine) -> None:
    async with thinking_server.connect() as llm:
        r = await llm.generate(messages=ASK, max_tokens=24, temperature=0)
        async with llm.stream(messages=ASK, max_tokens=24, temperature=0) as s:
            await s.collect()
    assert (s.reasoning.strip(), s.text.strip()) == (r.reasoning, r.text)


async def test_a_tool_call_after_the_thought_is_parsed(thinking_server: RunningEngine) -> None:
    question = [{"role": "user", "content": "What is the weather in Oslo?"}]
    async with thinking_server.connect() as llm:
        r = await llm.generate(messages=question, tools=[get_weather, get_time], max_tokens=60, temperature=0)
    assert r.reasoning == THOUGHT and not r.text
    assert [(c.name, c.parsed) for c in r.tool_calls] == [("get_weather", {"city": "Oslo"})]


async def test_a_forced_call_is_constrained_after_the_thought(thinking_server: RunningEngine) -> None:
    question = [{"role": "user", "content": "What is the weather in Oslo?"}]
    async with thinking_server.connect() as llm:
        r = await llm.generate(
            messages=question,
            tools=[get_weather, get_time],
            tool_choice="get_time",
            max_tokens=60,
            temperature=0,
        )
    # the model would call get_weather: the forced name binds the call, not the thought. The city
    # it writes off its training is any string; the constraint guarantees only the arguments' shape
    # (a whole {"city": "..."} or, cut by max_tokens, a prefix of one), not their length.
    assert r.reasoning == THOUGHT and [c.name for c in r.tool_calls] == ["get_time"]
    assert_arguments_shape(r.tool_calls[0].arguments, cut=r.finish_reason == "length")


def assert_arguments_shape(arguments: str, *, cut: bool) -> None:
    """``arguments`` is ``{"city": <string>}``, or with ``cut`` a prefix of one."""
    closings = ("", '"}', '\\"}', "}") if cut else ("",)
    for closing in closings:
        try:
            value = json.loads(arguments + closing)
        except json.JSONDecodeError:
            continue
        if isinstance(value, dict) and set(value) == {"city"} and isinstance(value["city"], str):
            return
    raise AssertionError(f"not {{'city': str}}{' or a prefix of one' if cut else ''}: {arguments!r}")


async def test_a_tool_loop_over_two_functions_runs_to_the_answer(thinking_server: RunningEngine) -> None:
    question = [{"role": "user", "content": "What is the weather in Oslo?"}]
    async with thinking_server.connect() as llm:
        events = [
            e
            async for e in llm.stream_tools(
                question, tools=[get_weather, get_time], max_turns=3, max_tokens=60, temperature=0
            )
        ]
    run = events[-1]
    assert isinstance(run, ToolRun) and run.stopped == "answer"
    assert [r.call.name for r in events if isinstance(r, ToolResult)] == ["get_weather"]
    assert "Oslo" in run.text and [t.reasoning for t in run.turns] == [THOUGHT, THOUGHT]


class Answer(BaseModel):
    answer: int


async def test_a_json_schema_constrains_the_answer_after_the_thought(thinking_server: RunningEngine) -> None:
    ask = [{"role": "user", "content": "What is 2+3? Reply in JSON."}]
    async with thinking_server.connect() as llm:
        r = await llm.generate(messages=ask, output=Answer, max_tokens=40, temperature=0)
    assert r.reasoning == THOUGHT and isinstance(r.parsed, Answer)


async def test_a_choice_constrains_the_answer_after_the_thought(thinking_server: RunningEngine) -> None:
    async with thinking_server.connect() as llm:
        r = await llm.generate(
            messages=ASK, output=unillm.Choice(["yes", "no"]), max_tokens=24, temperature=0
        )
    # the model would answer a number: the choice binds the answer, not the thought
    assert (r.reasoning, r.text) in ((THOUGHT, "yes"), (THOUGHT, "no"))
