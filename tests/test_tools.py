"""Tools, tool calls and message content: normalized once, validated, mapped to the OpenAI wire
shape and back (pure: nothing is sent)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, Literal

import pytest
from fake_adapter import FakeAdapter
from pydantic import BaseModel, Field

import unillm
from unillm.adapter.base import EngineInfo
from unillm.adapter.openai_compat import OpenAIStreamDecoder
from unillm.capabilities import Feature, features_of
from unillm.content import Image, has_images
from unillm.errors import InvalidOptions, UnsupportedFeature
from unillm.launching.model_facts import detect_tool_parser, takes_images
from unillm.options import Request, make_request
from unillm.results import ToolCallDelta
from unillm.tools import (
    ForcedCallStream,
    Tool,
    ToolCallAccumulator,
    ToolChoice,
    calls_from_forced_text,
    forced_call_schema,
    to_tool_choice,
    to_tools,
    validate_call,
)

ASK = [{"role": "user", "content": "weather?"}]
INFO = EngineInfo(engine="fake", model="m", version="0.32.0")
PNG = bytes.fromhex("89504e470d0a1a0a") + b"\x00" * 8


class GetWeather(BaseModel):
    """Current weather in a city."""

    city: Literal["Paris", "Rome"]


def add(a: int, b: int = 2) -> int:
    """Add two numbers.

    Longer text that is not part of the description.
    """
    return a + b


ADD_DEF = {
    "type": "function",
    "function": {
        "name": "add2",
        "description": "Add.",
        "parameters": {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
    },
}


def chat(**options: Any) -> Request:
    return make_request(None, ASK, None, options, stream=bool(options.pop("stream", False)))


# -- tools --------------------------------------------------------------------------------------
def test_a_pydantic_class_becomes_a_tool_named_for_it_with_its_docstring() -> None:
    tool = Tool.from_spec(GetWeather)
    assert tool.name == "GetWeather" and tool.description == "Current weather in a city."
    assert tool.parameters["properties"]["city"]["enum"] == ["Paris", "Rome"]
    assert "title" not in tool.parameters and tool.returns_model


def test_a_typed_function_becomes_a_tool_from_its_signature_and_first_doc_paragraph() -> None:
    tool = Tool.from_spec(add)
    assert (tool.name, tool.description) == ("add", "Add two numbers.")
    assert tool.parameters["required"] == ["a"]
    assert tool.parameters["properties"]["b"]["default"] == 2
    assert tool.to_openai()["function"]["parameters"]["properties"]["a"]["type"] == "integer"


def test_a_parameters_annotated_field_constraints_reach_the_schema_and_the_check() -> None:
    def look_up(
        city: Annotated[str, Field(max_length=24, description="The city's English name")],
        days: Annotated[int, Field(ge=1, le=7)] = 1,
    ) -> str:
        """Look up a forecast."""
        return city

    tool = Tool.from_spec(look_up)
    city, days = tool.parameters["properties"]["city"], tool.parameters["properties"]["days"]
    assert (city["maxLength"], city["description"]) == (24, "The city's English name")
    assert (days["minimum"], days["maximum"]) == (1, 7)
    assert validate_call("c1", "look_up", '{"city": "Oslo", "days": 3}', [tool]).valid
    assert not validate_call("c2", "look_up", '{"city": "' + "x" * 25 + '"}', [tool]).valid
    assert not validate_call("c3", "look_up", '{"city": "Oslo", "days": 8}', [tool]).valid


@pytest.mark.parametrize("spec", [ADD_DEF, ADD_DEF["function"]])
def test_openai_and_bare_json_definitions_are_accepted(spec: Any) -> None:
    tool = Tool.from_spec(spec)
    assert tool.name == "add2" and tool.description == "Add." and tool.model is None
    assert tool.to_openai() == ADD_DEF


@pytest.mark.parametrize(
    ("spec", "match"),
    [
        (lambda x: x, "type hint"),
        ({"name": "bad name!"}, "letters"),
        ({"type": "function", "function": {"description": "no name"}}, "needs"),
        ({"name": "t", "parameters": {"type": 5}}, "not a valid JSON schema"),
        (42, "pydantic model classes"),
    ],
)
def test_malformed_tools_are_refused_with_what_to_do(spec: Any, match: str) -> None:
    with pytest.raises(InvalidOptions, match=match):
        to_tools([spec])


def test_tool_names_must_be_unique() -> None:
    with pytest.raises(InvalidOptions, match="unique"):
        to_tools([ADD_DEF, ADD_DEF["function"]])


@pytest.mark.parametrize(
    ("choice", "want"),
    [
        (None, ToolChoice("auto")),
        ("required", ToolChoice("required")),
        ("none", ToolChoice("none")),
        ("add", ToolChoice("named", "add")),
        (add, ToolChoice("named", "add")),
        ({"type": "function", "function": {"name": "GetWeather"}}, ToolChoice("named", "GetWeather")),
        (GetWeather, ToolChoice("named", "GetWeather")),
    ],
)
def test_tool_choice_forms(choice: Any, want: ToolChoice) -> None:
    assert to_tool_choice(choice, to_tools([add, GetWeather])) == want


def test_a_tool_choice_naming_no_offered_tool_is_refused() -> None:
    with pytest.raises(InvalidOptions, match="not 'auto'"):
        chat(tools=[add], tool_choice="multiply")


def test_tools_need_chat_messages_and_do_not_combine_with_output() -> None:
    with pytest.raises(InvalidOptions, match="chat messages"):
        make_request("Hi", None, None, {"tools": [add]}, stream=False)
    with pytest.raises(InvalidOptions, match="cannot be combined"):
        make_request(None, ASK, GetWeather, {"tools": [add], "tool_choice": "required"}, stream=False)
    with pytest.raises(InvalidOptions, match="needs tools"):
        chat(tool_choice="required")


# -- calls ----------------------------------------------------------------------------------------
def test_calls_are_validated_against_the_tool_schema() -> None:
    tools = to_tools([GetWeather, add, ADD_DEF])
    weather = validate_call("c1", "GetWeather", '{"city": "Rome"}', tools)
    assert isinstance(weather.parsed, GetWeather) and weather.parsed.city == "Rome" and weather.valid
    added = validate_call("c2", "add", '{"a": "3"}', tools)
    assert added.parsed == {"a": 3, "b": 2} and add(**added.parsed) == 5
    assert validate_call("c3", "add2", '{"a": 1}', tools).parsed == {"a": 1}


@pytest.mark.parametrize(
    ("name", "arguments", "why"),
    [
        ("GetWeather", '{"city": "Lima"}', "city"),
        ("GetWeather", '{"city": "Ro', "not valid JSON"),
        ("add2", '{"a": "x"}', "not of type 'integer'"),
        ("nope", "{}", "not one of the tools"),
    ],
)
def test_invalid_arguments_are_marked_not_raised(name: str, arguments: str, why: str) -> None:
    call = validate_call("c", name, arguments, to_tools([GetWeather, ADD_DEF]))
    assert not call.valid and call.parsed is None and why in (call.error or "")
    assert call.arguments == arguments


# -- forcing a call with a JSON-schema constraint -----------------------------------------------
def test_a_named_choice_is_forced_with_the_tool_arguments_schema() -> None:
    tools = to_tools([GetWeather, add])
    assert forced_call_schema(tools, ToolChoice("named", "add")) == Tool.from_spec(add).parameters
    schema = forced_call_schema(tools, ToolChoice("required"))
    assert [v["properties"]["name"]["const"] for v in schema["anyOf"]] == ["GetWeather", "add"]


REQUIRED_TEXT = '{"name": "GetWeather", "arguments": {"city": "Paris"}}'


def test_a_forced_answer_becomes_the_call_it_spells() -> None:
    tools = to_tools([GetWeather, add])
    (call,) = calls_from_forced_text(REQUIRED_TEXT, ToolChoice("required"), tools)
    assert call.name == "GetWeather" and call.arguments == '{"city": "Paris"}'
    (named,) = calls_from_forced_text('{"a": 1}', ToolChoice("named", "add"), tools)
    assert named.parsed == {"a": 1, "b": 2}
    (cut,) = calls_from_forced_text('{"na', ToolChoice("required"), tools)
    assert not cut.valid


@pytest.mark.parametrize("size", [1, 2, 3, 7, 100])
def test_a_streamed_forced_answer_gives_the_same_call_in_any_chunking(size: int) -> None:
    text = '{"name":"add","arguments":{"a":{"x":1}}}'
    stream, acc = ForcedCallStream(ToolChoice("required")), ToolCallAccumulator()
    for i in range(0, len(text), size):
        acc.add(stream.feed(text[i : i + size]))
    acc.add(stream.finish())
    (call,) = acc.calls()
    assert (call.name, call.arguments) == ("add", '{"a":{"x":1}}')


# -- the OpenAI mapping (vLLM's forced calls: adapters/vllm/tests/test_vllm_tools.py) -------------
def test_engine_tool_calls_are_parsed_and_validated() -> None:
    body = {
        "choices": [
            {
                "index": 0,
                "finish_reason": "stop",
                "message": {
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "x1",
                            "type": "function",
                            "function": {"name": "GetWeather", "arguments": '{"city": "Rome"}'},
                        }
                    ],
                },
            }
        ],
        "usage": {},
    }
    r = FakeAdapter().parse(body, chat(tools=[GetWeather], tool_choice="required"), INFO)
    assert r.text == "" and r.finish_reason == "tool_calls"
    assert r.tool_calls[0].id == "x1" and r.tool_calls[0].parsed == GetWeather(city="Rome")
    assert r.message() == {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "x1",
                "type": "function",
                "function": {"name": "GetWeather", "arguments": '{"city": "Rome"}'},
            }
        ],
    }


def _chunk(delta: dict[str, Any], finish: str | None = None) -> str:
    return json.dumps({"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})


def test_streamed_engine_tool_calls_take_one_normalized_shape() -> None:
    decoder = OpenAIStreamDecoder("vllm")
    events = [
        _chunk({"role": "assistant", "content": ""}),
        _chunk(
            {
                "tool_calls": [
                    {
                        "index": 0,
                        "id": "a",
                        "type": "function",
                        "function": {"name": "f", "arguments": '{"x":'},
                    }
                ]
            }
        ),
        _chunk({"tool_calls": [{"index": 0, "id": "a", "function": {"name": "f", "arguments": "1}"}}]}),
        _chunk({"tool_calls": [{"index": 1, "function": {"name": "g", "arguments": "{}"}}]}),
        _chunk({}, "stop"),
    ]
    deltas = [d for e in events for d in decoder.feed(e)]
    pieces = [c for d in deltas for c in d.tool_calls or ()]
    assert pieces[0] == ToolCallDelta(index=0, id="a", name="f", arguments='{"x":')
    assert pieces[1] == ToolCallDelta(index=0, arguments="1}")
    assert pieces[2].index == 1 and pieces[2].name == "g" and pieces[2].id
    assert deltas[-1].finish_reason == "tool_calls"
    acc = ToolCallAccumulator()
    for d in deltas:
        acc.add(d.tool_calls)
    assert [(c.name, c.arguments) for c in acc.calls()] == [("f", '{"x":1}'), ("g", "{}")]


def test_capabilities_see_tools_and_images() -> None:
    request = make_request(
        None,
        [{"role": "user", "content": ["Look", Image(PNG)]}],
        None,
        {"tools": [add], "tool_choice": "required"},
        stream=False,
    )
    assert {Feature.TOOLS, Feature.TOOL_CHOICE_REQUIRED, Feature.IMAGES} <= set(features_of(request))
    assert Feature.TOOLS not in features_of(chat(tools=[add], tool_choice="none"))


# -- messages and images --------------------------------------------------------------------------
def test_image_sources_become_openai_image_url_parts(tmp_path: Path) -> None:
    from PIL import Image as PILImage

    path = tmp_path / "dot.png"
    PILImage.new("RGB", (2, 2)).save(path)
    messages = [
        {
            "role": "user",
            "content": [
                "Compare",
                Image(path),
                Image(PNG),
                PILImage.new("RGB", (1, 1)),
                Image("https://x/cat.jpg"),
                {"type": "image_url", "image_url": {"url": "https://x/dog.jpg", "detail": "low"}},
            ],
        }
    ]
    (m,) = make_request(None, messages, None, {}, stream=False).messages or ()
    urls = [p["image_url"]["url"] for p in m["content"][1:]]
    assert m["content"][0] == {"type": "text", "text": "Compare"}
    assert all(u.startswith("data:image/png;base64,") for u in urls[:3])
    assert urls[3:] == ["https://x/cat.jpg", "https://x/dog.jpg"]
    assert m["content"][5]["image_url"]["detail"] == "low" and has_images([m])


def test_openai_style_text_parts_become_one_string() -> None:
    parts = [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}, "c"]
    (m,) = make_request(None, [{"role": "user", "content": parts}], None, {}, stream=False).messages or ()
    assert m == {"role": "user", "content": "a\nb\nc"}


@pytest.mark.parametrize(
    ("messages", "match"),
    [
        ([{"role": "tool", "content": "18 C"}], "tool_call_id"),
        ([{"role": "user", "content": [{"type": "audio"}]}], "unknown content part"),
        ([{"role": "user", "content": [Image(PNG)], "tool_calls": [{}]}], "only assistant"),
        ([{"role": "assistant", "content": None, "tool_calls": [{"function": {"name": "f"}}]}], "'id'"),
    ],
)
def test_malformed_messages_are_refused(messages: Any, match: str) -> None:
    with pytest.raises(InvalidOptions, match=match):
        make_request(None, messages, None, {}, stream=False)


def test_image_sources_that_cannot_be_read_are_refused(tmp_path: Path) -> None:
    with pytest.raises(InvalidOptions, match="cannot read"):
        Image(tmp_path / "missing.png")
    with pytest.raises(InvalidOptions, match="not PNG"):
        Image(b"plain text")


def test_a_conversation_with_tool_calls_and_results_goes_out_in_openai_shape() -> None:
    tools = to_tools([add])
    call = validate_call("c9", "add", '{"a": 1}', tools)
    messages: list[dict[str, Any]] = [
        *ASK,
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c9", "content": "3"},
    ]
    body = FakeAdapter().build(make_request(None, messages, None, {}, stream=False), INFO).json or {}
    assert body["messages"][1] == {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "c9", "type": "function", "function": {"name": "add", "arguments": '{"a": 1}'}}
        ],
    }
    assert body["messages"][2] == {"role": "tool", "tool_call_id": "c9", "content": "3"}


# -- model facts --------------------------------------------------------------------------------
def test_tool_parser_and_vision_are_detected_from_the_model_folder(tmp_path: Path) -> None:
    (tmp_path / "tokenizer_config.json").write_text(
        json.dumps({"chat_template": "{% if tools %}<tool_call>{{ x }}</tool_call>{% endif %}"})
    )
    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"]}))
    assert detect_tool_parser(tmp_path) == "hermes" and takes_images(tmp_path) is False
    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["X"], "vision_config": {}}))
    assert takes_images(tmp_path) is True
    (tmp_path / "config.json").write_text(
        json.dumps({"architectures": ["Phi3VForCausalLM"], "img_processor": {}})
    )
    assert takes_images(tmp_path) is True
    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["SomethingNew"]}))
    assert takes_images(tmp_path) is None
    assert detect_tool_parser(tmp_path / "absent") is None and takes_images("org/remote-id") is None


def test_a_launched_text_only_model_refuses_images_before_sending(tmp_path: Path) -> None:
    from unillm.capabilities import check_text_only

    request = make_request(None, [{"role": "user", "content": ["Look", Image(PNG)]}], None, {}, stream=False)
    with pytest.raises(UnsupportedFeature, match="text-only"):
        check_text_only("vllm", INFO, request)
    assert unillm.Image is Image


def test_launch_detects_the_tool_parser_of_a_local_model_unless_told(tmp_path: Path) -> None:
    (tmp_path / "tokenizer_config.json").write_text(
        json.dumps({"chat_template": "{% for t in tools %}{{ t }}{% endfor %}<tool_call>"})
    )
    detected = unillm.launch("vllm", model=str(tmp_path), python="python", progress=None).command().argv
    assert detected[detected.index("--tool-call-parser") + 1] == "hermes"
    off = unillm.launch("vllm", model=str(tmp_path), python="python", tool_parser="none", progress=None)
    assert "--tool-call-parser" not in off.command().argv
    sglang = unillm.launch("sglang", model=str(tmp_path), python="python", progress=None).command().argv
    assert sglang[sglang.index("--tool-call-parser") + 1] == "qwen25"
