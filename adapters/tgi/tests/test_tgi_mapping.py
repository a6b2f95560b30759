"""How unified options become TGI fields, and what is refused before sending (no I/O)."""

from __future__ import annotations

import dataclasses
import json
import re
from typing import Any, Optional

import jsonschema
import pytest
from pydantic import BaseModel
from tgi_fakes import tgi_info
from unillm_tgi import TGIAdapter, TGIInfo
from unillm_tgi.constraints import inline_refs
from unillm_tgi.responses import StopTrimmer, finish_reason

from unillm.adapter.base import EngineInfo
from unillm.adapter.launch_spec import LaunchSpec
from unillm.capabilities import Feature, check
from unillm.errors import (
    InvalidRequest,
    MalformedResponse,
    StreamInterrupted,
    UnknownLora,
    UnsupportedFeature,
)
from unillm.options import Choice, Grammar, JsonSchema, Regex, Request, make_request

ADAPTER = TGIAdapter(runtime="launcher", cache_dir="/cache")
INFO = tgi_info(max_model_len=128, max_input_tokens=64, max_best_of=2, max_stop_sequences=4)
CHAT = [{"role": "user", "content": "Hi"}]


def prompt(output: Any = None, *, stream: bool = False, **options: Any) -> Request:
    return make_request("Hi", None, output, options, stream=stream)


def chat(output: Any = None, *, stream: bool = False, **options: Any) -> Request:
    return make_request(None, CHAT, output, options, stream=stream)


def params(request: Request, info: EngineInfo = INFO) -> dict[str, Any]:
    call = ADAPTER.build(request, info)
    assert call.json is not None
    return dict(call.json["parameters"])


def check_and_build(request: Request, info: EngineInfo) -> None:
    """What the core does before sending: the capability check, then build."""
    check(ADAPTER.capabilities(info.version), request)
    ADAPTER.build(request, info)


def refused(request: Request, info: EngineInfo = INFO) -> UnsupportedFeature:
    with pytest.raises(UnsupportedFeature) as caught:
        check_and_build(request, info)
    return caught.value


# -- sampling ------------------------------------------------------------------------------------
def test_a_plain_prompt_samples_like_tgis_openai_routes() -> None:
    assert params(prompt()) == {"details": True, "do_sample": True}


def test_temperature_zero_is_greedy_without_temperature_or_warpers() -> None:
    # TGI rejects temperature 0, and samples whenever top_p/top_k are set
    assert params(prompt(temperature=0, top_p=0.5, top_k=4)) == {"details": True, "do_sample": False}


def test_a_temperature_above_zero_samples_with_it() -> None:
    assert params(prompt(temperature=0.7)) == {"details": True, "do_sample": True, "temperature": 0.7}


@pytest.mark.parametrize(
    ("options", "absent"), [({"top_p": 1.0}, "top_p"), ({"top_k": 0}, "top_k"), ({"top_k": -1}, "top_k")]
)
def test_no_filtering_values_are_left_out_because_tgi_rejects_them(
    options: dict[str, Any],
    absent: str,
) -> None:
    assert absent not in params(prompt(**options))


def test_chat_sends_temperature_zero_which_tgis_chat_reads_as_greedy() -> None:
    body = ADAPTER.build(chat(temperature=0, top_p=0.5), INFO).json
    assert body == {"model": "tgi", "messages": CHAT, "temperature": 0}


def test_logprobs_ask_for_top_n_tokens_and_details() -> None:
    assert params(prompt(top_logprobs=3))["top_n_tokens"] == 3
    assert "top_n_tokens" not in params(prompt(logprobs=True))


def test_lora_is_adapter_id_on_generate_and_model_on_chat() -> None:
    assert params(prompt(lora="sql"))["adapter_id"] == "sql"
    body = ADAPTER.build(chat(lora="sql"), INFO).json
    assert body is not None and body["model"] == "sql"
    assert (ADAPTER.build(chat(), INFO).json or {})["model"] == "tgi"  # TGI's "no adapter"


