"""What constrained-decoding tests hold an engine's answers to: JSON schemas (nested objects,
bounded arrays, enums, bounded integers) and a small sum grammar. With random weights, an answer
that follows one shows the engine enforced the constraint."""

from __future__ import annotations

import re
from typing import Any

CONSTRAINT_SCHEMAS: dict[str, dict[str, Any]] = {
    "nested": {
        "type": "object",
        "properties": {
            "user": {
                "type": "object",
                "properties": {
                    "name": {"type": "string", "maxLength": 8},
                    "address": {
                        "type": "object",
                        "properties": {"zip": {"type": "string", "pattern": "^[0-9]{5}$"}},
                        "required": ["zip"],
                        "additionalProperties": False,
                    },
                },
                "required": ["name", "address"],
                "additionalProperties": False,
            }
        },
        "required": ["user"],
        "additionalProperties": False,
    },
    "arrays": {
        "type": "object",
        "properties": {
            "tags": {
                "type": "array",
                "items": {"type": "string", "maxLength": 5},
                "minItems": 1,
                "maxItems": 3,
            },
            "scores": {
                "type": "array",
                "items": {"type": "integer", "minimum": 0, "maximum": 9},
                "minItems": 2,
                "maxItems": 2,
            },
        },
        "required": ["tags", "scores"],
        "additionalProperties": False,
    },
    "enums": {
        "type": "object",
        "properties": {
            "color": {"enum": ["red", "green", "blue"]},
            "size": {"type": "string", "enum": ["S", "M", "L"]},
            "ok": {"type": "boolean"},
        },
        "required": ["color", "size", "ok"],
        "additionalProperties": False,
    },
    "integer_bounds": {
        "type": "object",
        "properties": {
            "n": {"type": "integer", "minimum": 10, "maximum": 99},
            "k": {"type": "integer", "minimum": -5, "maximum": 5},
        },
        "required": ["n", "k"],
        "additionalProperties": False,
    },
}


def with_properties(schema: dict[str, Any], **properties: dict[str, Any]) -> dict[str, Any]:
    """``schema`` (an object schema) with more required ``properties``.

    Args:
        schema: An object schema with ``properties`` and ``required``.
        **properties: Name -> the added property's schema.

    Returns:
        A new schema; ``schema`` is unchanged.
    """
    return {
        **schema,
        "properties": {**schema["properties"], **properties},
        "required": [*schema["required"], *properties],
    }


#: One number of the sum grammar, ``(1+23+4)``: 0-9 or 10-99.
_NUM = r"(?:[0-9]|[1-9][0-9])"


def assert_follows_sum_grammar(text: str, finish_reason: str | None) -> None:
    """Assert ``text`` is a sentence of ``root ::= "(" expr ")"; expr ::= num | num "+" expr``
    (a prefix of one when the answer was cut at max_tokens).

    Args:
        text: The answer.
        finish_reason: The answer's finish reason (``"stop"``: a whole sentence).
    """
    if finish_reason == "stop":
        assert re.fullmatch(rf"\({_NUM}(?:\+{_NUM})*\)", text), text
    else:  # cut at max_tokens: a prefix of a sentence of the grammar
        assert re.fullmatch(rf"\((?:{_NUM}\+)*(?:{_NUM}\)?)?", text), text


__all__ = ["CONSTRAINT_SCHEMAS", "assert_follows_sum_grammar", "with_properties"]
