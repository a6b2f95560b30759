"""JSON schemas that constrained-decoding tests hold an engine's answers to (nested objects,
bounded arrays, enums): an answer valid against one shows the engine enforced the schema."""

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
}

__all__ = ["CONSTRAINT_SCHEMAS"]
