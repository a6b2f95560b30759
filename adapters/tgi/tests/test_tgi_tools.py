"""TGI's grammar-based tools and image parts, held to TGI's published OpenAPI contract: every body
the adapter builds validates against ``ChatRequest``, and answer fixtures (whole and streamed)
validate against TGI's answer schemas before unillm parses them."""

from __future__ import annotations

import json
from typing import Any, Literal

import pytest
from pydantic import BaseModel
from tgi_fakes import tgi_info
from tgi_openapi import Contract
from unillm_tgi import TGIAdapter

from unillm.capabilities import check
from unillm.content import Image
from unillm.errors import UnsupportedFeature
from unillm.options import make_request
from unillm.tools import ToolCallAccumulator

ADAPTER = TGIAdapter(runtime="launcher", cache_dir="/cache")
INFO = tgi_info()
ASK = [{"role": "user", "content": "Weather in Rome?"}]
PNG = bytes.fromhex("89504e470d0a1a0a") + b"\x00" * 8


class Place(BaseModel):
    city: Literal["Paris", "Rome"]


class GetWeather(BaseModel):
    """Current weather somewhere (a nested model: its $ref is inlined for TGI)."""

    place: Place
    unit: Literal["C", "F"] = "C"


def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


CALL = {
    "id": "0",
    "type": "function",
    "function": {"name": "GetWeather", "arguments": '{"place": {"city": "Rome"}}'},
}
CONVERSATION: list[dict[str, Any]] = [
    *ASK,
    {"role": "assistant", "content": None, "tool_calls": [CALL]},
    {"role": "tool", "tool_call_id": "0", "content": "18 C"},
]


@pytest.mark.parametrize("choice", ["auto", "required", "none", "GetWeather", add])
@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("messages", [ASK, CONVERSATION], ids=["ask", "conversation"])
def test_every_tool_request_validates_against_chat_request(
    contract: Contract,
    choice: Any,
    stream: bool,
    messages: Any,
) -> None:
    request = make_request(
        None,
        messages,
        None,
        {"tools": [GetWeather, add], "tool_choice": choice, "max_tokens": 32},
        stream=stream,
    )
    check(ADAPTER.capabilities(INFO.version), request)
    call = ADAPTER.build(request, INFO)
    assert call.path == "/v1/chat/completions"
    contract.check_request(call.path, call.json)
    body = dict(call.json or {})
    if choice == "none":
        assert "tools" not in body
    else:
        weather = body["tools"][0]["function"]
        assert weather["name"] == "GetWeather" and "$ref" not in json.dumps(weather["arguments"])
        assert weather["arguments"]["properties"]["place"]["properties"]["city"]["enum"] == ["Paris", "Rome"]


def test_a_conversation_sends_the_call_without_content_and_the_result_with_its_id(contract: Contract) -> None:
    body = ADAPTER.build(make_request(None, CONVERSATION, None, {}, stream=False), INFO).json or {}
    assistant, result = body["messages"][1], body["messages"][2]
    assert "content" not in assistant
    assert assistant["tool_calls"][0]["function"]["arguments"] == {"place": {"city": "Rome"}}
    assert result == {"role": "tool", "tool_call_id": "0", "content": "18 C"}
    contract.check_request("/v1/chat/completions", body)


def test_image_parts_validate_as_message_chunks(contract: Contract) -> None:
    messages = [{"role": "user", "content": ["What is this?", Image(PNG), Image("https://x/cat.jpg")]}]
    body = ADAPTER.build(make_request(None, messages, None, {}, stream=False), INFO).json or {}
    contract.check_request("/v1/chat/completions", body)
    assert [p["type"] for p in body["messages"][0]["content"]] == ["text", "image_url", "image_url"]


def test_required_is_refused_on_tgi_before_3() -> None:
    request = make_request(None, ASK, None, {"tools": [add], "tool_choice": "required"}, stream=False)
    with pytest.raises(UnsupportedFeature, match=r"TGI >= 3\.0\.0"):
        check(ADAPTER.capabilities("2.4.1"), request)


CHAT_CALL_ANSWER: dict[str, Any] = {
    "id": "",
    "object": "chat.completion",
    "created": 1,
    "model": "tiny",
    "system_fingerprint": "3.3.6",
    "choices": [
        {
            "index": 0,
            "finish_reason": "stop",
            "logprobs": None,
            "message": {
                "role": "assistant",
                "tool_calls": [
                    {
                        "id": "0",
                        "type": "function",
                        "function": {
                            "name": "GetWeather",
                            "arguments": '{"place":{"city":"Rome"},"unit":"C"}',
                        },
                    }
                ],
            },
        }
    ],
    "usage": {"prompt_tokens": 20, "completion_tokens": 12, "total_tokens": 32},
}


def _chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {
        "id": "",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "tiny",
        "system_fingerprint": "3.3.6",
        "usage": None,
        "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
    }


def _tool_delta(arguments: str, name: str | None = None) -> dict[str, Any]:
    function: dict[str, Any] = {"arguments": arguments}
    if name:
        function["name"] = name
    return {
        "role": "assistant",
        "tool_calls": [{"index": 0, "id": "0", "type": "function", "function": function}],
    }


CHAT_CALL_CHUNKS = [
    _chunk(_tool_delta("", "GetWeather")),
    _chunk(_tool_delta('{"place":{"city":')),
    _chunk(_tool_delta('"Rome"},"unit":"C"}')),
    _chunk(_tool_delta(""), "eos_token"),
]


def test_tool_call_answers_parse_into_validated_calls(contract: Contract) -> None:
    contract.check_response("/v1/chat/completions", 200, "application/json", CHAT_CALL_ANSWER)
    request = make_request(None, ASK, None, {"tools": [GetWeather], "tool_choice": "required"}, stream=False)
    r = ADAPTER.parse(CHAT_CALL_ANSWER, request, INFO)
    (call,) = r.tool_calls
    assert call.parsed == GetWeather(place=Place(city="Rome"), unit="C")
    assert r.text == "" and r.finish_reason == "tool_calls"


def test_streamed_tool_calls_join_to_the_whole_answer(contract: Contract) -> None:
    request = make_request(None, ASK, None, {"tools": [GetWeather], "tool_choice": "required"}, stream=True)
    decoder = ADAPTER.decoder(request, INFO)
    deltas = []
    for chunk in CHAT_CALL_CHUNKS:
        contract.check_response("/v1/chat/completions", 200, "text/event-stream", chunk)
        deltas += decoder.feed(json.dumps(chunk))
    pieces = [p for d in deltas for p in d.tool_calls or ()]
    assert pieces[0].name == "GetWeather" and all(p.name is None and p.id is None for p in pieces[1:])
    acc = ToolCallAccumulator(request.tools or ())
    for d in deltas:
        acc.add(d.tool_calls)
    whole = ADAPTER.parse(CHAT_CALL_ANSWER, request, INFO)
    assert [(c.name, c.arguments, c.parsed) for c in acc.calls()] == [
        (c.name, c.arguments, c.parsed) for c in whole.tool_calls
    ]
    assert deltas[-1].finish_reason == "tool_calls"
