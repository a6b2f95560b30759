"""JSON schemas vLLM's xgrammar backend cannot honour are found before sending, one rule each;
ordinary schemas pass, and only a server launched with xgrammar gets the check."""

from __future__ import annotations

import json
import os
import subprocess
from datetime import date
from enum import Enum
from pathlib import Path
from typing import Any, Literal

import pytest
from pydantic import BaseModel, Field
from unillm_vllm import VLLMAdapter
from unillm_vllm.launch import command, cpu_recipe, structured_settings

from unillm.adapter.base import EngineInfo
from unillm.adapter.launch_spec import LaunchSpec
from unillm.adapter.schemas import closed_schema, xgrammar_problem
from unillm.errors import InvalidOptions, UnsupportedFeature
from unillm.options import JsonSchema

INFO = EngineInfo(engine="vllm", model="m", version="0.32.0")
OBJ = {"type": "object"}


FLAG = "--structured-outputs-config"
X, G = '{"backend":"xgrammar"}', '{"backend":"guidance"}'


def where(schema: dict[str, Any]) -> tuple[str, str] | None:
    problem = xgrammar_problem(schema)
    return None if problem is None else (problem.keyword, problem.pointer)


# -- vLLM's own check (has_xgrammar_unsupported_json_features) -----------------------------
def test_multiple_of_on_a_number_is_refused() -> None:
    assert where({"type": "number", "multipleOf": 0.5}) == ("multipleOf", "/multipleOf")


def test_multiple_of_on_an_integer_in_a_type_list_is_refused() -> None:
    assert where({"type": ["integer", "null"], "multipleOf": 2}) == ("multipleOf", "/multipleOf")


@pytest.mark.parametrize("keyword", ["uniqueItems", "contains", "minContains", "maxContains"])
def test_array_keywords_xgrammar_lacks_are_refused(keyword: str) -> None:
    schema = {"type": "array", "items": {"type": "integer"}, keyword: True}
    assert where(schema) == (keyword, f"/{keyword}")


def test_an_unknown_string_format_is_refused() -> None:
    assert where({"type": "string", "format": "color"}) == ("format", "/format")


def test_a_known_string_format_passes() -> None:
    assert where({"type": "string", "format": "date-time"}) is None


@pytest.mark.parametrize("quantifier", ["{129}", "{129,}", "{1,255}", "{2,300}"])
def test_a_counted_repetition_above_128_in_a_pattern_is_refused(quantifier: str) -> None:
    assert where({"type": "string", "pattern": f"^[a-z]{quantifier}$"}) == ("pattern", "/pattern")


def test_a_counted_repetition_above_128_in_a_pattern_properties_name_is_refused_at_that_name() -> None:
    schema = {"type": "object", "patternProperties": {"^a/{1,255}$": {}}, "additionalProperties": False}
    assert where(schema) == ("patternProperties", "/patternProperties/^a~1{1,255}$")


@pytest.mark.parametrize("pattern", ["^a{1,128}$", r"^\{1,255\}$", "^[{]300}$", "^a{,300}$"])
def test_counts_up_to_128_and_braces_that_are_not_counts_pass(pattern: str) -> None:
    assert where({"type": "string", "pattern": pattern}) is None


@pytest.mark.parametrize(
    "branches",
    [
        [{"type": "integer"}, {"type": "number"}],
        [{"type": "string"}, {"type": ["string", "null"]}],
        [{"type": "string"}, {"description": "anything"}],
        [True, {"type": "object"}],
    ],
)
def test_one_of_with_two_type_only_branches_that_overlap_is_refused(branches: list[Any]) -> None:
    assert where({"oneOf": branches}) == ("oneOf", "/oneOf/1")


@pytest.mark.parametrize(
    "branches",
    [
        [{"type": "integer"}, {"type": "string"}, {"type": "null"}],
        [{"type": "object", "properties": {"a": {}}, "required": ["a"]}, {"type": "object"}],
    ],
)
def test_one_of_with_disjoint_or_constrained_branches_passes(branches: list[Any]) -> None:
    assert where({"oneOf": branches}) is None


def test_a_length_bound_beside_a_pattern_is_refused() -> None:
    assert where({"type": "string", "pattern": "^a+$", "maxLength": 5}) == ("maxLength", "/maxLength")


