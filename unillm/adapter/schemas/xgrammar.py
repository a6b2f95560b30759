"""JSON schemas xgrammar cannot honour, found before sending (pure, engine-free).

    xgrammar_problem({"type": "array", "uniqueItems": True})
    # SchemaProblem(keyword='uniqueItems', pointer='/uniqueItems', why='...')

Two groups of rules, applied to every schema object in the document:

* **Refused by vLLM** (:func:`vllm_refusal`; HTTP 400 "features not supported by xgrammar"):
  the same checks as vLLM 0.32's ``has_xgrammar_unsupported_json_features`` in
  ``vllm/v1/structured_output/backend_xgrammar.py`` (with its ``STRING_SUPPORTED_FORMATS``,
  ``_has_pattern_and_length_bounds`` and ``_schema_types``), walking the document the way it
  does (every object reachable through object values and list items). With vLLM's ``auto``
  backend these schemas go to guidance instead; on SGLang, which has no such check, xgrammar
  ignores these keywords.
* **Compiled wrongly or failing inside xgrammar** (:func:`xgrammar_miscompile`; confirmed with
  xgrammar 0.2.8's ``Grammar.from_json_schema``, which vLLM calls in strict mode, by
  ``adapters/vllm/tests/test_vllm_schema_rules_xgrammar.py``): ``required`` names missing from
  the sibling ``properties`` (the grammar never emits them, so ``{}`` passes); ``anyOf`` /
  ``oneOf`` / ``allOf`` or ``$ref`` beside any constraining keyword (``properties``,
  ``required``, ``type``, ``minimum``, ...: xgrammar compiles one and drops the other); ``not``,
  and ``if`` with ``then`` / ``else`` (ignored); a lookahead in ``pattern`` (ignored) or a
  lookbehind (the compile fails: HTTP 400); ``minItems`` above the ``prefixItems`` count
  with no ``items`` (strict mode reads a missing ``items`` as ``false`` and the compile fails:
  HTTP 400). No engine checks these before compiling.

Annotations (``title``, ``description``, ``default``, ...) never count. These rules skip values
that are data, not schemas (``const``, ``enum``, ``default``, ``examples``), and the
name-to-schema maps themselves (``properties``, ``$defs``, ...). Several of them have an exact
rewrite (:func:`unillm.adapter.schemas.portable_schema`), applied before these checks.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from unillm.adapter.schemas.walk import (
    CONSTRAINING,
    SchemaProblem,
    escape,
    largest_count,
    nodes,
    regex_syntax,
    types_of,
)

__all__ = ["XGRAMMAR_FORMATS", "vllm_refusal", "xgrammar_miscompile", "xgrammar_problem"]

#: String formats xgrammar's JSON-schema converter implements (vLLM's STRING_SUPPORTED_FORMATS).
XGRAMMAR_FORMATS = frozenset(
    {
        "email",
        "date",
        "time",
        "date-time",
        "duration",
        "ipv4",
        "ipv6",
        "hostname",
        "uuid",
        "uri",
        "uri-reference",
        "uri-template",
        "json-pointer",
        "relative-json-pointer",
    }
)
_ARRAY_UNSUPPORTED = ("uniqueItems", "contains", "minContains", "maxContains")
_COMBINATORS = ("anyOf", "oneOf", "allOf")
_LOOKAROUNDS = ("?=", "?!", "?<=", "?<!")
#: The largest counted repetition xgrammar 0.2.x compiles in a pattern (measured: 128 passes, 129 fails).
MAX_REPEAT = 128


def xgrammar_problem(schema: Mapping[str, Any]) -> SchemaProblem | None:
    """The first feature of ``schema`` that xgrammar refuses, ignores or compiles wrongly.

    Args:
        schema: A JSON schema document.

    Returns:
        The problem, or None when xgrammar honours the schema as far as these rules know.
    """
    return vllm_refusal(schema) or xgrammar_miscompile(schema)


def vllm_refusal(schema: Mapping[str, Any]) -> SchemaProblem | None:
    """The first feature of ``schema`` vLLM's own xgrammar check finds (its HTTP 400, or its
    ``auto`` backend's reason to use guidance instead).

    Args:
        schema: A JSON schema document.

    Returns:
        The problem, or None when vLLM passes the schema to xgrammar.
    """
    return next(filter(None, (_vllm_refusal(node, at) for at, node, _ in nodes(schema))), None)


def xgrammar_miscompile(schema: Mapping[str, Any]) -> SchemaProblem | None:
    """The first feature of ``schema`` that passes vLLM's check but xgrammar gets wrong.

    Args:
        schema: A JSON schema document.

    Returns:
        The problem, or None when none of these rules applies.
    """
    found = (_wrong_compile(node, at) for at, node, kind in nodes(schema) if kind == "schema")
    return next(filter(None, found), None)


def _vllm_refusal(node: Mapping[str, Any], at: str) -> SchemaProblem | None:
    """vLLM's own check (``has_xgrammar_unsupported_json_features``), one object at a time."""
    types = types_of(node)
    if types & {"integer", "number"} and "multipleOf" in node:
        return SchemaProblem("multipleOf", f"{at}/multipleOf", "xgrammar ignores multipleOf on numbers")
    if "array" in types:
        for key in _ARRAY_UNSUPPORTED:
            if key in node:
                return SchemaProblem(key, f"{at}/{key}", f"xgrammar does not implement {key} on arrays")
    if "string" in types:
        fmt = node.get("format")
        if "format" in node and not (isinstance(fmt, str) and fmt in XGRAMMAR_FORMATS):
            return SchemaProblem(
                "format",
                f"{at}/format",
                f"xgrammar knows the formats {', '.join(sorted(XGRAMMAR_FORMATS))}, not {fmt!r}",
            )
        bound = _length_beside_pattern(node)
        if bound:
            return SchemaProblem(
                bound, f"{at}/{bound}", f"xgrammar cannot combine {bound} with pattern or format"
            )
    if "object" in types and "propertyNames" in node:
        problem = _property_names_refusal(node, at)
        if problem:
            return problem
    patterns = node.get("patternProperties")
    if "object" in types and isinstance(patterns, Mapping):
        if "properties" in node:
            return SchemaProblem(
                "patternProperties",
                f"{at}/patternProperties",
                "xgrammar cannot combine patternProperties with properties",
            )
        if len(patterns) > 1:
            return SchemaProblem(
                "patternProperties",
                f"{at}/patternProperties",
                "xgrammar takes one pattern in patternProperties, not several",
            )
    branches = node.get("allOf")
    if isinstance(branches, list) and len(branches) >= 2:
        return SchemaProblem(
            "allOf", f"{at}/allOf", "xgrammar does not intersect allOf branches (it would accept any JSON)"
        )
    return None


