"""The TGI adapter held to TGI's published OpenAPI contract (tests/data/tgi_openapi.json).

Every body the adapter builds, for a broad matrix of unified requests (every option alone and
combined, with and without constraints, streamed or not, prompt and chat), validates against
the request schema of the path it is sent to. Answer fixtures are validated against the
answer schema of their path and status first, then parsed. Validation is jsonschema's, with
the document's own ``#/components/schemas`` references (see tgi_openapi.py); no hand checks.
"""

from __future__ import annotations

import json
from typing import Any, Literal, NamedTuple

import pytest
from pydantic import BaseModel
from tgi_fakes import tgi_info
from tgi_openapi import Contract
from unillm_tgi import TGIAdapter, TGIInfo

from unillm.capabilities import check
from unillm.errors import EngineInternalError, InvalidRequest, Overloaded
from unillm.options import Choice, JsonSchema, Regex, Request, make_request
from unillm.results import Usage

ADAPTER = TGIAdapter(runtime="launcher", cache_dir="/cache")
INFO = tgi_info(max_best_of=4, max_stop_sequences=4, max_client_batch_size=4)
CHAT = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]


class Inner(BaseModel):
    x: int
    tag: Literal["a", "b"]


class Answer(BaseModel):
    """Nested models: pydantic emits definitions and references, which the adapter inlines."""

    inner: Inner
    items: list[Inner]
    note: str | None = None


OUTPUTS: list[tuple[str, Any]] = [
    ("pydantic-with-refs", Answer),
    (
        "json-dict",
        {"type": "object", "properties": {"n": {"type": "integer", "minimum": 0}}, "required": ["n"]},
    ),
    ("regex", Regex(r"\d{4}-\d{2}-\d{2}")),
    ("choice", Choice(["yes", "no", "maybe (later)", "a|b", "1.5*"])),
]

# every unified option alone (values at the edges included)
PROMPT_OPTIONS: list[tuple[str, dict[str, Any]]] = [
    ("none", {}),
    ("max_tokens", {"max_tokens": 16}),
    ("temperature", {"temperature": 0.7}),
    ("temperature=0 (greedy)", {"temperature": 0}),
    ("temperature=1", {"temperature": 1.0}),
    ("temperature=2", {"temperature": 2}),
    ("top_p", {"top_p": 0.9}),
    ("top_p=1 (no filtering)", {"top_p": 1.0}),
    ("top_k", {"top_k": 40}),
    ("top_k=0 (no filtering)", {"top_k": 0}),
    ("top_k=-1 (no filtering)", {"top_k": -1}),
    ("stop", {"stop": "\n"}),
    ("four stops", {"stop": ["a", "b", "END", "###"]}),
    ("seed", {"seed": 7}),
    ("seed=0", {"seed": 0}),
    ("frequency_penalty", {"frequency_penalty": 0.5}),
    ("frequency_penalty=-2", {"frequency_penalty": -2.0}),
    ("frequency_penalty=2", {"frequency_penalty": 2.0}),
    ("repetition_penalty", {"repetition_penalty": 1.1}),
    ("logprobs", {"logprobs": True}),
    ("logprobs=False", {"logprobs": False}),
    ("top_logprobs", {"top_logprobs": 3}),
    ("top_logprobs=0", {"top_logprobs": 0}),
    ("n", {"n": 3}),
    ("n=1", {"n": 1}),
    ("lora", {"lora": "sql"}),
    ("timeout (client-side)", {"timeout": 5.0}),
    ("session (a fleet routing key, never sent)", {"session": "user-42"}),
    ("deadline (client-side)", {"deadline": 30.0}),
    ("extra_body", {"extra_body": {"typical_p": 0.9, "watermark": True, "truncate": 100}}),
    ("greedy with warpers", {"temperature": 0, "top_p": 0.5, "top_k": 5, "seed": 3}),
    (
        "seed=0 on completions",
        {
            "seed": 0,
            "max_tokens": 8,
            "temperature": 0.5,
            "top_p": 0.8,
            "stop": ["x"],
            "repetition_penalty": 1.2,
            "lora": "sql",
        },
    ),
]
CHAT_OPTIONS: list[tuple[str, dict[str, Any]]] = [
    (label, opts)
    for label, opts in PROMPT_OPTIONS
    if not {"top_k", "repetition_penalty", "n", "extra_body"} & opts.keys()
    or label.startswith("top_k=")
    or label == "n=1"
] + [("extra_body", {"extra_body": {"tool_prompt": "Use the tools."}})]
RICH: dict[str, Any] = {
    "max_tokens": 32,
    "temperature": 0.8,
    "top_p": 0.95,
    "top_k": 20,
    "stop": ["\n\n", "END"],
    "seed": 3,
    "frequency_penalty": 0.2,
    "repetition_penalty": 1.05,
    "logprobs": True,
    "top_logprobs": 2,
    "lora": "sql",
    "extra_body": {"typical_p": 0.9},
}
RICH_CHAT = {k: v for k, v in RICH.items() if k not in ("top_k", "repetition_penalty", "extra_body")}


