"""Exact schema rewrites accept exactly what the original accepts, and apply only where that holds."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from jsonschema import validators

from unillm.adapter.schemas import portable_schema, xgrammar_problem

INT_A = {"type": "object", "properties": {"a": {"type": "integer"}}}


def accepts(schema: Any, value: Any) -> bool:
    return validators.validator_for(schema)(schema).is_valid(value)


def test_all_of_with_disjoint_properties_and_required_is_merged_into_one_schema() -> None:
    schema = {"allOf": [INT_A, {"properties": {"b": {"type": "string"}}, "required": ["a", "b"]}]}
    assert portable_schema(schema) == {
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "string"}},
        "required": ["a", "b"],
    }


def test_keywords_beside_all_of_join_the_merge() -> None:
    schema = {"type": "object", "required": ["a"], "allOf": [INT_A]}
    assert portable_schema(schema) == {**INT_A, "required": ["a"]}


def test_merged_bounds_take_the_strictest_value() -> None:
    schema = {"allOf": [{"type": "string", "minLength": 2, "maxLength": 9}, {"minLength": 4, "maxLength": 6}]}
    assert portable_schema(schema) == {"type": "string", "minLength": 4, "maxLength": 6}


def test_merged_types_are_intersected() -> None:
    schema = {"allOf": [{"type": ["string", "null"]}, {"type": ["null", "integer"]}]}
    assert portable_schema(schema) == {"type": "null"}


@pytest.mark.parametrize(
    "schema",
    [
        {"allOf": [{"$ref": "#/$defs/x"}, INT_A], "$defs": {"x": {}}},  # a $ref's meaning is elsewhere
        {"allOf": [{**INT_A, "additionalProperties": False}, {"properties": {"b": {}}}]},  # per-branch
        {"allOf": [INT_A, {"patternProperties": {"^x": {}}}]},
        {"allOf": [INT_A, {"anyOf": [{"required": ["a"]}, {"required": ["b"]}]}]},
        {"allOf": [INT_A, {"properties": {"a": {"type": "string"}}}]},  # one name, two schemas
        {"allOf": [{"type": "string"}, {"type": "integer"}]},  # nothing validates: left as written
        {"allOf": [True, INT_A]},
    ],
)
def test_all_of_is_left_alone_where_a_merge_would_not_be_exact(schema: dict[str, Any]) -> None:
    assert len(portable_schema(schema)["allOf"]) == len(schema["allOf"])


def test_a_required_name_missing_from_properties_is_declared_with_what_additional_properties_says() -> None:
    schema = {"type": "object", "required": ["n"], "additionalProperties": {"type": "integer"}}
    assert portable_schema(schema)["properties"] == {"n": {"type": "integer"}}
    assert portable_schema({"type": "object", "required": ["n"]})["properties"] == {"n": {}}


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "object", "required": ["n"], "patternProperties": {"^n": {"type": "integer"}}},
        {"type": "object", "required": ["n"], "unevaluatedProperties": False},
        {"type": "object", "required": ["n"], "additionalProperties": False},  # no object passes
    ],
)
def test_a_missing_required_name_is_not_declared_where_other_keywords_could_apply_to_it(
    schema: dict[str, Any],
) -> None:
    assert portable_schema(schema) is schema


def test_min_items_above_prefix_items_gets_the_items_true_a_missing_items_means() -> None:
    schema = {"type": "array", "prefixItems": [{"type": "integer"}], "minItems": 2}
    assert portable_schema(schema) == {**schema, "items": True}
    assert xgrammar_problem(portable_schema(schema)) is None


def test_rewrites_reach_nested_schemas_but_not_data() -> None:
    inner = {"allOf": [INT_A, {"required": ["a"]}]}
    schema = {"type": "array", "items": inner, "default": [inner], "$defs": {"x": inner}}
    rewritten = portable_schema(schema)
    assert rewritten["items"] == rewritten["$defs"]["x"] == {**INT_A, "required": ["a"]}
    assert rewritten["default"] == [inner]


def test_the_input_is_never_modified() -> None:
    schema = {"allOf": [INT_A, {"required": ["a"]}]}
    snapshot = repr(schema)
    portable_schema(schema)
    assert repr(schema) == snapshot


def test_a_schema_with_nothing_to_rewrite_comes_back_as_the_same_object() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]}
    assert portable_schema(schema) is schema


VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 3) | st.sampled_from(["", "ab", "abcdefg"]),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(["a", "b", "c"]), inner, max_size=3)
    ),
    max_leaves=6,
)
SCHEMAS = [
    {"allOf": [INT_A, {"properties": {"b": {"type": "string"}}, "required": ["b"]}]},
    {"type": "object", "required": ["a"], "allOf": [INT_A, {"minProperties": 2}]},
    {"allOf": [{"type": ["string", "array"], "minLength": 2}, {"maxLength": 4, "maxItems": 1}]},
    {"type": "object", "required": ["c"], "additionalProperties": {"type": "integer"}},
    {"type": "array", "prefixItems": [{"type": "integer"}], "minItems": 2},
]


@pytest.mark.parametrize("schema", SCHEMAS)
@given(value=VALUES)
def test_the_rewritten_schema_accepts_exactly_what_the_original_accepts(
    schema: dict[str, Any], value: Any
) -> None:
    assert accepts(portable_schema(schema), value) == accepts(schema, value)
