"""JSON schemas that constrained-decoding tests hold an engine's answers to (nested objects,
bounded arrays, enums, bounded integers): an answer valid against one shows the engine enforced the schema."""

from __future__ import annotations

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


__all__ = ["CONSTRAINT_SCHEMAS", "with_properties"]
