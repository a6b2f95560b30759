"""Answers a look-alike server gives to constrained requests, so ``unillm probe`` sees the
constraint honoured (``unillm.testing.honest_server``, the adapters' look-alikes).

    regex_answer(r"[a-z]{2,6} [0-9]{1,3}")   # "abc 12"
    schema_instance({"type": "object", "properties": {"age": {"type": "integer"}}, "required": ["age"]})
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

#: Answers a look-alike server gives to a regular-expression constraint: the first that matches.
#: They cover the probe's regex, choice and grammar cells (``unillm.probing.cells``).
REGEX_ANSWERS = ("abc 12", "alpha", "yes 1")


def regex_answer(pattern: str) -> str | None:
    """What a look-alike answers to ``pattern``: the first of :data:`REGEX_ANSWERS` it matches.

    Args:
        pattern: The regular expression the request constrains the answer to.

    Returns:
        A matching answer, or None when none matches (the look-alike answers as it would unconstrained).
    """
    return next((a for a in REGEX_ANSWERS if re.fullmatch(pattern, a)), None)


def schema_instance(schema: Mapping[str, Any]) -> Any:
    """A small instance of a simple JSON schema (objects of strings, numbers, booleans, enums).

    Args:
        schema: The JSON schema the request constrains the answer to.

    Returns:
        A value valid for ``schema`` (None for a type it does not know).
    """
    if "enum" in schema:
        return schema["enum"][0]
    kind = schema.get("type")
    if kind == "object":
        required = schema.get("required", ())
        return {k: schema_instance(v) for k, v in schema.get("properties", {}).items() if k in required}
    return {"string": "a", "integer": 1, "number": 1.0, "boolean": True, "array": []}.get(str(kind))
