"""The Ollama adapter held to Ollama's own types: the bodies it builds, the answers it reads.

Every request body is validated against the transcription of ``api/types.go``
(``ollama_types.py``, extra fields forbidden: Go would drop them silently), and every fixture
in ``data/`` against the answer types, so neither side can drift from the contract unseen.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from ollama_fixtures import ERRORS, answer, lines
from ollama_types import check_answer, check_request
from unillm_ollama import OllamaAdapter
from unillm_ollama.launch import pull_progress

from unillm.adapter.base import EngineInfo
from unillm.capabilities import Feature
from unillm.embeddings import EmbedRequest
from unillm.errors import EngineInternalError, InvalidRequest, UnknownModel, UnsupportedFeature
from unillm.options import JsonSchema, make_request
from unillm.tools import to_tool_choice, to_tools

ADAPTER = OllamaAdapter()
INFO = EngineInfo(engine="ollama", model="llama3.2:1b", version="0.32.15")
CHAT = [{"role": "user", "content": "Hi"}]
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
OPTIONS: dict[str, Any] = {
    "max_tokens": 8,
    "temperature": 0.2,
    "top_p": 0.9,
    "top_k": 20,
    "min_p": 0.05,
    "seed": 7,
    "stop": ["\n"],
    "presence_penalty": 0.1,
    "frequency_penalty": 0.2,
    "repetition_penalty": 1.1,
}


def built(request: Any) -> tuple[str, Any]:
    """The path and body the adapter builds for ``request``, validated against Ollama's types."""
    call = ADAPTER.build(request, INFO)
    check_request(call.path, call.json)
    return call.path, call.json


def body(
    prompt: str | None = None,
    messages: Any = None,
    *,
    output: Any = None,
    stream: bool = False,
    **options: Any,
) -> Any:
    return built(make_request(prompt, messages, output, options, stream=stream))[1]


def test_every_sampling_option_goes_under_ollamas_name() -> None:
    sent = body("Hi", **OPTIONS)
    renamed = {"max_tokens": "num_predict", "repetition_penalty": "repeat_penalty"}  # the others keep theirs
    assert sent["options"] == {renamed.get(name, name): value for name, value in OPTIONS.items()}


def test_a_prompt_is_sent_raw_to_generate() -> None:
    sent = body("The sea")
    assert (sent["prompt"], sent["raw"], sent["stream"]) == ("The sea", True, False)


def test_chat_messages_go_to_chat_with_the_same_options() -> None:
    request = make_request(None, CHAT, None, OPTIONS, stream=True)
    path, sent = built(request)
    assert (path, sent["stream"], sent["messages"]) == ("/api/chat", True, CHAT)


def test_a_json_schema_is_the_format() -> None:
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}}
    assert body("Hi", output=JsonSchema(schema))["format"] == schema


def test_images_travel_as_base64_on_the_message() -> None:
    parts = [
        {"type": "text", "text": "What is it?"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0K"}},
    ]
    sent = body(None, [{"role": "user", "content": parts}])
    assert sent["messages"] == [{"role": "user", "content": "What is it?", "images": ["iVBORw0K"]}]


def test_an_image_by_url_is_refused_before_sending() -> None:
    parts = [{"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}}]
    with pytest.raises(UnsupportedFeature, match="inline"):
        body(None, [{"role": "user", "content": parts}])


def test_tools_and_earlier_calls_use_ollamas_object_arguments() -> None:
    history: list[Any] = [
        *CHAT,
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                }
            ],
        },
        {"role": "tool", "content": "sunny", "tool_call_id": "c1", "name": "get_weather"},
    ]
    tools = to_tools([WEATHER])
    request = make_request(None, history, None, {"tools": [WEATHER], "tool_choice": "auto"}, stream=False)
    _, sent = built(request)
    assert sent["messages"][1]["tool_calls"] == [
        {"id": "c1", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}
    ]
    assert sent["messages"][2]["tool_name"] == "get_weather"
    assert sent["tools"] == [t.to_openai() for t in tools]


def test_a_forced_call_is_sent_as_the_calls_schema() -> None:
    request = make_request(None, CHAT, None, {"tools": [WEATHER], "tool_choice": "get_weather"}, stream=False)
    _, sent = built(request)
    assert "tools" not in sent and sent["format"]["properties"] == {"city": {"type": "string"}}
    assert to_tool_choice("get_weather", to_tools([WEATHER])).forces_call


def test_logprobs_and_extra_body_reach_the_body() -> None:
    sent = body("Hi", logprobs=True, top_logprobs=2, extra_body={"think": "low", "keep_alive": "10m"})
    assert (sent["logprobs"], sent["top_logprobs"], sent["think"], sent["keep_alive"]) == (
        True,
        2,
        "low",
        "10m",
    )


def test_a_misspelt_extra_body_field_fails_the_contract() -> None:
    with pytest.raises(ValueError, match="keepalive"):
        body("Hi", extra_body={"keepalive": "10m"})


