"""Length-bounded strings as patterns for xgrammar: the same counts, no raw control character,
and only on plain strings (``unillm.adapter.schemas.xgrammar_strings``)."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from jsonschema import validators

from unillm.adapter.schemas import xgrammar_problem, xgrammar_strings
from unillm.adapter.schemas.walk import largest_count
from unillm.adapter.schemas.xgrammar import MAX_REPEAT


def accepts(schema: Any, value: Any) -> bool:
    return bool(validators.validator_for(schema)(schema).is_valid(value))


def test_a_max_length_becomes_a_pattern_with_the_same_count() -> None:
    assert xgrammar_strings({"type": "string", "maxLength": 8}) == {
        "type": "string",
        "pattern": '^(?:[^"\\\\\\x00-\\x1f\\u0800\\ud000-\\udfff\\u{10000}]'
        "|\\u0800|[\\ud000-\\ud7ff]|\\u{10000}){0,8}$",
    }


def test_a_code_point_escape_is_no_counted_repetition() -> None:
    assert largest_count("\\u{10000}a{3}") == 3 and largest_count("[\\u{10FFFF}]") == 0


def test_both_bounds_and_a_lone_min_length_keep_their_counts() -> None:
    assert xgrammar_strings({"type": "string", "minLength": 2, "maxLength": 5})["pattern"].endswith("{2,5}$")
    assert xgrammar_strings({"type": "string", "minLength": 3})["pattern"].endswith("{3,}$")


def test_nested_strings_are_rewritten_and_the_input_is_not_modified() -> None:
    schema = {
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 8},
            "tags": {"items": {"type": "string", "minLength": 1}},
        },
        "$defs": {"s": {"type": "string", "maxLength": 2}},
    }
    before = json.dumps(schema)
    out = xgrammar_strings(schema)
    assert json.dumps(schema) == before
    assert "pattern" in out["properties"]["name"] and "pattern" in out["properties"]["tags"]["items"]
    assert "pattern" in out["$defs"]["s"] and "maxLength" not in out["$defs"]["s"]


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "string"},  # no bounds: xgrammar's plain string is right
        {"type": "string", "maxLength": 3, "pattern": "^a+$"},  # xgrammar's own rules decide
        {"type": "string", "maxLength": 3, "format": "email"},
        {"type": "string", "maxLength": 3, "enum": ["ab"]},
        {"type": ["string", "null"], "maxLength": 3},  # the bound only binds strings
        {"maxLength": 3},
        {"type": "string", "maxLength": MAX_REPEAT + 1},  # a count xgrammar cannot compile
        {"type": "string", "maxLength": True},
        {"type": "string", "minLength": 4, "maxLength": 2},  # unsatisfiable
        {"const": {"type": "string", "maxLength": 3}},  # data, not a schema
    ],
)
def test_other_schemas_are_left_as_they_are(schema: dict[str, Any]) -> None:
    assert xgrammar_strings(schema) is schema


def test_the_rewritten_schema_passes_xgrammars_own_rules() -> None:
    schema = {
        "type": "object",
        "properties": {"a": {"type": "string", "minLength": 1, "maxLength": MAX_REPEAT}},
    }
    assert xgrammar_problem(xgrammar_strings(schema)) is None


@given(st.text(max_size=12), st.integers(0, 6), st.integers(0, 10))
def test_the_pattern_admits_what_the_bounds_do_less_quotes_backslashes_and_control_characters(
    text: str, low: int, high: int
) -> None:
    bounded = {"type": "string", "minLength": low, "maxLength": max(low, high)}
    pattern = dict(xgrammar_strings(bounded))
    pattern["pattern"] = pattern["pattern"].replace("\\u{10000}", "\\U00010000")  # Python's spelling
    plain_json = not re.search(r'["\\\x00-\x1f]', text)  # what xgrammar's bounded class emits, less control
    assert accepts(pattern, text) == (accepts(bounded, text) and plain_json)
