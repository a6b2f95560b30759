"""Tool calls against a real vLLM (CPU) with the tiny random model.

The session server has no tool parser, so vLLM itself answers every forced tool choice with
HTTP 400; unillm sends a named or ``required`` choice as a structured-outputs JSON schema and
reads the call from the answer. Random weights still give valid calls: the engine constrains
the decoding. Arguments are bounded (enums, small integer ranges) so answers stay short.
"""

from __future__ import annotations

from typing import Literal

import pytest
from pydantic import BaseModel

import unillm

pytestmark = [pytest.mark.anyio, pytest.mark.engine]

ASK = [{"role": "user", "content": "What is the weather in Paris?"}]


class GetWeather(BaseModel):
    """Current weather in a city."""

    city: Literal["Paris", "Rome", "Oslo"]
    unit: Literal["C", "F"]


# Enumerated: random weights would write digits forever (xgrammar here ignores integer bounds)
Digit = Literal[0, 1, 2, 3, 4, 5, 6, 7, 8, 9]


def add(a: Digit, b: Digit) -> int:
    """Add two small numbers."""
    return a + b


ADD = {
    "type": "function",
    "function": {
        "name": "add",
        "description": "Add two small numbers.",
        "parameters": {
            "type": "object",
            "properties": {"a": {"enum": list(range(10))}, "b": {"enum": list(range(10))}},
            "required": ["a", "b"],
        },
    },
}


async def test_a_named_tool_choice_returns_a_valid_call_of_that_tool(llm: unillm.LLM) -> None:
    r = await llm.generate(
        messages=ASK, tools=[GetWeather, ADD], tool_choice="GetWeather", max_tokens=40, temperature=0
    )
    assert r.text == "" and r.finish_reason == "tool_calls"
    (call,) = r.tool_calls
    assert call.name == "GetWeather" and call.valid, call
    assert isinstance(call.parsed, GetWeather)
    assert call.id.startswith("call_")


async def test_required_choice_picks_one_of_the_tools_with_valid_arguments(llm: unillm.LLM) -> None:
    bounded_add = {"type": "function", "function": {**ADD["function"], "name": "add_small"}}  # type: ignore[dict-item]
    r = await llm.generate(
        messages=ASK, tools=[GetWeather, bounded_add], tool_choice="required", max_tokens=48, temperature=0
    )
    (call,) = r.tool_calls
    assert call.name in ("GetWeather", "add_small") and call.valid, call
    if call.name == "add_small":
        assert set(call.parsed) == {"a", "b"} and all(0 <= v <= 9 for v in call.parsed.values())


class Small(BaseModel):
    a: Digit
    b: Digit


@pytest.mark.parametrize("choice", ["add", "required"])
async def test_streamed_tool_calls_join_to_the_non_streamed_calls(llm: unillm.LLM, choice: str) -> None:
    tool = {"type": "function", "function": {"name": "add", "parameters": Small.model_json_schema()}}
    args = {"messages": ASK, "tools": [tool], "tool_choice": choice, "max_tokens": 40, "temperature": 0}
    whole = await llm.generate(**args)  # type: ignore[call-overload]
    async with llm.stream(**args) as stream:  # type: ignore[arg-type]
        deltas = [d async for d in stream]
    pieces = [c for d in deltas for c in d.tool_calls or ()]
    assert pieces[0].id and pieces[0].name == "add"
    assert all(p.id is None and p.name is None for p in pieces[1:])
    assert [(c.name, c.arguments, c.parsed) for c in stream.tool_calls] == [
        (c.name, c.arguments, c.parsed) for c in whole.tool_calls
    ]
    assert stream.tool_calls[0].valid and stream.text == ""
    assert deltas[-1].finish_reason == whole.finish_reason == "tool_calls"


async def test_a_tool_result_continues_the_conversation_to_an_answer(llm: unillm.LLM) -> None:
    first = await llm.generate(messages=ASK, tools=[add], tool_choice="add", max_tokens=40, temperature=0)
    call = first.tool_calls[0]
    assert call.valid and isinstance(call.parsed, dict), call
    result = add(**call.parsed)
    messages = [*ASK, first.message(), {"role": "tool", "tool_call_id": call.id, "content": str(result)}]
    answer = await llm.generate(
        messages=messages, tools=[add], tool_choice="none", max_tokens=8, temperature=0
    )
    assert answer.text and not answer.tool_calls
    # the tool call and its result reached the chat template: the prompt grew by both
    plain = await llm.generate(messages=ASK, max_tokens=1, temperature=0)
    assert answer.usage.prompt_tokens > plain.usage.prompt_tokens + len(str(result))


async def test_auto_on_a_server_without_a_tool_parser_is_a_typed_refusal(llm: unillm.LLM) -> None:
    with pytest.raises(unillm.UnsupportedFeature, match="tool parser"):
        await llm.generate(messages=ASK, tools=[add], max_tokens=4)


async def test_image_parts_to_a_text_only_model_are_refused(llm: unillm.LLM) -> None:
    png = unillm.Image(bytes.fromhex("89504e470d0a1a0a") + b"\x00" * 16)
    with pytest.raises(unillm.UnsupportedFeature, match="image"):
        await llm.generate(messages=[{"role": "user", "content": ["What is this?", png]}], max_tokens=4)


async def test_openai_style_text_parts_are_accepted(llm: unillm.LLM) -> None:
    parts = [{"type": "text", "text": "Say"}, {"type": "text", "text": "something."}]
    r = await llm.generate(messages=[{"role": "user", "content": parts}], max_tokens=4, temperature=0)
    joined = await llm.generate(
        messages=[{"role": "user", "content": "Say\nsomething."}], max_tokens=4, temperature=0
    )
    assert r.text == joined.text and r.usage == joined.usage