def test_a_length_bound_beside_a_format_is_refused() -> None:
    assert where({"type": "string", "format": "email", "minLength": 3}) == ("minLength", "/minLength")


def test_property_names_with_a_bounded_pattern_are_refused() -> None:
    schema = {"type": "object", "propertyNames": {"pattern": "^a", "maxLength": 3}}
    assert where(schema) == ("propertyNames", "/propertyNames")


@pytest.mark.parametrize(
    "beside",
    [
        {"patternProperties": {"^a": {}}},
        {"properties": {"a": {}}},
        {"unevaluatedProperties": False},
    ],
)
def test_property_names_beside_what_xgrammar_cannot_combine_are_refused(beside: dict[str, Any]) -> None:
    schema = {"type": "object", "propertyNames": {"pattern": "^a"}, **beside}
    assert where(schema) == ("propertyNames", "/propertyNames")


def test_pattern_properties_beside_properties_are_refused() -> None:
    schema = {"type": "object", "properties": {"a": {}}, "patternProperties": {"^b": {}}}
    assert where(schema) == ("patternProperties", "/patternProperties")


def test_several_pattern_properties_are_refused() -> None:
    schema = {"type": "object", "patternProperties": {"^a": {}, "^b": {}}}
    assert where(schema) == ("patternProperties", "/patternProperties")


def test_all_of_with_two_branches_is_refused() -> None:
    assert where({"allOf": [{"type": "string"}, {"enum": ["yes", "no"]}]}) == ("allOf", "/allOf")


def test_a_nested_problem_is_located_by_its_json_pointer() -> None:
    schema = {
        "type": "object",
        "properties": {"a/b": {"type": "array", "items": [{"type": "integer", "multipleOf": 3}]}},
    }
    assert where(schema) == ("multipleOf", "/properties/a~1b/items/0/multipleOf")


def test_vllms_check_also_looks_inside_defaults_as_vllm_does() -> None:
    schema = {"type": "object", "default": {"type": "number", "multipleOf": 2}}
    assert where(schema) == ("multipleOf", "/default/multipleOf")


# -- compiled wrongly or failing inside xgrammar -----------------------------------------------
def test_required_without_properties_is_refused() -> None:
    assert where({"type": "object", "required": ["a"]}) == ("required", "/required/0")


def test_a_required_name_missing_from_properties_is_refused() -> None:
    schema = {"type": "object", "properties": {"x": {}}, "required": ["x", "y"]}
    assert where(schema) == ("required", "/required/1")


@pytest.mark.parametrize("combinator", ["oneOf", "anyOf"])
def test_a_combinator_beside_top_level_properties_is_refused(combinator: str) -> None:
    schema = {
        "type": "object",
        "properties": {"x": {"type": "integer"}},
        "required": ["x"],
        combinator: [{"properties": {"a": {}}}, {"properties": {"b": {}}}],
    }
    assert where(schema) == (combinator, f"/{combinator}")


def test_a_single_all_of_beside_properties_is_refused() -> None:
    schema = {"type": "object", "properties": {"x": {}}, "allOf": [OBJ]}
    assert where(schema) == ("allOf", "/allOf")


def test_min_items_without_items_is_refused() -> None:
    assert where({"type": "array", "minItems": 1}) == ("minItems", "/minItems")


def test_min_items_within_prefix_items_passes() -> None:
    assert where({"type": "array", "prefixItems": [OBJ, OBJ], "minItems": 2}) is None


def test_min_items_with_items_passes() -> None:
    assert where({"type": "array", "items": True, "minItems": 1}) is None


@pytest.mark.parametrize(
    ("combinator", "beside"),
    [
        ("anyOf", {"type": "string", "maxLength": 3}),
        ("anyOf", {"minimum": 5}),
        ("anyOf", {"items": {"type": "integer"}}),
        ("anyOf", {"additionalProperties": False}),
        ("anyOf", {"enum": [1, "a"]}),
        ("anyOf", {"oneOf": [OBJ]}),
        ("oneOf", {"type": "integer"}),
        ("allOf", {"minimum": 5}),
    ],
)
def test_a_combinator_beside_a_constraining_keyword_is_refused(
    combinator: str, beside: dict[str, Any]
) -> None:
    schema = {**beside, combinator: [{"type": "string"}]}
    assert where(schema) == (combinator, f"/{combinator}")


