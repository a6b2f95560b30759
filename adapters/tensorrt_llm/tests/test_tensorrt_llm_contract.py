"""The TensorRT-LLM adapter held to trtllm-serve's own protocol models (transcribed in
trtllm_protocol.py, ``extra="forbid"`` as upstream): every body it builds validates, guided
decoding and LoRA fields have the protocol's shapes, and the fixtures are the protocol's answers."""

from __future__ import annotations

import json
from typing import Any

import pytest
from trtllm_fixtures import ERRORS, answer, stream
from trtllm_protocol import (
    ChatCompletionRequest,
    ChatCompletionStreamResponse,
    CompletionRequest,
    CompletionResponse,
    ErrorResponse,
    IterationStats,
    check_request,
)
from unillm_tensorrt_llm import TensorRTLLMAdapter

from unillm.adapter.base import EngineInfo
from unillm.adapter.launch_spec import LaunchSpec
from unillm.errors import UnknownLora, UnsupportedFeature
from unillm.options import Choice, Grammar, JsonSchema, Regex, make_request
from unillm.testing.conformance import sse_payloads

ADAPTER = TensorRTLLMAdapter(loras={"sql": "/adapters/sql", "poem": "/adapters/poem"})
INFO = EngineInfo(engine="tensorrt_llm", model="tiny", version="1.2.1")
CHAT = [{"role": "user", "content": "Hi"}]
OPTIONS: dict[str, Any] = {
    "max_tokens": 8,
    "temperature": 0.5,
    "top_p": 0.9,
    "top_k": 20,
    "min_p": 0.05,
    "repetition_penalty": 1.1,
    "presence_penalty": 0.1,
    "frequency_penalty": 0.2,
    "seed": 3,
    "stop": ["\n"],
    "n": 2,
}
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}


def built(
    prompt: str | None, messages: Any = None, *, output: Any = None, stream: bool = False, **options: Any
) -> Any:
    call = ADAPTER.build(make_request(prompt, messages, output, options, stream=stream), INFO)
    return check_request(call.path, call.json)


def test_a_completion_body_with_every_option_is_a_completion_request() -> None:
    request = built("Hi", stream=True, **OPTIONS)
    assert isinstance(request, CompletionRequest)
    assert (request.top_k, request.min_p, request.repetition_penalty, request.n) == (20, 0.05, 1.1, 2)
    assert request.stream_options is not None and request.stream_options.include_usage


def test_a_chat_body_with_every_option_is_a_chat_completion_request() -> None:
    request = built(None, CHAT, **OPTIONS)
    assert isinstance(request, ChatCompletionRequest) and request.max_completion_tokens == 8


@pytest.mark.parametrize(
    ("output", "expected"),
    [
        (
            JsonSchema({"type": "object"}, name="out"),
            {"type": "json_schema", "json_schema": {"name": "out", "schema": {"type": "object"}}},
        ),
        (Regex(r"\d{4}"), {"type": "regex", "regex": r"\d{4}"}),
        (Choice(("yes", "no?")), {"type": "regex", "regex": r"yes|no\?"}),
        (Grammar('root ::= "a"'), {"type": "ebnf", "ebnf": 'root ::= "a"'}),
    ],
    ids=["json_schema", "regex", "choice", "ebnf"],
)
def test_constraints_are_the_protocols_response_format(output: Any, expected: dict[str, Any]) -> None:
    request = built("Hi", output=output)
    assert request.response_format is not None
    assert request.response_format.model_dump(by_alias=True, exclude_none=True) == expected


def test_a_schema_xgrammar_cannot_honour_is_refused_when_the_backend_is_known() -> None:
    launched = TensorRTLLMAdapter().bind(LaunchSpec(model="/models/tiny"))
    schema = {"type": "string", "pattern": "(?=a)a"}  # a lookahead: xgrammar has none
    with pytest.raises(UnsupportedFeature, match="xgrammar"):
        launched.build(make_request("Hi", None, JsonSchema(schema), {}, stream=False), INFO)


def test_a_connected_server_of_unknown_backend_gets_the_schema_as_given() -> None:
    schema = {"type": "string", "pattern": "(?=a)a"}
    request = built("Hi", output=JsonSchema(schema))
    assert request.response_format.json_schema == {"name": "output", "schema": schema}


def test_a_lora_is_a_lora_request_with_its_path_and_a_stable_id() -> None:
    request = built(None, CHAT, lora="sql")
    assert request.lora_request is not None
    assert request.lora_request.model_dump() == {
        "lora_name": "sql",
        "lora_int_id": 2,
        "lora_path": "/adapters/sql",
    }
    assert isinstance(request, ChatCompletionRequest) and request.model == "tiny"


def test_a_lora_without_a_known_path_is_refused_before_sending() -> None:
    with pytest.raises(UnknownLora, match="no known path"):
        TensorRTLLMAdapter().build(make_request("Hi", None, None, {"lora": "sql"}, stream=False), INFO)


def test_a_forced_tool_call_is_the_calls_schema() -> None:
    request = built(None, CHAT, tools=[WEATHER], tool_choice="get_weather")
    assert isinstance(request, ChatCompletionRequest) and request.tool_choice == "none"
    assert request.response_format is not None and request.response_format.type == "json_schema"


def test_logprobs_validate_on_both_routes() -> None:
    assert built("Hi", logprobs=True, top_logprobs=1).logprobs == 1
    chat = built(None, CHAT, logprobs=True, top_logprobs=2)
    assert isinstance(chat, ChatCompletionRequest) and (chat.logprobs, chat.top_logprobs) == (True, 2)


def test_a_field_trtllm_serve_does_not_know_fails_the_contract() -> None:
    with pytest.raises(ValueError, match="guided_json"):
        built("Hi", extra_body={"guided_json": {}})


def test_the_fixtures_are_the_protocols_answers() -> None:
    CompletionResponse.model_validate(answer("completion"))
    for data in sse_payloads(stream("chat_stream"))[:-1]:
        ChatCompletionStreamResponse.model_validate_json(data)
    for body in ERRORS.values():
        ErrorResponse.model_validate_json(body)
    for stats in answer("metrics"):
        IterationStats.model_validate(stats)


def test_lark_grammars_and_runtime_loras_are_declared_refused() -> None:
    features = {f.value: s for f, s in ADAPTER.capabilities().features.items()}
    for name in ("output=Grammar (Lark)", "loras.load/unload at runtime", "embed()"):
        assert features[name].level == "no" and features[name].alternative, name


def test_metrics_json_maps_onto_the_schema() -> None:
    metrics = ADAPTER.metric_samples(json.dumps(answer("metrics")))
    assert metrics is not None
    values = {s.name: s.value for s in metrics}
    assert (values["trtllm_numActiveRequests"], values["trtllm_numQueuedRequests"]) == (1, 3)
    assert values["trtllm_kvCacheStats_usage"] == 0.25  # the newest iteration: 25 of 100 blocks
    assert values["trtllm_specDecodingStats_acceptanceLength"] == 3.75


def test_metrics_read_after_the_queue_was_drained_are_empty() -> None:
    assert ADAPTER.metric_samples("[]") == []