def _property_names_refusal(node: Mapping[str, Any], at: str) -> SchemaProblem | None:
    """vLLM's check of an object's ``propertyNames`` (part of :func:`_vllm_refusal`)."""
    names = node["propertyNames"]
    if isinstance(names, Mapping) and _length_beside_pattern(names):
        return SchemaProblem(
            "propertyNames",
            f"{at}/propertyNames",
            "xgrammar cannot combine a length bound with pattern or format in propertyNames",
        )
    for other in ("patternProperties", "properties"):
        if other in node:
            return SchemaProblem(
                "propertyNames", f"{at}/propertyNames", f"xgrammar cannot combine it with {other}"
            )
    if node.get("unevaluatedProperties", True) is not True:
        return SchemaProblem(
            "propertyNames",
            f"{at}/propertyNames",
            "xgrammar cannot combine it with unevaluatedProperties",
        )
    return None


def _wrong_compile(node: Mapping[str, Any], at: str) -> SchemaProblem | None:
    """Schemas vLLM accepts but xgrammar compiles wrongly or fails to compile."""
    properties = node.get("properties")
    declared = properties if isinstance(properties, Mapping) else {}
    required = node.get("required")
    if isinstance(required, list):
        for index, name in enumerate(required):
            if isinstance(name, str) and name not in declared:
                return SchemaProblem(
                    "required",
                    f"{at}/required/{index}",
                    f"xgrammar never emits a required property missing from properties ({name!r}), "
                    "so it would accept objects without it",
                )
    problem = (
        _dropped_sibling(node, at)
        or _ignored_keyword(node, at)
        or _pattern_problem(node, at)
        or _overlapping_one_of(node, at)
    )
    if problem is None and "array" in types_of(node):
        return _min_items_without_items(node, at)
    return problem


def _dropped_sibling(node: Mapping[str, Any], at: str) -> SchemaProblem | None:
    """A combinator or ``$ref`` beside another constraining keyword: xgrammar keeps only one."""
    for key in (*_COMBINATORS, "$ref"):
        if not isinstance(node.get(key), str if key == "$ref" else list):
            continue
        beside = sorted(name for name in node if name in CONSTRAINING and name != key)
        if beside:
            return SchemaProblem(
                key,
                f"{at}/{key}",
                f"xgrammar compiles either {key} or the keywords beside it ({', '.join(beside)}), not both",
            )
    return None