class Case(NamedTuple):
    """One request of the matrix: chat or prompt, the constraint, the options, streamed or not."""

    chat: bool
    output: Any
    options: dict[str, Any]
    stream: bool


def _cases() -> list[Any]:
    cases = []
    for chat, options in ((False, PROMPT_OPTIONS), (True, CHAT_OPTIONS)):
        kind = "chat" if chat else "prompt"
        for stream in (False, True):
            mode = "stream" if stream else "whole"
            for label, opts in options:
                if stream and opts.get("n", 1) > 1:
                    continue  # best_of cannot stream: refused, see test_tgi_mapping
                cases.append(pytest.param(Case(chat, None, opts, stream), id=f"{kind}-{mode}-{label}"))
            for out_label, output in OUTPUTS:
                cases.append(pytest.param(Case(chat, output, {}, stream), id=f"{kind}-{mode}-{out_label}"))
                cases.append(
                    pytest.param(
                        Case(chat, output, RICH_CHAT if chat else RICH, stream),
                        id=f"{kind}-{mode}-{out_label}-all-options",
                    )
                )
        if not chat:
            for out_label, output in OUTPUTS:
                cases.append(
                    pytest.param(
                        Case(False, output, {"n": 2, "temperature": 0.9, "lora": "sql"}, False),
                        id=f"prompt-whole-{out_label}-n",
                    )
                )
    return cases


CASES = _cases()


def build(case: Case) -> tuple[Request, Any]:
    request = make_request(
        None if case.chat else "Hi there",
        CHAT if case.chat else None,
        case.output,
        case.options,
        stream=case.stream,
    )
    check(ADAPTER.capabilities(INFO.version), request)  # what the core does before build
    return request, ADAPTER.build(request, INFO)


@pytest.fixture(params=CASES)
def case(request: pytest.FixtureRequest) -> Case:
    """Each request of the matrix in turn."""
    value: Case = request.param
    return value


# -- requests ---------------------------------------------------------------------------------
def test_every_built_body_validates_against_the_schema_of_its_path(contract: Contract, case: Case) -> None:
    _, call = build(case)
    contract.check_request(call.path, call.json)
    assert call.method == "POST" and call.stream is case.stream


def test_each_request_goes_to_the_api_that_honours_it(case: Case) -> None:
    _, call = build(case)
    if case.chat:
        expected = "/v1/chat/completions"
    elif case.options.get("seed") == 0 or case.options.get("frequency_penalty") == -2:
        expected = "/v1/completions"
    else:
        expected = "/generate_stream" if case.stream else "/generate"
    assert call.path == expected


@pytest.mark.parametrize("chat", [False, True])
def test_prompt_length_preflight_bodies_validate(contract: Contract, chat: bool) -> None:
    small = TGIInfo(engine="tgi", model="tiny", version="3.3.6-dev0", max_model_len=64, max_input_tokens=32)
    long = "word " * 40
    request = make_request(
        None if chat else long, [{"role": "user", "content": long}] if chat else None, None, {}, stream=False
    )
    call = ADAPTER.preflight(request, small)
    assert call is not None and call.path == ("/chat_tokenize" if chat else "/tokenize")
    contract.check_request(call.path, call.json)


def test_the_matrix_covers_every_unified_option() -> None:
    from unillm.options import Options

    used = {k for p in CASES for k in p.values[0].options}
    refused = {"min_p", "presence_penalty", "priority"}  # refused before sending: see test_tgi_mapping
    refused |= {"tools", "tool_choice"}  # their own matrix: test_tgi_tools.py
    refused |= {"thinking", "thinking_budget", "reasoning_effort"}  # test_reasoning_options.py
    refused |= {"replay_reasoning"}  # acts on messages: test_reasoning_replay.py
    assert set(Options.__annotations__) - refused <= used
    kinds = {type(p.values[0].output).__name__ for p in CASES if p.values[0].output is not None}
    assert {"ModelMetaclass", "dict", "Regex", "Choice"} <= kinds


def test_contract_file_is_the_published_tgi_schema(contract: Contract) -> None:
    assert contract.version.startswith("3.3")
    assert "/generate_stream" in contract.document["paths"]
    assert "TGI's published OpenAPI" in contract.document["info"]["x-unillm-source"]


