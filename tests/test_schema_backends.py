"""Each engine knows its constrained-decoding backend at launch and refuses, before sending, the
schemas that backend cannot honour; the backend is a launch setting, refused where there is none."""

from __future__ import annotations

import json
from typing import Any

import pytest

from unillm.adapter.base import EngineInfo
from unillm.adapter.launch_spec import LaunchSpec
from unillm.adapter.registry import get_adapter
from unillm.adapter.schemas import closed_schema, guidance_available, guidance_problem, schema_refusal
from unillm.errors import UnsupportedFeature
from unillm.launching.supervisor import check_launch_features
from unillm.options import JsonSchema, make_request

UNIQUE = {"type": "array", "items": {"type": "integer"}, "uniqueItems": True}
STEPS = {"type": "object", "properties": {"n": {"type": "integer", "multipleOf": 5}}}

needs_llguidance = pytest.mark.skipif(not guidance_available(), reason="llguidance is not installed here")


def built(engine: str, spec: LaunchSpec, schema: dict[str, Any]) -> Any:
    adapter = get_adapter(engine).bind(spec)
    info = EngineInfo(engine=engine, model="m", version="0.5.23")
    request = make_request("x", None, JsonSchema(schema), {"max_tokens": 4}, stream=False)
    return adapter.build(request, info).json


@needs_llguidance
def test_llguidance_names_the_keyword_it_does_not_implement_and_where_it_is() -> None:
    problem = guidance_problem({"type": "object", "properties": {"xs": UNIQUE}}, compact=True)
    assert problem is not None
    assert (problem.keyword, problem.pointer) == ("uniqueItems", "/properties/xs/uniqueItems")


@needs_llguidance
def test_llguidance_passes_what_it_compiles() -> None:
    assert guidance_problem(STEPS, compact=True) is None
    assert guidance_problem(STEPS, compact=False) is None


@needs_llguidance
def test_an_unknown_format_is_an_llguidance_problem() -> None:
    problem = guidance_problem({"type": "string", "format": "no-such-format"}, compact=True)
    assert problem is not None and "no-such-format" in problem.why


def test_a_schema_that_is_not_json_is_a_problem_not_a_crash() -> None:
    problem = guidance_problem({"type": "object", "default": object()}, compact=True)
    assert problem is not None and problem.keyword == "schema"


def test_the_refusal_names_engine_keyword_place_backend_and_alternative() -> None:
    problem = guidance_problem(UNIQUE, compact=True) if guidance_available() else None
    if problem is None:
        pytest.skip("llguidance is not installed here")
    message = str(schema_refusal("sglang", "llguidance", problem, alternative="Use X", version="0.5"))
    assert "sglang 0.5" in message and "'uniqueItems' at /uniqueItems" in message
    assert "llguidance" in message and "Use X" in message


def test_sglang_launched_with_xgrammar_refuses_what_xgrammar_ignores_before_sending() -> None:
    with pytest.raises(
        UnsupportedFeature, match=r"'uniqueItems' at /uniqueItems.*structured_backend='llguidance'"
    ):
        built("sglang", LaunchSpec(model="/m"), UNIQUE)


def test_sglang_sends_the_exactly_rewritten_schema_to_xgrammar() -> None:
    schema = {"allOf": [{"type": "object", "properties": {"a": {"type": "integer"}}}, {"required": ["a"]}]}
    body = built("sglang", LaunchSpec(model="/m"), schema)
    sent = body["response_format"]["json_schema"]["schema"] if "response_format" in body else body
    assert "allOf" not in str(sent) and "required" in str(sent)


@needs_llguidance
def test_sglang_launched_with_llguidance_sends_what_llguidance_compiles() -> None:
    body = built("sglang", LaunchSpec(model="/m", structured_backend="llguidance"), STEPS)
    assert "multipleOf" in str(body)


BOUNDED = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 8}}}