def test_n_becomes_best_of_on_generate() -> None:
    assert params(prompt(n=2, temperature=0.5))["best_of"] == 2


def test_extra_body_goes_into_generate_parameters() -> None:
    assert params(prompt(extra_body={"watermark": True}))["watermark"] is True


def test_chat_streams_ask_for_usage() -> None:
    body = ADAPTER.build(chat(stream=True), INFO).json
    assert body is not None and body["stream_options"] == {"include_usage": True}


# -- constraints ---------------------------------------------------------------------------------
def test_choice_is_an_escaped_alternation_matching_exactly_the_options() -> None:
    options = ["yes", "a.b", "(x)", "1+1", "a|b", "[x]", "\\", "$^", "{2}", "new\nline", ""]
    pattern = re.compile(Choice(options).as_regex())
    for o in options:
        assert pattern.fullmatch(o), o
    for other in ["aXb", "x", "11", "a", "b", "yes!", "2"]:
        assert not pattern.fullmatch(other), other


def test_choice_and_regex_become_regex_grammars() -> None:
    assert params(prompt(Choice(["yes", "no"])))["grammar"] == {"type": "regex", "value": "(yes|no)"}
    assert params(prompt(Regex(r"\d+")))["grammar"] == {"type": "regex", "value": r"\d+"}
    body = ADAPTER.build(chat(Regex("[ab]")), INFO).json
    assert body is not None and body["response_format"] == {"type": "regex", "value": "[ab]"}


class Leaf(BaseModel):
    v: int


class Tree(BaseModel):
    left: Leaf
    right: Optional[Leaf] = None  # noqa: UP045 (pydantic's anyOf + $ref shape)
    leaves: list[Leaf]


def test_inlined_schema_accepts_and_rejects_the_same_documents() -> None:
    original = Tree.model_json_schema()
    inlined = inline_refs(original)
    assert '"$ref"' not in json.dumps(inlined) and "$defs" not in inlined
    good = [{"left": {"v": 1}, "leaves": []}, {"left": {"v": 1}, "right": {"v": 2}, "leaves": [{"v": 3}]}]
    bad = [{"left": {"v": "x"}, "leaves": []}, {"left": {}, "leaves": []}, {"left": {"v": 1}}]
    for doc in good:
        jsonschema.validate(doc, original)
        jsonschema.validate(doc, inlined)
    for doc in bad:
        assert not jsonschema.Draft202012Validator(inlined).is_valid(doc)


def test_ref_siblings_merge_and_conflicting_keywords_use_allof() -> None:
    schema = {
        "properties": {
            "a": {"$ref": "#/$defs/N", "description": "an int"},
            "b": {"$ref": "#/$defs/N", "maximum": 5},
        },
        "$defs": {"N": {"type": "integer", "maximum": 10}},
    }
    out = inline_refs(schema)["properties"]
    assert out["a"] == {"type": "integer", "maximum": 10, "description": "an int"}
    assert out["b"] == {"allOf": [{"type": "integer", "maximum": 10}, {"maximum": 5}]}


class Node(BaseModel):
    value: int
    children: list[Node]


def test_recursive_schema_is_refused() -> None:
    e = refused(prompt(Node))
    assert "recursive" in e.feature and "regular expression" in e.why


def test_non_local_ref_is_refused() -> None:
    # make_request refuses it first (InvalidOptions); the adapter's own check, for a Request built by hand
    schema = {"type": "object", "properties": {"a": {"$ref": "https://example.com/a.json"}}}
    assert "non-local" in refused(dataclasses.replace(prompt(), output=JsonSchema(schema))).feature


def test_schema_without_top_level_properties_is_refused() -> None:
    e = refused(prompt({"type": "array", "items": {"type": "integer"}}))
    assert "properties" in e.feature and "Wrap" in e.alternative