def test_contract_file_keeps_schemas_but_not_prose(contract: Contract) -> None:
    schemas = contract.document["components"]["schemas"]
    assert {"GenerateRequest", "ChatRequest", "CompletionRequest", "GenerateResponse"} <= set(schemas)
    # a *property* named description is kept; prose keys are gone
    assert "description" in json.dumps(schemas["FunctionDefinition"]["properties"])
    assert '"summary"' not in json.dumps(contract.document)
    assert all("description" not in s for s in schemas.values())


# -- answers: fixtures valid under the answer schemas, then parsed ------------------------------
TOKENS: list[dict[str, Any]] = [
    {"id": 15043, "text": "Hello", "logprob": -0.2, "special": False},
    {"id": 29892, "text": ",", "logprob": -1.5, "special": False},
    {"id": 3186, "text": " END", "logprob": -0.7, "special": False},
]
GENERATE_ANSWER = {
    "generated_text": "Hello, END",
    "details": {
        "finish_reason": "stop_sequence",
        "generated_tokens": 3,
        "seed": 42,
        "prefill": [],
        "tokens": TOKENS,
        "top_tokens": [[t, {**t, "id": t["id"] + 1, "logprob": t["logprob"] - 1}] for t in TOKENS],
        "best_of_sequences": [
            {
                "generated_text": "Hi",
                "finish_reason": "eos_token",
                "generated_tokens": 2,
                "seed": 43,
                "prefill": [],
                "tokens": [TOKENS[0], {"id": 2, "text": "</s>", "logprob": -0.1, "special": True}],
            }
        ],
    },
}
STREAM_EVENTS = [
    {
        "index": 1,
        "token": TOKENS[0],
        "generated_text": None,
        "details": None,
        "top_tokens": [TOKENS[0], TOKENS[1]],
    },
    {"index": 2, "token": TOKENS[1], "generated_text": None, "details": None},
    {
        "index": 3,
        "token": {"id": 2, "text": "</s>", "logprob": -0.05, "special": True},
        "generated_text": "Hello,",
        "details": {"finish_reason": "eos_token", "generated_tokens": 3, "input_length": 7, "seed": None},
    },
]
CHAT_ANSWER = {
    "id": "",
    "created": 1706270835,
    "model": "tiny",
    "system_fingerprint": "3.3.6-dev0-native",
    "object": "chat.completion",
    "choices": [
        {
            "index": 0,
            "finish_reason": "stop",
            "message": {"role": "assistant", "content": "Hi!"},
            "logprobs": {
                "content": [
                    {"token": "Hi", "logprob": -0.3, "top_logprobs": [{"token": "Hi", "logprob": -0.3}]}
                ]
            },
        }
    ],
    "usage": {"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15},
}


def _chat_chunk(choices: list[dict[str, Any]], usage: dict[str, int] | None = None) -> dict[str, Any]:
    """One chunk of TGI's streamed chat answer, as its OpenAI-compatible route sends it."""
    return {
        "id": "",
        "created": 1,
        "model": "tiny",
        "system_fingerprint": "x",
        "object": "chat.completion.chunk",
        "choices": choices,
        "usage": usage,
    }


def _delta(content: str, finish: str | None) -> dict[str, Any]:
    return {
        "index": 0,
        "delta": {"role": "assistant", "content": content},
        "finish_reason": finish,
        "logprobs": None,
    }


CHAT_CHUNKS = [
    _chat_chunk([_delta("Hi", None)]),
    _chat_chunk([_delta(" END", "stop_sequence")]),
    _chat_chunk([], {"prompt_tokens": 9, "completion_tokens": 2, "total_tokens": 11}),
]
COMPLETION_ANSWER = {
    "id": "",
    "created": 1,
    "model": "tiny",
    "system_fingerprint": "x",
    "object": "text_completion",
    "choices": [{"index": 0, "text": "Hello", "finish_reason": "length", "logprobs": None}],
    "usage": {"prompt_tokens": 4, "completion_tokens": 1, "total_tokens": 5},
}
COMPLETION_CHUNKS = [
    {
        "id": "",
        "created": 1,
        "model": "tiny",
        "system_fingerprint": "x",
        "choices": [{"index": 0, "text": "Hello", "finish_reason": "", "logprobs": None}],
    },
    {
        "id": "",
        "created": 1,
        "model": "tiny",
        "system_fingerprint": "x",
        "choices": [{"index": 0, "text": "</s>", "finish_reason": "eos_token", "logprobs": None}],
        "usage": {"prompt_tokens": 4, "completion_tokens": 2, "total_tokens": 6},
    },
]
INFO_ANSWER = {
    "model_id": "meta-llama/Llama-3.1-8B-Instruct",
    "model_sha": None,
    "model_pipeline_tag": None,
    "max_concurrent_requests": 128,
    "max_best_of": 2,
    "max_stop_sequences": 4,
    "max_input_tokens": 8191,
    "max_total_tokens": 8192,
    "validation_workers": 2,
    "max_client_batch_size": 4,
    "router": "text-generation-router",
    "version": "3.3.5",
    "sha": "abc",
    "docker_label": "sha-abc",
}


def prompt(**options: Any) -> Request:
    return make_request("Hi", None, None, options, stream=False)


def test_generate_answer_with_details_best_of_and_top_tokens(contract: Contract) -> None:
    contract.check_response("/generate", 200, "application/json", GENERATE_ANSWER)
    request = make_request(
        "Hi",
        None,
        None,
        {"n": 2, "stop": ["END"], "logprobs": True, "top_logprobs": 2, "temperature": 0.5},
        stream=False,
    )
    c = ADAPTER.parse(GENERATE_ANSWER, request, INFO)
    assert [ch.text for ch in c.choices] == ["Hello, ", "Hi"]  # without the stop string "END"
    assert [ch.finish_reason for ch in c.choices] == ["stop", "stop"]
    assert c.usage == Usage(prompt_tokens=0, completion_tokens=5)  # prompt count: x-prompt-tokens
    assert c.logprobs is not None and [t.token for t in c.logprobs] == ["Hello", ",", " END"]
    assert c.logprobs[1].logprob == -1.5 and [a.logprob for a in c.logprobs[1].top] == [-1.5, -2.5]
    assert c.engine == "tgi" and c.model == "tiny" and c.engine_version == "3.3.6-dev0"


def test_generate_answer_without_details(contract: Contract) -> None:
    body = {"generated_text": "ok"}
    contract.check_response("/generate", 200, "application/json", body)
    c = ADAPTER.parse(body, prompt(), INFO)
    assert c.text == "ok" and c.finish_reason is None and c.logprobs is None


def test_prompt_tokens_come_from_the_x_prompt_tokens_header() -> None:
    c = ADAPTER.parse(GENERATE_ANSWER, prompt(), INFO)
    c = ADAPTER.parse_headers({"x-prompt-tokens": "7", "x-generated-tokens": "3"}, c)
    assert c.usage == Usage(prompt_tokens=7, completion_tokens=5)


def test_stream_token_events_and_the_final_event(contract: Contract) -> None:
    for event in STREAM_EVENTS:
        contract.check_response("/generate_stream", 200, "text/event-stream", event)
    request = make_request("Hi", None, None, {"logprobs": True}, stream=True)
    decoder = ADAPTER.decoder(request, INFO)
    deltas = [d for e in STREAM_EVENTS for d in decoder.feed(json.dumps(e))]
    assert "".join(d.text for d in deltas) == "Hello,"  # the special </s> token adds no text
    assert decoder.done and deltas[-1].finish_reason == "stop"
    assert deltas[-1].usage == Usage(prompt_tokens=7, completion_tokens=3)
    assert deltas[0].logprobs is not None and [a.token for a in deltas[0].logprobs[0].top] == ["Hello", ","]


def test_chat_answer(contract: Contract) -> None:
    contract.check_response("/v1/chat/completions", 200, "application/json", CHAT_ANSWER)
    request = make_request(None, CHAT, None, {"logprobs": True}, stream=False)
    c = ADAPTER.parse(CHAT_ANSWER, request, INFO)
    assert (c.text, c.finish_reason) == ("Hi!", "stop")
    assert c.usage == Usage(prompt_tokens=12, completion_tokens=3)
    assert c.logprobs is not None and c.logprobs[0].token == "Hi"


def test_chat_stream_chunks_and_usage_chunk(contract: Contract) -> None:
    for chunk in CHAT_CHUNKS:
        contract.check_response("/v1/chat/completions", 200, "text/event-stream", chunk)
    request = make_request(None, CHAT, None, {"stop": ["END"]}, stream=True)
    decoder = ADAPTER.decoder(request, INFO)
    deltas = [d for c in CHAT_CHUNKS for d in decoder.feed(json.dumps(c))]
    deltas += decoder.feed("[DONE]")
    assert "".join(d.text for d in deltas) == "Hi "  # without the stop string "END"
    assert deltas[-1].usage == Usage(prompt_tokens=9, completion_tokens=2)
    assert deltas[-1].finish_reason == "stop" and decoder.done


def test_completions_answer_and_stream(contract: Contract) -> None:
    contract.check_response("/v1/completions", 200, "application/json", COMPLETION_ANSWER)
    contract.check_response("/v1/completions", 200, "text/event-stream", COMPLETION_CHUNKS[0])
    contract.check_schema("CompletionFinal", COMPLETION_CHUNKS[1])
    c = ADAPTER.parse(COMPLETION_ANSWER, prompt(seed=0), INFO)
    assert (c.text, c.finish_reason, c.usage.prompt_tokens) == ("Hello", "length", 4)
    decoder = ADAPTER.decoder(make_request("Hi", None, None, {"seed": 0}, stream=True), INFO)
    deltas = [d for c in COMPLETION_CHUNKS for d in decoder.feed(json.dumps(c))] + decoder.feed("[DONE]")
    assert "".join(d.text for d in deltas) == "Hello"  # the final chunk's "</s>" is dropped
    assert deltas[-1].finish_reason == "stop" and deltas[-1].usage == Usage(
        prompt_tokens=4, completion_tokens=2
    )


def test_info_answer_gives_version_model_and_limits(contract: Contract) -> None:
    contract.check_response("/info", 200, "application/json", INFO_ANSWER, method="get")
    info = ADAPTER.parse_info({"info": INFO_ANSWER}, None)
    assert isinstance(info, TGIInfo)
    assert (info.model, info.version, info.max_model_len, info.max_input_tokens) == (
        "meta-llama/Llama-3.1-8B-Instruct",
        "3.3.5",
        8192,
        8191,
    )
    assert (info.max_best_of, info.max_stop_sequences) == (2, 4)


def test_tokenize_answers_count_prompt_tokens(contract: Contract) -> None:
    tokens = [{"id": 1, "text": "<s>", "start": 0, "stop": 0}, {"id": 2, "text": "Hi", "start": 0, "stop": 2}]
    contract.check_response("/tokenize", 200, "application/json", tokens)
    chat = {"tokenize_response": tokens, "templated_text": "<s>Hi"}
    contract.check_response("/chat_tokenize", 200, "application/json", chat)
    from unillm_tgi.requests import prompt_tokens

    assert prompt_tokens(tokens) == 2 and prompt_tokens(chat) == 2


ERRORS = [
    (422, "validation", "Input validation error: `temperature` must be strictly positive", InvalidRequest),
    (424, "generation", "Request failed during generation: CUDA out of memory", EngineInternalError),
    (429, "overloaded", "Model is overloaded", Overloaded),
    (500, "incomplete_generation", "Incomplete generation", EngineInternalError),
]


@pytest.mark.parametrize(("status", "error_type", "message", "error"), ERRORS)
@pytest.mark.parametrize("path", ["/generate", "/v1/chat/completions", "/v1/completions"])
def test_each_error_body_becomes_its_typed_error_with_tgis_message(
    contract: Contract,
    path: str,
    status: int,
    error_type: str,
    message: str,
    error: type[Exception],
) -> None:
    body = {"error": message, "error_type": error_type}
    contract.check_response(path, status, "application/json", body)
    e = ADAPTER.parse_error(status, json.dumps(body).encode(), prompt(), INFO)
    assert type(e) is error
    assert e.engine_message == message and e.status == status  # type: ignore[attr-defined]
    assert message in str(e)


@pytest.mark.parametrize(("status", "error_type", "message", "error"), ERRORS)
def test_each_stream_error_event_becomes_its_typed_error(
    contract: Contract,
    status: int,
    error_type: str,
    message: str,
    error: type[Exception],
) -> None:
    event = {"error": message, "error_type": error_type}
    contract.check_response("/generate_stream", status, "text/event-stream", event)
    decoder = ADAPTER.decoder(make_request("Hi", None, None, {}, stream=True), INFO)
    with pytest.raises(error) as caught:
        decoder.feed(json.dumps(event))
    assert caught.value.engine_message == message and caught.value.status == status  # type: ignore[attr-defined]


def test_json_schema_constraint_is_sent_inlined_and_named_json(contract: Contract) -> None:
    _, call = build(Case(False, Answer, {}, False))
    assert call.json is not None
    grammar = call.json["parameters"]["grammar"]
    assert grammar["type"] == "json"
    assert '"$ref"' not in json.dumps(grammar["value"]) and "$defs" not in grammar["value"]
    contract.check_schema("GrammarType", grammar)
    assert isinstance(JsonSchema.from_model(Answer).schema.get("$defs"), dict)  # the original had refs
