"""Golden tests of the SGLang adapter: unified requests in, plain dicts out (no engine, no I/O)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from unillm_sglang import SGLangAdapter, SGLangInfo
from unillm_sglang.native import NativeStreamDecoder

from unillm.adapter.base import EngineInfo, HttpCall
from unillm.capabilities import Feature, check
from unillm.errors import (
    InvalidRequest,
    MalformedResponse,
    Unauthorized,
    UnknownLora,
    UnknownModel,
    UnsupportedFeature,
)
from unillm.options import Choice, Grammar, JsonSchema, Regex, Request
from unillm.results import LoraInfo, Usage
from unillm.testing.sample_requests import CHAT, chat_request, prompt_request

AUTO, OPENAI, NATIVE = SGLangAdapter(), SGLangAdapter("openai"), SGLangAdapter("native")
MODEL = "org/base-model"
INFO = SGLangInfo(engine="sglang", model=MODEL, version="0.5.23", served_names=(MODEL,), lora_enabled=True)
SCHEMA = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}


def info_at(version: str | None, **fields: Any) -> SGLangInfo:
    return SGLangInfo(engine="sglang", model=MODEL, version=version, served_names=(MODEL,), **fields)


def call_of(request: Request, adapter: SGLangAdapter = AUTO, info: EngineInfo = INFO) -> HttpCall:
    return adapter.build(request, info)


def body_of(request: Request, adapter: SGLangAdapter = AUTO, info: EngineInfo = INFO) -> dict[str, Any]:
    call = call_of(request, adapter, info)
    assert call.json is not None
    return dict(call.json)


# -- routing ---------------------------------------------------------------------------------


def test_prompt_goes_to_openai_completions_by_default() -> None:
    assert call_of(prompt_request(max_tokens=4)) == HttpCall(
        "POST", "/v1/completions", {"model": MODEL, "prompt": "Hi", "max_tokens": 4}, False
    )


def test_messages_go_to_openai_chat() -> None:
    assert call_of(chat_request()) == HttpCall(
        "POST", "/v1/chat/completions", {"model": MODEL, "messages": CHAT}, False
    )


def test_forced_native_sends_a_prompt_to_generate() -> None:
    assert call_of(prompt_request(max_tokens=4), NATIVE) == HttpCall(
        "POST", "/generate", {"text": "Hi", "sampling_params": {"max_new_tokens": 4}}, False
    )


@pytest.mark.parametrize("key", ["sampling_params", "input_ids", "return_logprob", "top_logprobs_num"])
def test_native_only_extra_body_keys_select_generate(key: str) -> None:
    value: Any = {"min_new_tokens": 2} if key == "sampling_params" else [1, 2] if key == "input_ids" else 1
    assert call_of(prompt_request(extra_body={key: value})).path == "/generate"


def test_an_option_only_generate_honours_on_an_old_version_routes_the_prompt_there() -> None:
    old = info_at("0.3.6")
    assert AUTO.route(prompt_request(top_k=5), old) == "native"
    assert AUTO.route(prompt_request(temperature=0.5), old) == "openai"


def test_chat_with_an_option_its_old_api_lacks_is_refused_naming_the_version() -> None:
    with pytest.raises(UnsupportedFeature, match=r"sglang 0\.3\.6 cannot honour top_k.*since SGLang 0\.4\.1"):
        AUTO.build(chat_request(top_k=5), info_at("0.3.6"))


def test_forced_native_refuses_chat_messages() -> None:
    with pytest.raises(UnsupportedFeature, match="chat messages"):
        NATIVE.build(chat_request(), INFO)


def test_adapter_rejects_an_unknown_api_name() -> None:
    with pytest.raises(ValueError, match="api must be"):
        SGLangAdapter("grpc")  # type: ignore[arg-type]


# -- OpenAI bodies ---------------------------------------------------------------------------

OPENAI_SAMPLING = [
    ({"temperature": 0}, {"temperature": 0}),
    ({"top_p": 0.9}, {"top_p": 0.9}),
    ({"top_k": 40}, {"top_k": 40}),
    ({"min_p": 0.05}, {"min_p": 0.05}),
    ({"stop": "\n"}, {"stop": ["\n"]}),
    ({"seed": 7}, {"seed": 7}),
    ({"presence_penalty": 0.5}, {"presence_penalty": 0.5}),
    ({"frequency_penalty": -0.5}, {"frequency_penalty": -0.5}),
    ({"repetition_penalty": 1.1}, {"repetition_penalty": 1.1}),
    ({"n": 3}, {"n": 3}),
    ({"timeout": 5.0}, {}),
]


@pytest.mark.parametrize(("options", "fields"), OPENAI_SAMPLING)
def test_sampling_option_in_openai_completions_body(options: dict[str, Any], fields: dict[str, Any]) -> None:
    assert body_of(prompt_request(**options)) == {"model": MODEL, "prompt": "Hi", **fields}


OPENAI_OUTPUTS = [
    (
        JsonSchema(SCHEMA, name="Answer"),
        {"response_format": {"type": "json_schema", "json_schema": {"name": "Answer", "schema": SCHEMA}}},
    ),
    (Regex(r"\d+"), {"regex": r"\d+"}),
    (Choice(["yes", "no"]), {"regex": "(yes|no)"}),
    (Grammar('root ::= "a"'), {"ebnf": 'root ::= "a"'}),
]


@pytest.mark.parametrize(("output", "fields"), OPENAI_OUTPUTS)
@pytest.mark.parametrize("make", [prompt_request, chat_request])
def test_output_constraint_in_openai_body(output: Any, fields: dict[str, Any], make: Any) -> None:
    body = body_of(make(output))
    assert {k: body[k] for k in fields} == fields


def test_old_completions_get_the_schema_as_a_json_string() -> None:
    body = body_of(prompt_request(SCHEMA), info=info_at("0.4.9"))
    assert json.loads(body["json_schema"]) == SCHEMA
    assert "response_format" not in body


def test_old_chat_keeps_response_format() -> None:
    assert "response_format" in body_of(chat_request(SCHEMA), info=info_at("0.4.9"))


def test_stream_asks_for_usage_in_the_last_chunk() -> None:
    body = body_of(chat_request(stream=True))
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}


@pytest.mark.parametrize("make", [prompt_request, chat_request])
def test_lora_is_named_base_colon_adapter_on_the_openai_api(make: Any) -> None:
    body = body_of(make(lora="sql"))
    assert body["model"] == f"{MODEL}:sql" and "lora_path" not in body


def test_lora_goes_in_lora_path_before_0_5_6() -> None:
    body = body_of(prompt_request(lora="sql"), info=info_at("0.5.2"))
    assert body["model"] == MODEL and body["lora_path"] == "sql"


def test_extra_body_is_merged_last_and_wins() -> None:
    body = body_of(prompt_request(max_tokens=4, extra_body={"max_tokens": 9, "ignore_eos": True}))
    assert body["max_tokens"] == 9 and body["ignore_eos"] is True


# -- native bodies ---------------------------------------------------------------------------

NATIVE_SAMPLING = [
    ({"max_tokens": 16}, {"max_new_tokens": 16}),
    ({"temperature": 0}, {"temperature": 0}),
    ({"top_p": 0.9}, {"top_p": 0.9}),
    ({"top_k": 40}, {"top_k": 40}),
    ({"min_p": 0.05}, {"min_p": 0.05}),
    ({"stop": ["END", "###"]}, {"stop": ["END", "###"]}),
    ({"seed": 0}, {"sampling_seed": 0}),
    ({"presence_penalty": 0.5}, {"presence_penalty": 0.5}),
    ({"frequency_penalty": 0.5}, {"frequency_penalty": 0.5}),
    ({"repetition_penalty": 1.1}, {"repetition_penalty": 1.1}),
    ({"n": 2}, {"n": 2}),
]


@pytest.mark.parametrize(("options", "sampling"), NATIVE_SAMPLING)
def test_sampling_option_in_native_sampling_params(options: dict[str, Any], sampling: dict[str, Any]) -> None:
    assert body_of(prompt_request(**options), NATIVE) == {"text": "Hi", "sampling_params": sampling}


def test_native_json_schema_is_a_json_string() -> None:
    sp = body_of(prompt_request(SCHEMA), NATIVE)["sampling_params"]
    assert isinstance(sp["json_schema"], str) and json.loads(sp["json_schema"]) == SCHEMA


@pytest.mark.parametrize(
    ("output", "field", "value"),
    [
        (Regex("[a-z]+"), "regex", "[a-z]+"),
        (Choice(["a.b", "c|d", "(e)"]), "regex", r"(a\.b|c\|d|\(e\))"),
        (Grammar('root ::= "x"'), "ebnf", 'root ::= "x"'),
    ],
)
def test_native_constraints(output: Any, field: str, value: str) -> None:
    assert body_of(prompt_request(output), NATIVE)["sampling_params"] == {field: value}


def test_choice_regex_escapes_every_option() -> None:
    assert Choice(["1+1", "a*", "[x]"]).as_regex() == r"(1\+1|a\*|\[x\])"


def test_native_lora_stream_and_logprobs_fields() -> None:
    body = body_of(prompt_request(stream=True, lora="sql", top_logprobs=3), NATIVE)
    assert body == {
        "text": "Hi",
        "sampling_params": {},
        "stream": True,
        "lora_path": "sql",
        "return_logprob": True,
        "return_text_in_logprobs": True,
        "logprob_start_len": -1,
        "top_logprobs_num": 3,
    }


def test_native_extra_sampling_params_merge_and_input_ids_replace_the_text() -> None:
    body = body_of(
        prompt_request(
            max_tokens=3, extra_body={"sampling_params": {"ignore_eos": True}, "input_ids": [5, 6]}
        )
    )
    assert body == {"input_ids": [5, 6], "sampling_params": {"max_new_tokens": 3, "ignore_eos": True}}


# -- answers ---------------------------------------------------------------------------------


def _meta(**extra: Any) -> dict[str, Any]:
    return {"id": "r1", "prompt_tokens": 4, "completion_tokens": 3, "finish_reason": None, **extra}


def test_parse_native_body() -> None:
    body = {
        "text": "abc",
        "output_ids": [1, 2, 3],
        "meta_info": _meta(finish_reason={"type": "length", "length": 3}),
    }
    r = NATIVE.parse(body, prompt_request(), INFO)
    assert (r.text, r.finish_reason) == ("abc", "length")
    assert r.usage == Usage(prompt_tokens=4, completion_tokens=3)
    assert r.engine_version == "0.5.23" and r.model == MODEL


def test_parse_native_list_for_n_counts_the_prompt_once() -> None:
    item = {"text": "x", "meta_info": _meta(finish_reason={"type": "stop", "matched": 1})}
    r = NATIVE.parse([item, item], prompt_request(n=2), INFO)
    assert [c.index for c in r.choices] == [0, 1]
    assert r.usage == Usage(prompt_tokens=4, completion_tokens=6)
    assert r.finish_reason == "stop"


def test_parse_native_logprobs() -> None:
    meta = _meta(
        output_token_logprobs=[[-0.5, 7, "a"], [None, 8, None]],
        output_top_logprobs=[[[-0.5, 7, "a"], [-1.0, 9, "b"]], None],
    )
    r = NATIVE.parse({"text": "a?", "meta_info": meta}, prompt_request(logprobs=True), INFO)
    assert r.logprobs is not None
    assert [(t.token, t.logprob, len(t.top)) for t in r.logprobs] == [("a", -0.5, 2), ("8", float("-inf"), 0)]


@pytest.mark.parametrize("body", [{}, {"text": "a"}, [], "oops", {"meta_info": {}}])
def test_parse_unexpected_native_body_raises_malformed_response(body: Any) -> None:
    with pytest.raises(MalformedResponse):
        NATIVE.parse(body, prompt_request(), INFO)


@pytest.mark.parametrize("text", [None, 5, 0, {"a": 1}, ["a"]], ids=repr)
def test_a_native_text_of_the_wrong_type_is_malformed_response(text: Any) -> None:
    body = {"text": text, "meta_info": _meta(finish_reason={"type": "stop"})}
    with pytest.raises(MalformedResponse, match="text"):
        NATIVE.parse(body, prompt_request(), INFO)


@pytest.mark.parametrize("text", [None, 5, 0, {"a": 1}, ["a"]], ids=repr)
def test_a_streamed_native_text_of_the_wrong_type_is_malformed_response(text: Any) -> None:
    with pytest.raises(MalformedResponse, match="text"):
        NativeStreamDecoder("sglang").feed(json.dumps({"text": text, "meta_info": _meta()}))


def test_parse_openai_body() -> None:
    body = {
        "model": MODEL,
        "choices": [{"index": 0, "text": "hey", "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 2, "completion_tokens": 1},
    }
    r = AUTO.parse(body, prompt_request(), INFO)
    assert (r.text, r.finish_reason, r.usage.completion_tokens) == ("hey", "stop", 1)


def _event(text: str, rid: str = "r1", finish: Any = None, tokens: int = 1) -> str:
    meta = _meta(id=rid, finish_reason=finish, completion_tokens=tokens)
    return json.dumps({"text": text, "meta_info": meta})


def test_native_stream_diffs_cumulative_text_and_ends_with_usage() -> None:
    d = NativeStreamDecoder("sglang")
    texts = [
        x.text
        for data in (
            _event("He", tokens=1),
            _event("Hell", tokens=2),
            _event("Hello", finish={"type": "stop"}, tokens=3),
        )
        for x in d.feed(data)
    ]
    assert texts == ["He", "ll", "o"]
    [last] = d.feed("[DONE]")
    assert d.done and last.finish_reason == "stop"
    assert last.usage == Usage(prompt_tokens=4, completion_tokens=3)


def test_native_stream_in_incremental_mode_passes_pieces_through() -> None:
    d = NativeStreamDecoder("sglang", incremental=True)
    assert [x.text for data in (_event("He"), _event("llo")) for x in d.feed(data)] == ["He", "llo"]


def test_native_stream_tells_choices_apart_by_request_id() -> None:
    d = NativeStreamDecoder("sglang")
    out = [
        x
        for data in (_event("a", "r1"), _event("b", "r2"), _event("ab", "r1"), _event("bc", "r2"))
        for x in d.feed(data)
    ]
    assert [(x.index, x.text) for x in out] == [(0, "a"), (1, "b"), (0, "b"), (1, "c")]


def test_native_stream_emits_only_new_logprobs() -> None:
    d = NativeStreamDecoder("sglang")
    first = {"text": "a", "meta_info": _meta(output_token_logprobs=[[-1.0, 1, "a"]])}
    second = {"text": "ab", "meta_info": _meta(output_token_logprobs=[[-1.0, 1, "a"], [-2.0, 2, "b"]])}
    [x] = d.feed(json.dumps(first))
    [y] = d.feed(json.dumps(second))
    assert [t.token for t in x.logprobs or ()] == ["a"] and [t.token for t in y.logprobs or ()] == ["b"]


def test_native_stream_error_event_raises_typed_error() -> None:
    error = {"error": {"message": "bad", "type": "invalid_request_error", "code": 400}}
    with pytest.raises(InvalidRequest, match="bad"):
        NativeStreamDecoder("sglang").feed(json.dumps(error))


def test_native_stream_abort_with_status_raises_the_engines_error() -> None:
    finish = {"type": "abort", "message": "Failed to compile regex grammar", "status_code": 400}
    with pytest.raises(InvalidRequest, match="compile regex"):
        NativeStreamDecoder("sglang").feed(_event("?", finish=finish))


def test_native_stream_plain_abort_is_a_finish_reason() -> None:
    [x] = NativeStreamDecoder("sglang").feed(_event("a", finish={"type": "abort"}))
    assert x.finish_reason == "abort"


@pytest.mark.parametrize("data", ["not json", "[1]", json.dumps({"text": "a"})])
def test_native_stream_garbage_raises_malformed_response(data: str) -> None:
    with pytest.raises(MalformedResponse):
        NativeStreamDecoder("sglang").feed(data)


def test_decoder_follows_the_route() -> None:
    assert isinstance(
        AUTO.decoder(prompt_request(stream=True), INFO), type(AUTO.decoder(chat_request(stream=True), INFO))
    )
    assert isinstance(NATIVE.decoder(prompt_request(stream=True), INFO), NativeStreamDecoder)


# -- errors ----------------------------------------------------------------------------------

SGLANG_400 = json.dumps(
    {
        "object": "error",
        "message": "Requested token count exceeds the model's maximum context length",
        "type": "BadRequestError",
        "param": None,
        "code": 400,
    }
).encode()


def test_400_is_invalid_request_with_sglangs_message() -> None:
    e = AUTO.parse_error(400, SGLANG_400, prompt_request(), INFO)
    assert isinstance(e, InvalidRequest) and e.engine_message.startswith("Requested token count")


def test_401_is_unauthorized() -> None:
    assert isinstance(AUTO.parse_error(401, b'{"error": "Unauthorized"}', None, INFO), Unauthorized)


def test_unloaded_lora_is_unknown_adapter() -> None:
    body = json.dumps(
        {
            "object": "error",
            "message": "The following requested LoRA adapters are not "
            "loaded: sql\nLoaded adapters: odict_keys([]).",
        }
    ).encode()
    assert isinstance(AUTO.parse_error(400, body, prompt_request(lora="sql"), INFO), UnknownLora)


# -- discovery -------------------------------------------------------------------------------

MODEL_INFO = {"model_path": "/models/base", "served_model_name": "base", "is_generation": True}
SERVER_INFO = {
    "version": "0.5.23",
    "model_path": "/models/base",
    "served_model_name": "base",
    "enable_lora": True,
    "max_lora_rank": 16,
    "lora_target_modules": ["q_proj", "v_proj"],
    "incremental_streaming_output": False,
    "context_length": None,
}
MODELS = {
    "data": [
        {"id": "base", "max_model_len": 2048, "parent": None},
        {"id": "sql", "root": "/adapters/sql", "parent": "base"},
    ]
}
ANSWERS = {"model_info": MODEL_INFO, "server_info": SERVER_INFO, "models": MODELS}


def test_discovery_asks_model_info_server_info_and_models() -> None:
    assert {k: c.path for k, c in AUTO.discovery().items()} == {
        "model_info": "/get_model_info",
        "server_info": "/get_server_info",
        "models": "/v1/models",
    }


def test_parse_info_reads_version_served_name_limits_and_lora_settings() -> None:
    info = AUTO.parse_info(ANSWERS, None)
    assert (info.model, info.version, info.max_model_len) == ("base", "0.5.23", 2048)
    assert info.served_names == ("base", "/models/base")
    assert (info.lora_enabled, info.max_lora_rank) == (True, 16)
    assert info.lora_target_modules == ("q_proj", "v_proj")


@pytest.mark.parametrize("model", ["base", "/models/base"])
def test_the_served_name_or_the_model_path_are_accepted(model: str) -> None:
    assert AUTO.parse_info(ANSWERS, model).model == "base"


def test_an_unknown_model_is_refused_because_sglang_would_ignore_it() -> None:
    with pytest.raises(UnknownModel, match="'base', not 'other'"):
        AUTO.parse_info(ANSWERS, "other")


def test_old_servers_without_served_name_use_the_model_path() -> None:
    info = AUTO.parse_info(
        {"model_info": {"model_path": "/m"}, "server_info": {"version": "0.4.5"}, "models": None}, None
    )
    assert (info.model, info.version, info.lora_enabled) == ("/m", "0.4.5", False)


def test_no_answer_at_all_is_malformed() -> None:
    with pytest.raises(MalformedResponse, match="SGLang server"):
        AUTO.parse_info({"model_info": None, "server_info": None, "models": None}, None)


# -- capabilities ----------------------------------------------------------------------------


def test_current_version_honours_every_request_feature_but_lark() -> None:
    caps = AUTO.capabilities("0.5.23")
    assert [f for f in Feature if not caps.supports(f)] == [Feature.GRAMMAR_LARK]


@pytest.mark.parametrize(
    ("version", "feature"),
    [("0.4.1", Feature.GRAMMAR), ("0.5.2", Feature.SEED), ("0.4.5", Feature.LORA_RUNTIME)],
)
def test_features_missing_from_old_versions(version: str, feature: Feature) -> None:
    assert not AUTO.capabilities(version).supports(feature)
    assert AUTO.capabilities("0.5.23").supports(feature)


def test_forced_native_capabilities_exclude_chat() -> None:
    assert not NATIVE.capabilities().supports(Feature.CHAT)
    with pytest.raises(UnsupportedFeature, match="chat"):
        check(NATIVE.capabilities(), chat_request())


def test_seed_is_refused_unless_the_server_is_deterministic() -> None:
    with pytest.raises(UnsupportedFeature, match="enable-deterministic-inference"):
        AUTO.build(prompt_request(seed=1), info_at("0.5.23", deterministic=False))
    assert body_of(prompt_request(seed=1), info=info_at("0.5.23", deterministic=True))["seed"] == 1


def test_lora_on_a_server_without_lora_is_refused_before_sending() -> None:
    with pytest.raises(UnsupportedFeature, match="without LoRA"):
        AUTO.build(prompt_request(lora="sql"), info_at("0.5.23", lora_enabled=False))


# -- LoRA endpoints --------------------------------------------------------------------------


def test_runtime_lora_calls() -> None:
    assert AUTO.load_lora("sql", "/a/sql") == HttpCall(
        "POST", "/load_lora_adapter", {"lora_name": "sql", "lora_path": "/a/sql"}
    )
    assert AUTO.unload_lora("sql") == HttpCall("POST", "/unload_lora_adapter", {"lora_name": "sql"})
    assert AUTO.list_loras() == HttpCall("GET", "/v1/models")


def test_parse_loras_lists_adapters_not_the_base() -> None:
    assert AUTO.parse_loras(MODELS) == [LoraInfo(name="sql", path="/adapters/sql")]


def test_failed_load_is_an_invalid_request_with_sglangs_message() -> None:
    body = b'{"success": false, "error_message": "LoRA rank 64 exceeds max_lora_rank 16"}'
    e = AUTO.lora_error(400, body, INFO)
    assert isinstance(e, InvalidRequest)


def test_missing_lora_route_means_no_runtime_lora() -> None:
    assert isinstance(AUTO.lora_error(404, b'{"detail": "Not Found"}', INFO), UnsupportedFeature)


def test_health_path_proves_the_model_generates() -> None:
    assert AUTO.health_path() == "/health_generate"


# -- LoRA launch-time limits, checked before loading -----------------------------------------

LORA_INFO = info_at("0.5.23", lora_enabled=True, max_lora_rank=8, lora_target_modules=("qkv_proj",))


def test_an_adapter_within_the_launch_limits_passes() -> None:
    AUTO.check_lora("sql", {"r": 8, "target_modules": ["q_proj", "v_proj"]}, LORA_INFO)


def test_an_adapter_of_a_higher_rank_than_reserved_is_refused() -> None:
    with pytest.raises(UnsupportedFeature, match=r"rank 16.*max_lora_rank=16"):
        AUTO.check_lora("big", {"r": 16, "target_modules": ["q_proj"]}, LORA_INFO)


def test_an_adapter_on_modules_not_reserved_is_refused() -> None:
    with pytest.raises(UnsupportedFeature, match="gate_up_proj"):
        AUTO.check_lora("mlp", {"r": 4, "target_modules": ["up_proj", "q_proj"]}, LORA_INFO)


def test_all_target_modules_accept_any_adapter() -> None:
    everything = info_at("0.5.23", lora_enabled=True, lora_target_modules=("all",))
    AUTO.check_lora("mlp", {"r": 64, "target_modules": "all-linear"}, everything)


def test_loading_on_a_server_without_lora_is_refused() -> None:
    with pytest.raises(UnsupportedFeature, match="without LoRA"):
        AUTO.check_lora("sql", None, info_at("0.5.23", lora_enabled=False))


def test_unknown_limits_or_unreadable_config_are_left_to_the_server() -> None:
    AUTO.check_lora("sql", None, LORA_INFO)
    AUTO.check_lora("sql", {"r": 99}, info_at("0.5.23", lora_enabled=True))


def test_the_tiny_models_lora_configs_are_checked_against_the_launch_limits() -> None:
    from unillm.client.llm import _local_adapter_config
    from unillm.testing.tiny_model import build_tiny_model

    config = _local_adapter_config(str(build_tiny_model().loras["sql"]))
    assert config is not None and config["r"] == 8
    AUTO.check_lora("sql", config, LORA_INFO)
    with pytest.raises(UnsupportedFeature, match="rank 8"):
        AUTO.check_lora("sql", config, info_at("0.5.23", lora_enabled=True, max_lora_rank=4))


# -- cached tokens (issue 33: one usage ledger) ----------------------------------------------


def test_native_body_reports_the_radix_cache_hits_as_cached_tokens() -> None:
    body = {"text": "abc", "meta_info": _meta(finish_reason={"type": "stop"}, cached_tokens=2)}
    assert NATIVE.parse(body, prompt_request(), INFO).usage.cached_tokens == 2


def test_native_stream_ends_with_the_cached_tokens() -> None:
    d = NativeStreamDecoder("sglang")
    d.feed(json.dumps({"text": "a", "meta_info": _meta(finish_reason={"type": "stop"}, cached_tokens=3)}))
    [last] = d.feed("[DONE]")
    assert last.usage is not None
    assert (last.usage.prompt_tokens, last.usage.cached_tokens) == (4, 3)


@pytest.mark.parametrize("count", [-1, "2", True, 1.5, [2]], ids=repr)
def test_a_native_cached_count_that_is_no_count_is_malformed_response(count: Any) -> None:
    meta = _meta(finish_reason={"type": "stop"}, cached_tokens=count)
    with pytest.raises(MalformedResponse, match="cached_tokens"):
        NATIVE.parse({"text": "a", "meta_info": meta}, prompt_request(), INFO)
    with pytest.raises(MalformedResponse, match="cached_tokens"):
        NativeStreamDecoder("sglang").feed(json.dumps({"text": "a", "meta_info": meta}))


# -- aborting a non-streamed request its caller gave up --------------------------------------
@pytest.mark.parametrize("adapter", [OPENAI, NATIVE], ids=["openai", "native"])
def test_a_non_streamed_call_is_tagged_with_an_id_its_abort_names(adapter: SGLangAdapter) -> None:
    tagged = adapter.abortable(call_of(prompt_request(max_tokens=4), adapter))
    assert tagged is not None
    call, abort = tagged
    assert call.json is not None and isinstance(call.json["rid"], str) and len(call.json["rid"]) == 32
    assert abort == HttpCall("POST", "/abort_request", {"rid": call.json["rid"]})
    again = adapter.abortable(call_of(prompt_request(max_tokens=4), adapter))
    assert again is not None and again[1] != abort  # a fresh id per request


def test_the_callers_own_id_is_kept_and_what_one_id_cannot_stop_is_not_tagged() -> None:
    own = OPENAI.abortable(call_of(prompt_request(extra_body={"rid": "mine"}), OPENAI))
    assert own is not None and own[1].json == {"rid": "mine"}
    assert OPENAI.abortable(call_of(prompt_request(stream=True), OPENAI)) is None  # leaving it stops it
    for adapter in (OPENAI, NATIVE):  # SGLang gives each sample an id of its own
        assert adapter.abortable(call_of(prompt_request(n=2), adapter)) is None
    odd = NATIVE.abortable(HttpCall("POST", "/generate", {"text": "x", "sampling_params": "odd"}))
    assert odd is not None and odd[0].json is not None and "rid" in odd[0].json  # no raw error