def test_a_combinator_beside_annotations_only_passes() -> None:
    schema = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "t",
        "description": "d",
        "default": 1,
        "examples": [1],
        "$defs": {"a": OBJ},
        "anyOf": [{"type": "integer"}, {"type": "null"}],
    }
    assert where(schema) is None


@pytest.mark.parametrize("beside", [{"minimum": 5}, {"enum": ["x"]}, {"required": []}, {"type": "string"}])
def test_a_ref_beside_a_constraining_keyword_is_refused(beside: dict[str, Any]) -> None:
    schema = {"type": "object", "properties": {"p": {"$ref": "#/$defs/a", **beside}}, "$defs": {"a": OBJ}}
    assert where(schema) == ("$ref", "/properties/p/$ref")


def test_a_ref_beside_annotations_only_passes() -> None:
    schema = {"$ref": "#/$defs/a", "title": "t", "description": "d", "default": 1, "$defs": {"a": OBJ}}
    assert where(schema) is None


def test_not_is_refused() -> None:
    assert where({"type": "integer", "not": {"const": 1}}) == ("not", "/not")


@pytest.mark.parametrize("branch", ["then", "else"])
def test_if_with_then_or_else_is_refused(branch: str) -> None:
    assert where({"type": "integer", "if": {"minimum": 5}, branch: {"maximum": 6}}) == ("if", "/if")


def test_then_without_if_passes_as_json_schema_ignores_it_too() -> None:
    assert where({"type": "integer", "then": {"maximum": 2}}) is None


def test_properties_named_like_keywords_are_not_read_as_keywords() -> None:
    schema = {"type": "object", "properties": {"not": {"type": "string"}, "if": {}, "then": {}}}
    assert where(schema) is None


@pytest.mark.parametrize("pattern", ["^(?!x-).*$", "^a(?=b)", "^(?<=a)b$", "^(?<!a)b$", "\\\\(?=b)"])
def test_a_pattern_with_a_lookaround_is_refused(pattern: str) -> None:
    schema = {"type": "object", "properties": {"p": {"type": "string", "pattern": pattern}}}
    assert where(schema) == ("pattern", "/properties/p/pattern")


@pytest.mark.parametrize("pattern", ["^\\(?!a$", "^[(?!]+$", "^[^](?=]$", "(?<name>a)", "(?:a)"])
def test_a_pattern_with_only_lookalikes_of_a_lookaround_passes(pattern: str) -> None:
    assert where({"type": "string", "pattern": pattern}) is None


def test_data_values_are_not_read_as_schemas_by_the_wrong_compile_rules() -> None:
    schema = {"type": "object", "properties": {"a": {}}, "default": {"required": ["zzz"]}}
    assert where(schema) is None


# -- ordinary schemas pass -------------------------------------------------------------------
class Colour(str, Enum):
    RED = "red"
    BLUE = "blue"


class Address(BaseModel):
    city: str
    zip_code: str | None = None


class Person(BaseModel):
    name: str = Field(min_length=1, max_length=40)
    age: int = Field(ge=0, le=150)
    born: date
    colour: Colour
    tags: list[str] = []
    address: Address
    kind: Literal["a", "b"] = "a"
    scores: dict[str, float] = {}


class Answer(BaseModel):
    value: int = Field(ge=0, le=100)


class Cat(BaseModel):
    pet: Literal["cat"]
    lives: int


class Dog(BaseModel):
    pet: Literal["dog"]
    bark: bool


class Owner(BaseModel):
    animal: Cat | Dog = Field(discriminator="pet")


