"""vLLM's tool wire format: forced calls as structured outputs without a parser, the OpenAI
tool fields and launch flags with one."""

from __future__ import annotations

import json
from typing import Any, Literal

import pytest
from pydantic import BaseModel
from unillm_vllm import VLLMAdapter

from unillm.adapter.base import EngineInfo
from unillm.adapter.launch_spec import LaunchSpec
from unillm.errors import UnsupportedFeature
from unillm.options import Request, make_request
from unillm.tools import ToolCallAccumulator

ASK = [{"role": "user", "content": "weather?"}]
INFO = EngineInfo(engine="vllm", model="m", version="0.32.0")
REQUIRED_TEXT = '{"name": "GetWeather", "arguments": {"city": "Paris"}}'


class GetWeather(BaseModel):
    """Current weather in a city."""

    city: Literal["Paris", "Rome"]


def add(a: int, b: int = 2) -> int:
    """Add two numbers."""
    return a + b


def chat(**options: Any) -> Request:
    return make_request(None, ASK, None, options, stream=bool(options.pop("stream", False)))


def _chunk(delta: dict[str, Any], finish: str | None = None) -> str:
    return json.dumps({"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})


def test_without_a_known_parser_vllm_gets_forced_calls_as_structured_outputs() -> None:
    body = VLLMAdapter().build(chat(tools=[GetWeather], tool_choice="GetWeather"), INFO).json or {}
    assert body["tool_choice"] == "none" and body["tools"][0]["function"]["name"] == "GetWeather"
    assert body["structured_outputs"]["json"]["properties"]["city"]["enum"] == ["Paris", "Rome"]


def test_with_a_parser_vllm_gets_the_openai_tool_fields() -> None:
    adapter = VLLMAdapter().bind(LaunchSpec(model="m", tool_parser="hermes"))
    body = adapter.build(chat(tools=[GetWeather], tool_choice="GetWeather"), INFO).json or {}
    assert body["tool_choice"] == {"type": "function", "function": {"name": "GetWeather"}}
    assert "structured_outputs" not in body
    assert adapter.build(chat(tools=[GetWeather]), INFO).json["tool_choice"] == "auto"  # type: ignore[index]


@pytest.mark.parametrize(("thinking", "by_schema"), [(True, True), (None, True), (False, False)])
def test_after_a_thought_vllm_gets_a_forced_call_as_structured_outputs(
    thinking: bool | None, by_schema: bool
) -> None:
    # its own forcing did not hold after a thought (benchmarks/agents.py); a schema binds the answer
    adapter = VLLMAdapter().bind(LaunchSpec(model="m", tool_parser="hermes", reasoning_parser="qwen3"))
    request = chat(tools=[GetWeather], tool_choice="GetWeather", thinking=thinking)
    body = adapter.build(request, INFO).json or {}
    assert ("structured_outputs" in body) is by_schema
    assert body["tool_choice"] == (
        "none" if by_schema else {"type": "function", "function": {"name": "GetWeather"}}
    )
    if by_schema:
        answer = {
            "choices": [{"index": 0, "message": {"content": '{"city": "Paris"}'}, "finish_reason": "stop"}]
        }
        (call,) = adapter.parse(answer, request, INFO).choices[0].tool_calls
        assert (call.name, call.parsed) == ("GetWeather", GetWeather(city="Paris"))


def test_auto_on_a_vllm_launched_without_a_parser_is_refused_before_sending() -> None:
    adapter = VLLMAdapter().bind(LaunchSpec(model="m", tool_parser="none"))
    with pytest.raises(UnsupportedFeature, match="tool_parser='hermes'"):
        adapter.build(chat(tools=[GetWeather]), INFO)


def test_vllm_launch_renders_the_tool_parser_flags() -> None:
    argv = VLLMAdapter().command(LaunchSpec(model="m", tool_parser="hermes")).argv
    assert argv[argv.index("--tool-call-parser") + 1] == "hermes" and "--enable-auto-tool-choice" in argv
    assert "--tool-call-parser" not in VLLMAdapter().command(LaunchSpec(model="m", tool_parser="none")).argv


def test_a_streamed_forced_answer_becomes_tool_call_deltas_not_text() -> None:
    request = chat(tools=[GetWeather, add], tool_choice="required", stream=True)
    decoder = VLLMAdapter().decoder(request, INFO)
    text = REQUIRED_TEXT
    events = [_chunk({"content": text[i : i + 5]}) for i in range(0, len(text), 5)] + [_chunk({}, "stop")]
    deltas = [d for e in events for d in decoder.feed(e)]
    assert all(d.text == "" for d in deltas) and deltas[-1].finish_reason == "tool_calls"
    acc = ToolCallAccumulator(request.tools or ())
    for d in deltas:
        acc.add(d.tool_calls)
    whole = VLLMAdapter().parse(
        {"choices": [{"message": {"content": text}, "finish_reason": "stop"}]}, request, INFO
    )
    assert [(c.name, c.arguments, c.parsed) for c in acc.calls()] == [
        (c.name, c.arguments, c.parsed) for c in whole.tool_calls
    ]
