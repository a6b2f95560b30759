"""``output=`` and forced tool calls with thinking: a server launched with a reasoning parser
(vLLM, SGLang) applies the constraint to the answer after the thought, so both go out; where the
constraint would start at the first token, ``thinking=True`` with one is refused before sending."""

from __future__ import annotations

from typing import Any

import pytest

import unillm
from unillm.adapter import get_adapter
from unillm.adapter.base import EngineInfo, HttpCall
from unillm.adapter.launch_spec import LaunchSpec
from unillm.options import make_request

CHAT = [{"role": "user", "content": "2+2?"}]
YES_NO = unillm.Choice(["yes", "no"])


def weather(city: str) -> str:
    """Weather in a city."""
    return city


def build(engine: str, parser: str | None, **options: Any) -> HttpCall:
    """The call ``engine`` makes, bound to a launch with reasoning parser ``parser`` (None: a
    connected server, nothing known)."""
    adapter = get_adapter(engine)
    if parser is not None:
        adapter = adapter.bind(LaunchSpec(model="/m", reasoning_parser=parser, **options.pop("spec", {})))
    output = options.pop("output", None)
    request = make_request(None, CHAT, output, options, stream=False)
    return adapter.build(request, EngineInfo(engine=engine, model="m"))


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_a_launched_reasoning_parser_lets_thinking_and_output_go_out(engine: str) -> None:
    call = build(engine, "qwen3", thinking=True, output=YES_NO)
    assert call.json is not None and call.json["chat_template_kwargs"] == {"enable_thinking": True}


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_thinking_with_output_is_refused_on_a_server_launched_without_a_parser(engine: str) -> None:
    with pytest.raises(unillm.UnsupportedFeature, match="thinking=True with output=") as raised:
        build(engine, "none", thinking=True, output=YES_NO)
    assert raised.value.engine == engine and "reasoning_parser=" in raised.value.alternative


def test_thinking_with_a_forced_tool_call_is_refused_without_a_parser() -> None:
    with pytest.raises(unillm.UnsupportedFeature, match="a forced tool call"):
        build("vllm", "none", thinking=True, tools=[weather], tool_choice="required")


def test_vllm_with_structured_outputs_in_reasoning_constrains_from_the_first_token() -> None:
    in_reasoning = {"extra_args": ["--structured-outputs-config.enable_in_reasoning=true"]}
    with pytest.raises(unillm.UnsupportedFeature, match="output="):
        build("vllm", "qwen3", spec=in_reasoning, thinking=True, output=YES_NO)


def test_mlx_lets_thinking_with_output_go_out_its_grammar_allows_the_thought() -> None:
    call = build("mlx", None, thinking=True, output=YES_NO)
    assert call.json is not None and call.json["chat_template_kwargs"] == {"enable_thinking": True}


@pytest.mark.parametrize("options", [{"output": YES_NO}, {"tools": [weather], "tool_choice": "required"}])
def test_llamacpp_sends_the_constraint_as_a_grammar_with_room_for_a_thought(options: dict[str, Any]) -> None:
    call = build("llamacpp", None, thinking=True, **options)
    assert call.json is not None and "response_format" not in call.json
    assert call.json["grammar"].startswith("root ::= think? answer-root\n")


def test_a_connected_server_is_not_second_guessed() -> None:
    assert build("vllm", None, thinking=True, output=YES_NO).json is not None


def test_output_without_thinking_true_goes_out_without_a_parser() -> None:
    assert build("vllm", "none", output=YES_NO).json is not None