def connected_body(schema: dict[str, Any], server_info: dict[str, Any] | None) -> Any:
    """What a connected SGLang adapter (no launch) sends, having discovered ``server_info``."""
    adapter = get_adapter("sglang")
    answers = {"model_info": {"model_path": "m"}, "server_info": server_info, "models": None}
    info = adapter.parse_info(answers, None)
    request = make_request("x", None, JsonSchema(schema), {"max_tokens": 4}, stream=False)
    return adapter.build(request, info).json


def test_a_connected_sglang_of_unknown_backend_refuses_nothing_but_bounds_strings_as_json() -> None:
    assert "uniqueItems" in str(connected_body(UNIQUE, None))
    sent = connected_body(BOUNDED, None)["response_format"]["json_schema"]["schema"]
    assert "maxLength" not in str(sent) and "pattern" in sent["properties"]["name"]


def test_a_connected_sglang_checks_against_the_backend_its_server_info_names() -> None:
    with pytest.raises(UnsupportedFeature, match=r"'uniqueItems' at /uniqueItems"):
        connected_body(UNIQUE, {"version": "0.5.23", "grammar_backend": "xgrammar"})
    sent = connected_body(BOUNDED, {"version": "0.5.23", "grammar_backend": "xgrammar"})
    assert "pattern" in sent["response_format"]["json_schema"]["schema"]["properties"]["name"]


def test_a_connected_sglang_on_outlines_sends_the_schema_as_it_is() -> None:
    body = connected_body(BOUNDED, {"version": "0.5.23", "grammar_backend": "outlines"})
    assert body["response_format"]["json_schema"]["schema"] == BOUNDED


def test_the_vllm_backend_settings_become_one_structured_outputs_config() -> None:
    spec = LaunchSpec(model="/m", structured_backend="guidance", compact_json=True)
    argv = get_adapter("vllm").command(spec).argv
    config = argv[argv.index("--structured-outputs-config") + 1]
    assert json.loads(config) == {
        "backend": "guidance",
        "disable_additional_properties": True,
        "disable_any_whitespace": True,
    }


def test_the_sglang_backend_settings_become_its_flags() -> None:
    spec = LaunchSpec(model="/m", structured_backend="llguidance", compact_json=True)
    argv = get_adapter("sglang").command(spec).argv
    assert argv[argv.index("--grammar-backend") + 1] == "llguidance"
    assert "--constrained-json-disable-any-whitespace" in argv


@pytest.mark.parametrize("engine", ["llamacpp", "tgi", "mlx"])
def test_engines_without_a_backend_setting_refuse_it_before_starting(engine: str) -> None:
    with pytest.raises(UnsupportedFeature, match="structured_backend"):
        check_launch_features(get_adapter(engine), LaunchSpec(model="/m", structured_backend="xgrammar"))
    with pytest.raises(UnsupportedFeature, match="compact_json"):
        check_launch_features(get_adapter(engine), LaunchSpec(model="/m", compact_json=True))


def test_an_unknown_backend_name_is_refused_naming_the_engines_choices() -> None:
    with pytest.raises(UnsupportedFeature, match="auto, xgrammar, guidance"):
        check_launch_features(get_adapter("vllm"), LaunchSpec(model="/m", structured_backend="llguidance"))


def test_closing_a_schema_forbids_undeclared_keys_where_it_said_nothing_and_nowhere_else() -> None:
    schema = {
        "type": "object",
        "properties": {"inner": {"type": "object", "properties": {"x": {}}}, "free": {"type": "object"}},
        "items": [{"properties": {}}],
        "$defs": {"open": {"properties": {}, "additionalProperties": True}},
        "default": {"properties": {}},
    }
    closed = closed_schema(schema)
    assert closed["additionalProperties"] is False
    assert closed["properties"]["inner"]["additionalProperties"] is False
    assert "additionalProperties" not in closed["properties"]["free"]  # no properties: left open
    assert closed["items"][0]["additionalProperties"] is False
    assert closed["$defs"]["open"]["additionalProperties"] is True  # said: kept
    assert closed["default"] == {"properties": {}}  # data, not a schema
    assert "additionalProperties" not in schema  # the input is not modified


@needs_llguidance
def test_guidance_checks_a_schema_closed_as_the_server_will_close_it() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    assert guidance_problem(schema, compact=True, closed=True) is None
