"""What trtllm-serve makes of unillm's requests (``to_sampling_params`` in openai_protocol.py at
0076e93, modelled in trtllm_protocol.py), and how its answers are read: ``logprobs`` on a prompt
completion is a count where 0 is off, the thinking options are upstream's request fields, and a
chat answer whose ``reasoning_content`` is empty (no reasoning parser) still has its thought split
off the text."""

from __future__ import annotations

from typing import Any

import pytest
from trtllm_protocol import ChatCompletionRequest, CompletionRequest, check_request
from unillm_tensorrt_llm import TensorRTLLMAdapter

from unillm.adapter.base import EngineInfo, HttpCall
from unillm.adapter.launch_spec import LaunchSpec
from unillm.adapter.openai_compat import CHAT_PATH
from unillm.errors import UnsupportedFeature
from unillm.options import make_request

ADAPTER = TensorRTLLMAdapter()
INFO = EngineInfo(engine="tensorrt_llm", model="tiny", version="1.2.1")
CHAT = [{"role": "user", "content": "2+2?"}]


def built(prompt: str | None, messages: Any = None, **options: Any) -> Any:
    call = ADAPTER.build(make_request(prompt, messages, None, options, stream=False), INFO)
    return check_request(call.path, call.json)


def test_logprobs_on_a_prompt_completion_are_not_read_as_off() -> None:
    request = built("The sea", logprobs=True)
    assert isinstance(request, CompletionRequest)
    assert request.to_sampling_params().logprobs == 1


def test_top_logprobs_on_a_prompt_completion_are_the_count() -> None:
    request = built("The sea", logprobs=True, top_logprobs=3)
    assert request.to_sampling_params().logprobs == 3


def test_chat_logprobs_are_one_per_token_without_top_logprobs() -> None:
    request = built(None, CHAT, logprobs=True)
    assert isinstance(request, ChatCompletionRequest) and request.to_sampling_params().logprobs == 1


@pytest.mark.parametrize("on", [True, False])
def test_thinking_is_the_chat_templates_enable_thinking(on: bool) -> None:
    request = built(None, CHAT, thinking=on)
    assert request.chat_template_kwargs == {"enable_thinking": on}


def test_a_thinking_budget_is_the_thinking_token_budget() -> None:
    request = built(None, CHAT, thinking_budget=64)
    assert request.to_sampling_params().thinking_token_budget == 64


@pytest.mark.parametrize("effort", ["none", "low", "medium", "high"])
def test_reasoning_effort_is_upstreams_field(effort: str) -> None:
    assert built(None, CHAT, reasoning_effort=effort).reasoning_effort == effort


def test_an_effort_trtllm_serve_has_no_value_for_is_refused_before_sending() -> None:
    with pytest.raises(UnsupportedFeature, match="minimal") as e:
        built(None, CHAT, reasoning_effort="minimal")
    assert e.value.engine == "tensorrt_llm" and "low" in e.value.alternative


def test_a_chat_answer_with_empty_reasoning_content_has_its_thought_split() -> None:
    body = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": "tiny",
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": "<think>2 and 2</think>\n\n4",
                    "reasoning_content": "",
                    "tool_calls": [],
                },
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 3, "completion_tokens": 5, "total_tokens": 8},
    }
    request = make_request(None, CHAT, None, {}, stream=False)
    choice = ADAPTER.parse(body, request, INFO, HttpCall("POST", CHAT_PATH, {}, False)).choices[0]
    assert (choice.reasoning, choice.text) == ("2 and 2", "4")


def get_weather(city: str) -> str:
    """Get the weather."""
    return city


@pytest.mark.parametrize(
    ("output", "tools"),
    [({"type": "object"}, {}), (None, {"tools": [get_weather], "tool_choice": "get_weather"})],
    ids=["output", "forced call"],
)
def test_a_launched_server_refuses_a_constraint_after_a_thought(output: Any, tools: dict[str, Any]) -> None:
    # unillm launches trtllm-serve without a reasoning parser: its guide then binds from the
    # first token (upstream wraps it after the thought only with a parser), leaving no room to think
    launched = ADAPTER.bind(LaunchSpec(model="tiny"))
    request = make_request(None, CHAT, output, {"thinking": True, **tools}, stream=False)
    with pytest.raises(UnsupportedFeature, match="first token") as e:
        launched.build(request, INFO)
    assert e.value.engine == "tensorrt_llm"
    call = launched.build(make_request(None, CHAT, output, tools, stream=False), INFO)
    assert check_request(call.path, call.json).to_sampling_params().guided_decoding is not None
    connected = ADAPTER.build(request, INFO)  # a connected server's parser is unknown: sent
    sent = check_request(connected.path, connected.json)
    assert isinstance(sent, ChatCompletionRequest) and sent.chat_template_kwargs == {"enable_thinking": True}