@pytest.mark.parametrize(
    "schema",
    [
        OBJ,
        {"type": "array"},
        {"type": "object", "properties": {"n": {"type": "integer"}}},
        {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
        {"type": "string", "pattern": "^[a-z]+$"},
        {"type": "string", "minLength": 2, "maxLength": 4},
        {"type": "object", "patternProperties": {"^a": {"type": "string"}}},
        {"allOf": [{"type": "string"}]},
        {"anyOf": [{"type": "integer"}, {"type": "null"}]},
        Person.model_json_schema(),
        Answer.model_json_schema(),
        Owner.model_json_schema(),
    ],
)
def test_schemas_vllm_accepts_are_not_refused(schema: dict[str, Any]) -> None:
    assert xgrammar_problem(schema) is None


# -- which backend: the launch arguments ------------------------------------------------------
@pytest.mark.parametrize(
    ("args", "backend"),
    [
        ([], "auto"),
        (["--structured-outputs-config", '{"backend":"xgrammar"}'], "xgrammar"),
        (['--structured-outputs-config={"backend":"guidance"}'], "guidance"),
        (["--structured-outputs-config", '{"disable_any_whitespace":true}'], "auto"),
        (
            [FLAG, X, FLAG, G],
            "guidance",
        ),
        ([f"{FLAG}.backend", "outlines"], "outlines"),
        ([f"{FLAG}.backend", '"guidance"'], "guidance"),
        (
            [f"{FLAG}.backend=guidance", FLAG, X],
            "guidance",
        ),
        (
            [FLAG, X, f"{FLAG}.disable_any_whitespace=true"],
            "auto",
        ),
    ],
)
def test_the_backend_is_read_the_way_vllm_parses_its_arguments(args: list[str], backend: str) -> None:
    assert structured_settings(LaunchSpec(model="/m", extra_args=args))[0] == backend


def test_the_cpu_recipe_picks_guidance_with_compact_json(tmp_path: Any) -> None:
    spec = LaunchSpec(model="/m", **cpu_recipe(LaunchSpec(model="/m"), tmp_path).settings)
    assert structured_settings(spec) == ("guidance", True, True)
    config = command(spec).argv[command(spec).argv.index(FLAG) + 1]
    assert json.loads(config) == {
        "backend": "guidance",
        "disable_additional_properties": True,  # objects closed, as xgrammar's strict mode
        "disable_any_whitespace": True,
    }


def test_the_settings_and_the_flag_in_extra_args_together_are_refused() -> None:
    spec = LaunchSpec(model="/m", structured_backend="xgrammar", extra_args=[FLAG, G])
    with pytest.raises(InvalidOptions, match="not both"):
        command(spec)


# -- the adapter -----------------------------------------------------------------------------
BAD = {"type": "array", "items": {"type": "integer"}, "uniqueItems": True}


def test_a_server_launched_with_xgrammar_refuses_the_schema_naming_keyword_place_and_alternative(
    tmp_path: Any,
) -> None:
    spec = LaunchSpec(model="/m", structured_backend="xgrammar", compact_json=True)
    with pytest.raises(UnsupportedFeature) as caught:
        VLLMAdapter().bind(spec).constraint_fields(JsonSchema(BAD), INFO)
    message = str(caught.value)
    assert "'uniqueItems' at /uniqueItems" in message
    assert "xgrammar" in message
    assert "guidance" in message and "validate the answer yourself" in message


def test_a_connected_server_gets_the_schema_as_vllms_auto_falls_back_to_guidance() -> None:
    body = VLLMAdapter().constraint_fields(JsonSchema(BAD), INFO)
    assert body == {"structured_outputs": {"json": BAD}}


STEPS = {"type": "integer", "multipleOf": 5}  # xgrammar ignores multipleOf; llguidance does it


def test_a_server_launched_with_guidance_gets_a_schema_llguidance_compiles() -> None:
    args = ["--structured-outputs-config", '{"backend":"guidance"}']
    adapter = VLLMAdapter().bind(LaunchSpec(model="/m", extra_args=args))
    assert adapter.constraint_fields(JsonSchema(STEPS), INFO) == {"structured_outputs": {"json": STEPS}}


def test_a_server_launched_with_guidance_refuses_what_llguidance_does_not_implement() -> None:
    adapter = VLLMAdapter().bind(LaunchSpec(model="/m", structured_backend="guidance"))
    with pytest.raises(UnsupportedFeature) as caught:
        adapter.constraint_fields(JsonSchema(BAD), INFO)
    assert "'uniqueItems' at /uniqueItems" in str(caught.value) and "backend is guidance" in str(caught.value)
    assert "structured_backend='xgrammar'" in str(caught.value)


def test_auto_sends_what_vllm_reroutes_to_guidance_when_llguidance_compiles_it() -> None:
    adapter = VLLMAdapter().bind(LaunchSpec(model="/m", structured_backend="auto"))
    assert adapter.constraint_fields(JsonSchema(STEPS), INFO) == {"structured_outputs": {"json": STEPS}}


def test_auto_refuses_what_xgrammar_would_compile_wrongly_naming_guidance() -> None:
    adapter = VLLMAdapter().bind(LaunchSpec(model="/m", structured_backend="auto"))
    schema = {"type": "object", "properties": {"a": {}}, "not": {"required": ["a"]}}
    with pytest.raises(UnsupportedFeature) as caught:
        adapter.constraint_fields(JsonSchema(schema), INFO)
    assert "xgrammar (vLLM's auto chose it)" in str(caught.value)
    assert "structured_backend='guidance'" in str(caught.value)


def test_xgrammar_gets_an_all_of_merged_exactly_instead_of_a_refusal() -> None:
    adapter = VLLMAdapter().bind(LaunchSpec(model="/m", structured_backend="xgrammar"))
    schema = {"allOf": [{"type": "object", "properties": {"a": {"type": "integer"}}}, {"required": ["a"]}]}
    body = adapter.constraint_fields(JsonSchema(schema), INFO)
    merged = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    assert body == {"structured_outputs": {"json": merged}}


def test_compact_json_on_a_backend_vllm_cannot_make_compact_is_refused_before_starting() -> None:
    with pytest.raises(UnsupportedFeature, match="only on the xgrammar and guidance backends"):
        command(LaunchSpec(model="/m", structured_backend="auto", compact_json=True))


def test_the_cpu_recipe_leaves_json_spaced_when_the_caller_picks_auto(tmp_path: Any) -> None:
    recipe = cpu_recipe(LaunchSpec(model="/m", structured_backend="auto"), tmp_path)
    assert "compact_json" not in recipe.settings


def test_auto_refuses_what_vllm_would_hand_to_outlines_naming_the_pattern_properties() -> None:
    adapter = VLLMAdapter().bind(LaunchSpec(model="/m", structured_backend="auto"))
    schema = {
        "type": "object",
        "properties": {"tags": {"type": "array", "uniqueItems": True}},
        "$defs": {"m": {"type": "object", "patternProperties": {"^x": {}}}},
    }
    with pytest.raises(UnsupportedFeature) as caught:
        adapter.constraint_fields(JsonSchema(schema), INFO)
    assert "'patternProperties' at /$defs/m/patternProperties" in str(caught.value)
    assert "outlines" in str(caught.value) and "structured_backend='guidance'" in str(caught.value)


# -- guidance: vLLM's request check reads the schema as sent (objects open) -------------------
# The shapes of the two JSONSchemaBench schemas vLLM answered with HTTP 400 on the CPU recipe
# (Github_trivial/o63308, GeoJSON: a branch's "emum" typo leaves its "type" any string; and
# JsonSchemaStore/ubuntu-server-autoinstall's "network"): oneOf branches that overlap while
# objects are open, though disjoint once disable_additional_properties closes them.
GEO_ONE_OF = {
    "oneOf": [
        {
            "type": "object",
            "properties": {"type": {"enum": ["Point"]}, "coordinates": {"type": "array"}},
            "required": ["type", "coordinates"],
        },
        {
            "type": "object",
            "properties": {"type": {"type": "string", "emum": ["GeometryCollection"]}, "geometries": {}},
            "required": ["type", "geometries"],
        },
    ]
}
NETWORK_ONE_OF = {
    "type": "object",
    "properties": {
        "network": {
            "oneOf": [
                {"type": "object", "properties": {"version": {"type": "integer"}}, "required": ["version"]},
                {"type": "object", "properties": {"network": {"type": "object"}}, "required": ["network"]},
            ]
        }
    },
}
TAGGED_ONE_OF = {
    "oneOf": [
        {"type": "object", "properties": {"kind": {"const": "a"}}, "required": ["kind"]},
        {"type": "object", "properties": {"kind": {"const": "b"}}, "required": ["kind"]},
    ]
}


def cpu_recipe_adapter() -> VLLMAdapter:
    """Bound as the CPU recipe launches vLLM: guidance, compact JSON, objects closed."""
    adapter = VLLMAdapter().bind(LaunchSpec(model="/m", structured_backend="guidance", compact_json=True))
    assert adapter.closed_objects
    return adapter


@pytest.mark.parametrize(
    ("schema", "pointer"), [(GEO_ONE_OF, "/oneOf"), (NETWORK_ONE_OF, "/properties/network/oneOf")]
)
def test_guidance_refuses_a_one_of_vllm_checks_with_objects_open(
    schema: dict[str, Any], pointer: str
) -> None:
    with pytest.raises(UnsupportedFeature) as caught:
        cpu_recipe_adapter().constraint_fields(JsonSchema(schema), INFO)
    message = str(caught.value)
    assert f"'oneOf' at {pointer}" in message and "backend is guidance" in message
    assert "objects still open" in message and '"anyOf" in place of "oneOf"' in message


@pytest.mark.parametrize(
    "schema",
    [
        {"oneOf": [{"type": "string"}, {"type": "integer"}]},
        TAGGED_ONE_OF,
        closed_schema(GEO_ONE_OF),  # the way out the refusal names: branches closed by the caller
        {"anyOf": GEO_ONE_OF["oneOf"]},  # the other way out
    ],
)
def test_guidance_sends_a_one_of_llguidance_accepts(schema: dict[str, Any]) -> None:
    body = cpu_recipe_adapter().constraint_fields(JsonSchema(schema), INFO)
    assert body == {"structured_outputs": {"json": schema}}


def test_auto_refuses_a_one_of_vllm_hands_to_guidance_with_objects_open() -> None:
    schema = {**GEO_ONE_OF, "$defs": {"s": {"type": "array", "uniqueItems": True}}}  # xgrammar refuses
    adapter = VLLMAdapter().bind(LaunchSpec(model="/m", structured_backend="auto"))
    with pytest.raises(UnsupportedFeature, match="'oneOf' at /oneOf"):
        adapter.constraint_fields(JsonSchema(schema), INFO)


def jsonschemabench() -> Path:
    return Path(os.environ.get("UNILLM_JSONSCHEMABENCH") or Path.home() / ".cache/unillm/jsonschemabench")


@pytest.mark.parametrize(
    "name", ["Github_trivial/o63308.json", "JsonSchemaStore/ubuntu-server-autoinstall.json"]
)
def test_the_two_jsonschemabench_one_of_schemas_are_refused_before_sending(name: str) -> None:
    path = jsonschemabench() / "data" / name
    if not path.exists():
        pytest.skip(
            f"no JSONSchemaBench checkout at {jsonschemabench()} (see benchmarks/structured_coverage.py)"
        )
    with pytest.raises(UnsupportedFeature, match="'oneOf' at /"):
        cpu_recipe_adapter().constraint_fields(JsonSchema(json.loads(path.read_text())), INFO)


# vLLM's own request check (validate_guidance_grammar, what answers HTTP 400 before the backend
# sees a request), run in vLLM's managed env: a check, no server.
VLLM_GUIDANCE_CHECK = """
import json, sys
from vllm.sampling_params import SamplingParams, StructuredOutputsParams
from vllm.v1.structured_output.backend_guidance import validate_guidance_grammar
out = []
for schema in json.loads(sys.argv[1]):
    try:
        validate_guidance_grammar(SamplingParams(structured_outputs=StructuredOutputsParams(json=schema)))
        out.append(True)
    except Exception:
        out.append(False)
print(json.dumps(out))
"""
ONE_OFS: list[dict[str, Any]] = [
    GEO_ONE_OF,
    NETWORK_ONE_OF,
    TAGGED_ONE_OF,
    closed_schema(GEO_ONE_OF),
    closed_schema(NETWORK_ONE_OF),
    {"anyOf": GEO_ONE_OF["oneOf"]},
    {"oneOf": [{"type": "string"}, {"type": "integer"}]},
    {"oneOf": [{"type": "integer"}, {"type": "number"}]},
    {"oneOf": [{"type": "string"}, {}]},
]


def sent_on_the_cpu_recipe(schema: dict[str, Any]) -> bool:
    try:
        cpu_recipe_adapter().constraint_fields(JsonSchema(schema), INFO)
    except UnsupportedFeature:
        return False
    return True


@pytest.mark.engine
def test_the_guidance_one_of_check_agrees_with_vllms_request_check() -> None:
    python = Path.home() / ".cache/unillm/envs/vllm/bin/python"
    run = subprocess.run(
        [str(python), "-c", VLLM_GUIDANCE_CHECK, json.dumps(ONE_OFS)],
        capture_output=True,
        text=True,
        check=True,
    )
    vllm_accepts = json.loads(run.stdout.strip().splitlines()[-1])
    assert vllm_accepts == [sent_on_the_cpu_recipe(schema) for schema in ONE_OFS]
    assert vllm_accepts[:2] == [False, False] and all(vllm_accepts[2:7])