@pytest.mark.parametrize("syntax", ["ebnf", "lark"])
def test_grammar_is_refused(syntax: Any) -> None:
    e = refused(prompt(Grammar('root ::= "a"', syntax=syntax)))
    assert e.engine == "tgi" and "Regex" in e.alternative


# -- refused before sending -------------------------------------------------------------------
@pytest.mark.parametrize(
    ("request_", "feature"),
    [
        (prompt(min_p=0.1), "min_p"),
        (prompt(priority=1), "priority="),
        (prompt(presence_penalty=0.5), "presence_penalty"),
        (chat(presence_penalty=0.5), "presence_penalty"),
        (chat(top_k=5), "top_k with chat"),
        (chat(repetition_penalty=1.1), "repetition_penalty with chat"),
        (chat(n=2), "n > 1 with chat"),
        (prompt(n=2, stream=True), "n > 1 with streaming"),
        (prompt(n=2, seed=1), "n > 1 with a seed"),
        (prompt(n=2, temperature=0), "n > 1 with temperature=0"),
        (prompt(n=3), "n=3"),
        (prompt(top_p=0), "top_p=0"),
        (prompt(repetition_penalty=0), "repetition_penalty=0"),
        (prompt(stop=["a", "b", "c", "d", "e"]), "5 stop strings"),
        (prompt(Regex("a"), seed=0), "seed=0 together with output=Regex"),
    ],
)
def test_options_tgi_cannot_honour_are_refused_before_sending(request_: Request, feature: str) -> None:
    e = refused(request_)
    assert feature in e.feature and e.engine == "tgi" and e.why


def test_greedy_with_top_p_zero_is_fine() -> None:
    assert params(prompt(temperature=0, top_p=0)) == {"details": True, "do_sample": False}


def test_stop_limit_follows_the_servers_max_stop_sequences() -> None:
    roomy = TGIInfo(engine="tgi", model="m", version="3.3.5", max_stop_sequences=8)
    assert len(params(prompt(stop=list("abcdef")), roomy)["stop"]) == 6


@pytest.mark.parametrize(
    ("version", "feature"),
    [
        ("1.3.4", Feature.CHAT),
        ("1.4.0", Feature.REGEX),
        ("2.0.4", Feature.LORA),
    ],
)
def test_features_are_gated_by_the_detected_version(version: str, feature: Feature) -> None:
    caps = ADAPTER.capabilities(version)
    assert not caps.supports(feature) and "Upgrade" in caps.support(feature).alternative
    assert ADAPTER.capabilities("3.3.5").supports(feature)


def test_chat_constraints_need_tgi_2_1() -> None:
    old = TGIInfo(engine="tgi", model="m", version="2.0.4")
    assert "output=" in refused(chat(Regex("a")), old).feature
    assert params(prompt(Regex("a")), old)["grammar"]["type"] == "regex"


def test_a_launched_tgi_refuses_lora_names_it_was_not_started_with() -> None:
    bound = ADAPTER.bind(LaunchSpec(model="m", lora={"sql": "/adapters/sql"}))
    assert bound.build(prompt(lora="sql"), INFO).json is not None
    with pytest.raises(UnknownLora, match="launched: sql"):
        bound.build(prompt(lora="poem"), INFO)
    with pytest.raises(UnknownLora, match="launched: none"):
        ADAPTER.bind(LaunchSpec(model="m")).build(chat(lora="sql"), INFO)
    assert ADAPTER.loras is None  # connected (unbound): TGI's own behaviour applies


def test_runtime_lora_calls_are_refused() -> None:
    with pytest.raises(UnsupportedFeature, match="only at launch"):
        ADAPTER.load_lora("sql", "/a")


# -- stop strings and finish reasons ------------------------------------------------------------
def test_finish_reasons_are_unified() -> None:
    assert [finish_reason(r) for r in ("length", "eos_token", "stop_sequence", "stop", "", None)] == [
        "length",
        "stop",
        "stop",
        "stop",
        None,
        None,
    ]