def _ignored_keyword(node: Mapping[str, Any], at: str) -> SchemaProblem | None:
    """``not`` and ``if`` with ``then``/``else``, which xgrammar ignores."""
    if isinstance(node.get("not"), (Mapping, bool)):
        return SchemaProblem("not", f"{at}/not", "xgrammar ignores not, so it would accept what it excludes")
    if "if" in node and ("then" in node or "else" in node):
        return SchemaProblem(
            "if", f"{at}/if", "xgrammar ignores if/then/else, so it would accept what they exclude"
        )
    return None


def _pattern_problem(node: Mapping[str, Any], at: str) -> SchemaProblem | None:
    """A ``pattern`` (or a ``patternProperties`` name) xgrammar gets wrong: a lookahead (ignored),
    a lookbehind (fails to compile), or a counted repetition above 128 (fails to compile once a
    tokenizer is attached: vLLM answers HTTP 500, SGLang 400)."""
    patterns = [("pattern", node.get("pattern"))]
    names = node.get("patternProperties")
    if isinstance(names, Mapping):
        patterns += [(f"patternProperties/{escape(str(key))}", key) for key in names]
    for where, pattern in patterns:
        if not isinstance(pattern, str):
            continue
        if _has_lookaround(pattern):
            why = (
                "xgrammar ignores lookahead and cannot compile lookbehind ((?=, (?!, (?<=, (?<!) in a pattern"
            )
        elif largest_count(pattern) > MAX_REPEAT:
            why = f"xgrammar cannot compile a counted repetition above {MAX_REPEAT} in a pattern"
        else:
            continue
        return SchemaProblem(where.split("/", 1)[0], f"{at}/{where}", why)
    return None


def _overlapping_one_of(node: Mapping[str, Any], at: str) -> SchemaProblem | None:
    """``oneOf`` with two branches that only name overlapping types: xgrammar reads ``oneOf`` as
    ``anyOf``, so it emits a value both accept (``52`` for integer and number), which ``oneOf``
    forbids."""
    branches = node.get("oneOf")
    if not isinstance(branches, list):
        return None
    plain = [(i, _type_only(b)) for i, b in enumerate(branches)]
    typed = [(i, t) for i, t in plain if t is not None]
    for n, (i, first) in enumerate(typed):
        for j, second in typed[n + 1 :]:
            if _overlap(first, second):
                return SchemaProblem(
                    "oneOf",
                    f"{at}/oneOf/{j}",
                    f"xgrammar reads oneOf as anyOf, and branches {i} and {j} accept the same values",
                )
    return None


def _type_only(branch: Any) -> set[str] | None:
    """The types a branch accepts when ``type`` is all it constrains (empty: every type); else None."""
    if branch is True:
        return set()
    if not isinstance(branch, Mapping) or any(k in CONSTRAINING for k in branch if k != "type"):
        return None
    return types_of(branch) if "type" in branch else set()


def _overlap(first: set[str], second: set[str]) -> bool:
    if not first or not second:
        return True  # a branch without a type accepts everything
    widen = {"integer": {"integer", "number"}, "number": {"integer", "number"}}
    return any(widen.get(t, {t}) & second for t in first)


def _has_lookaround(pattern: str) -> bool:
    """Whether a regular expression has a lookahead or lookbehind group."""
    return any(pattern[i] == "(" and pattern.startswith(_LOOKAROUNDS, i + 1) for i in regex_syntax(pattern))


def _min_items_without_items(node: Mapping[str, Any], at: str) -> SchemaProblem | None:
    prefix = node.get("prefixItems")
    fixed = len(prefix) if isinstance(prefix, list) else 0
    least = node.get("minItems")
    if "items" in node or not isinstance(least, int) or least <= fixed:
        return None
    return SchemaProblem(
        "minItems",
        f"{at}/minItems",
        "xgrammar (strict mode) reads a missing items as false, so minItems above the prefixItems "
        'count fails to compile; add "items": true, which means the same',
    )


def _length_beside_pattern(node: Mapping[str, Any]) -> str | None:
    """``minLength``/``maxLength`` when ``pattern`` or ``format`` sits beside it, else None."""
    if "pattern" not in node and "format" not in node:
        return None
    return next((key for key in ("minLength", "maxLength") if key in node), None)