def test_the_embed_body_is_an_embed_request() -> None:
    call = ADAPTER.embed_call(EmbedRequest(texts=("a", "b"), dimensions=3), INFO)
    sent: Any = call.json
    check_request(call.path, sent)
    assert sent == {"model": "llama3.2:1b", "input": ["a", "b"], "dimensions": 3}


def test_n_above_one_is_declared_refused() -> None:
    support = ADAPTER.capabilities("0.32.15").support(Feature.N)
    assert support.level == "no" and support.alternative


def test_a_lora_is_sent_as_the_model_it_was_built_into() -> None:
    assert body("Hi", lora="sql")["model"] == "sql"


@pytest.mark.parametrize(
    "feature",
    [
        "output=Regex",
        "output=Choice",
        "output=Grammar (EBNF)",
        "loras.load/unload at runtime",
        "speculative ngram",
        "speculative draft model",
    ],
)
def test_what_ollama_cannot_do_is_declared_refused_with_a_reason(feature: str) -> None:
    support = next(s for f, s in ADAPTER.capabilities().features.items() if f.value == feature)
    assert support.level == "no" and "Ollama" in support.why and support.alternative


def test_logprobs_are_refused_before_the_version_that_has_them() -> None:
    caps = ADAPTER.capabilities("0.12.10")
    assert next(s for f, s in caps.features.items() if f.value == "logprobs").level == "no"


@pytest.mark.parametrize("name", ["generate", "chat_tool_call", "generate_logprobs"])
def test_the_fixture_answers_are_ollamas_types(name: str) -> None:
    path = "/api/generate" if name.startswith("generate") else "/api/chat"
    check_answer(path, answer(name))


def test_the_fixture_streams_are_ollamas_types() -> None:
    for line in lines("chat_stream"):
        check_answer("/api/chat", json.loads(line))
    for line in lines("pull"):
        check_answer("/api/pull", json.loads(line))
    check_answer("/api/embed", answer("embed"))
    for raw in ERRORS.values():
        check_answer("/api/chat", json.loads(raw))


def test_a_tool_call_answer_becomes_a_call_with_json_arguments() -> None:
    request = make_request(None, CHAT, None, {"tools": [WEATHER], "tool_choice": "auto"}, stream=False)
    completion = ADAPTER.parse(answer("chat_tool_call"), request, INFO)
    call = completion.choices[0].tool_calls[0]
    assert (call.name, json.loads(call.arguments), completion.choices[0].finish_reason) == (
        "get_weather",
        {"city": "Paris"},
        "tool_calls",
    )


def test_logprobs_are_read_with_their_alternatives() -> None:
    request = make_request("The sea", None, None, {"logprobs": True, "top_logprobs": 2}, stream=False)
    logprobs = ADAPTER.parse(answer("generate_logprobs"), request, INFO).choices[0].logprobs
    assert logprobs is not None and [t.token for t in logprobs[0].top] == [" is", " was"]


def test_usage_comes_from_the_eval_counts() -> None:
    usage = ADAPTER.parse(answer("generate"), make_request("x", None, None, {}, stream=False), INFO).usage
    assert (usage.prompt_tokens, usage.completion_tokens) == (3, 2)


def test_an_error_line_in_a_stream_is_a_typed_error() -> None:
    request = make_request(None, CHAT, None, {}, stream=True)
    decoder = ADAPTER.decoder(request, INFO)
    decoder.feed(lines("chat_stream")[0])
    with pytest.raises(EngineInternalError, match="runner process"):
        decoder.feed('{"error": "llama runner process has terminated"}')


def test_a_404_naming_the_model_is_unknown_model() -> None:
    assert isinstance(ADAPTER.parse_error(404, ERRORS[404], None, INFO), UnknownModel)


def test_a_server_without_models_says_how_to_get_one() -> None:
    with pytest.raises(UnknownModel, match="ollama pull"):
        ADAPTER.parse_info({"version": {"version": "0.32.15"}, "tags": {"models": []}}, None)


def test_pull_progress_reads_percent_and_refuses_an_error_line() -> None:
    assert pull_progress(json.loads(lines("pull")[1])) == "pulling dde5aa3fc5ff 0% of 2019 MB"
    with pytest.raises(EngineInternalError, match="pull failed: denied"):
        pull_progress({"error": "denied"})


def test_tool_arguments_that_are_not_json_are_refused() -> None:
    history = [
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": "{oops"}}],
        }
    ]
    with pytest.raises(InvalidRequest, match="not JSON"):
        body(None, history)


def test_more_than_twenty_top_logprobs_are_refused_before_sending() -> None:
    with pytest.raises(UnsupportedFeature, match="top_logprobs=25") as e:
        body("Hi", logprobs=True, top_logprobs=25)
    assert e.value.engine == "ollama" and "20" in e.value.alternative


def test_twenty_top_logprobs_pass_the_contract() -> None:
    assert body("Hi", logprobs=True, top_logprobs=20)["top_logprobs"] == 20