def test_stream_holds_back_a_possible_stop_string_and_drops_it_at_the_end() -> None:
    trim = StopTrimmer(["END"])
    sent = [trim.push(t) for t in ["Hello", " E", "N", "D"]]
    assert sent == ["Hello", " ", "", ""] and trim.finish(stopped=True) == ""


def test_stream_releases_held_text_that_did_not_become_a_stop_string() -> None:
    trim = StopTrimmer(["END"])
    assert [trim.push(t) for t in ["a E", "NX"]] == ["a ", "ENX"]
    assert trim.push("EN") == "" and trim.finish(stopped=False) == "EN"


# -- preflight (prompt length) ------------------------------------------------------------------
def test_short_prompts_are_never_tokenized() -> None:
    assert ADAPTER.preflight(prompt(max_tokens=8), INFO) is None
    roomy = TGIInfo(engine="tgi", model="m", max_model_len=4096, max_input_tokens=4095)
    assert ADAPTER.preflight(chat(max_tokens=8), roomy) is None  # chat: room for the template


def test_long_prompts_are_counted_and_refused_when_too_long() -> None:
    request = make_request("x" * 100, None, None, {}, stream=False)
    call = ADAPTER.preflight(request, INFO)
    assert call is not None and call.json == {"inputs": "x" * 100}
    answer = [{"id": 1, "text": "x", "start": i, "stop": i + 1} for i in range(100)]
    with pytest.raises(InvalidRequest, match="100 tokens; this server accepts at most 64"):
        ADAPTER.check_preflight(answer, request, INFO)
    ADAPTER.check_preflight(answer[:60], request, INFO)  # fits: no error


def test_prompt_plus_max_tokens_over_the_total_is_refused() -> None:
    request = make_request("x" * 60, None, None, {"max_tokens": 100}, stream=False)
    assert ADAPTER.preflight(request, INFO) is not None
    with pytest.raises(InvalidRequest, match="max_tokens=100"):
        ADAPTER.check_preflight([{}] * 60, request, INFO)


def test_preflight_is_skipped_without_limits_truncation_or_a_tokenizer() -> None:
    long = make_request("x" * 100, None, None, {}, stream=False)
    assert ADAPTER.preflight(long, EngineInfo(engine="tgi", model="m")) is None
    truncating = make_request("x" * 100, None, None, {"extra_body": {"truncate": 10}}, stream=False)
    assert ADAPTER.preflight(truncating, INFO) is None
    ADAPTER.check_preflight(None, long, INFO)  # /tokenize unavailable (404): TGI still validates


# -- discovery and malformed answers ------------------------------------------------------------
def test_info_that_is_not_tgis_is_a_clear_error() -> None:
    with pytest.raises(MalformedResponse, match="is this a TGI server"):
        ADAPTER.parse_info({"info": None}, None)


def test_legacy_max_input_length_is_read() -> None:
    info = ADAPTER.parse_info(
        {"info": {"model_id": "m", "version": "1.4.5", "max_input_length": 10, "max_total_tokens": 20}},
        "alias",
    )
    assert isinstance(info, TGIInfo) and (info.model, info.max_input_tokens) == ("alias", 10)


def test_a_stream_event_that_is_not_json_is_malformed() -> None:
    decoder = ADAPTER.decoder(prompt(stream=True), INFO)
    with pytest.raises(MalformedResponse):
        decoder.feed("not json")


def test_openai_stream_error_events_are_typed_by_their_message() -> None:
    decoder = ADAPTER.decoder(chat(stream=True), INFO)
    event = {"error": {"message": "Request failed during generation: boom", "http_status_code": 422}}
    with pytest.raises(Exception, match="424") as caught:
        decoder.feed(json.dumps(event))
    assert type(caught.value).__name__ == "EngineInternalError"
    assert not isinstance(caught.value, StreamInterrupted)


def test_setup_explains_how_to_get_tgi() -> None:
    with pytest.raises(UnsupportedFeature, match="docker or podman"):
        ADAPTER.install(gpu=True)
