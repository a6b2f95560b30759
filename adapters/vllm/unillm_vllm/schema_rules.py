"""JSON schemas vLLM's xgrammar backend cannot honour, found before sending (pure, engine-free).

    xgrammar_problem({"type": "array", "uniqueItems": True})
    # SchemaProblem(keyword='uniqueItems', pointer='/uniqueItems', why='...')

Two groups of rules, applied to every schema object in the document:

* **Refused by vLLM** (HTTP 400 "features not supported by xgrammar"): the same checks as vLLM
  0.32's ``has_xgrammar_unsupported_json_features`` in
  ``vllm/v1/structured_output/backend_xgrammar.py`` (with its ``STRING_SUPPORTED_FORMATS``,
  ``_has_pattern_and_length_bounds`` and ``_schema_types``), walking the document the way it
  does (every object reachable through object values and list items).
* **Compiled wrongly or failing inside xgrammar** (confirmed with xgrammar 0.2.8's
  ``Grammar.from_json_schema``, which vLLM calls in strict mode, by
  ``adapters/vllm/tests/test_vllm_schema_rules_xgrammar.py``): ``required`` names missing from
  the sibling ``properties`` (the grammar never emits them, so ``{}`` passes); ``anyOf`` /
  ``oneOf`` / ``allOf`` or ``$ref`` beside any constraining keyword (``properties``,
  ``required``, ``type``, ``minimum``, ...: xgrammar compiles one and drops the other); ``not``,
  and ``if`` with ``then`` / ``else`` (ignored); a lookahead in ``pattern`` (ignored) or a
  lookbehind (the compile fails: HTTP 400); ``minItems`` above the ``prefixItems`` count
  with no ``items`` (strict mode reads a missing ``items`` as ``false`` and the compile fails:
  HTTP 400). Annotations
  (``title``, ``description``, ``default``, ...) never count. These rules skip values that are
  data, not schemas (``const``, ``enum``, ``default``, ``examples``), and the name-to-schema
  maps themselves (``properties``, ``$defs``, ...).

No schema is rewritten: each problem is refused with the exact fix where one exists.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["XGRAMMAR_FORMATS", "SchemaProblem", "structured_backend", "xgrammar_problem"]

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
_DATA_KEYWORDS = frozenset({"const", "enum", "default", "examples"})
#: Keywords whose values map names to schemas: the map itself is not a schema.
_NAME_MAPS = frozenset({"properties", "patternProperties", "$defs", "definitions", "dependentSchemas"})
#: JSON Schema's validating keywords (applicators and assertions); annotations are not among them.
_CONSTRAINING = frozenset(
    {
        "type", "enum", "const", "multipleOf", "maximum", "exclusiveMaximum", "minimum",
        "exclusiveMinimum", "maxLength", "minLength", "pattern", "format", "items", "prefixItems",
        "additionalItems", "contains", "maxItems", "minItems", "uniqueItems", "maxContains",
        "minContains", "unevaluatedItems", "properties", "patternProperties",
        "additionalProperties", "propertyNames", "required", "maxProperties", "minProperties",
        "dependentRequired", "dependentSchemas", "dependencies", "unevaluatedProperties",
        "$ref", "not", "if", "then", "else", "anyOf", "oneOf", "allOf",
    }
)  # fmt: skip
_CONFIG_FLAG = "--structured-outputs-config"
_LOOKAROUNDS = ("?=", "?!", "?<=", "?<!")


@dataclass(frozen=True)
class SchemaProblem:
    """A keyword the backend cannot honour, where it is (a JSON pointer) and why."""

    keyword: str
    pointer: str
    why: str


def structured_backend(extra_args: Sequence[str]) -> str:
    """The structured-outputs backend that vLLM command-line arguments configure.

    Read the way vLLM's ``FlexibleArgumentParser`` does: dotted flags
    (``--structured-outputs-config.backend=guidance``) are merged into one config that replaces
    any JSON ``--structured-outputs-config '{...}'``; of several JSON flags the last wins; a
    config without ``backend`` means vLLM's default, ``"auto"``.
    """
    dotted: dict[str, Any] = {}
    whole: Any = {}
    for i, arg in enumerate(extra_args):
        flag, eq, value = arg.partition("=")
        if not flag.startswith(_CONFIG_FLAG):
            continue
        if not eq:
            value = extra_args[i + 1] if i + 1 < len(extra_args) else ""
        if flag == _CONFIG_FLAG:
            whole = _json_or_none(value)
        elif flag.startswith(_CONFIG_FLAG + "."):
            parsed = _json_or_none(value)  # vLLM reads a dotted value as JSON, else as text
            dotted[flag.removeprefix(_CONFIG_FLAG + ".")] = value if parsed is None else parsed
    config = dotted or whole
    backend = config.get("backend") if isinstance(config, dict) else None
    return backend if isinstance(backend, str) and backend else "auto"


def xgrammar_problem(schema: Mapping[str, Any]) -> SchemaProblem | None:
    """The first feature of ``schema`` that vLLM's xgrammar backend refuses or compiles wrongly.

    Args:
        schema: A JSON schema document.

    Returns:
        The problem, or None when xgrammar honours the schema as far as these rules know.
    """
    for pointer, node, kind in _nodes(schema, "", kind="schema"):
        problem = _vllm_refusal(node, pointer)
        if problem is None and kind == "schema":
            problem = _wrong_compile(node, pointer)
        if problem is not None:
            return problem
    return None


def _nodes(
    node: Mapping[str, Any], pointer: str, *, kind: str
) -> Iterator[tuple[str, Mapping[str, Any], str]]:
    """Every object in the document, depth first, as vLLM's check visits them.

    Each comes with its kind: ``"schema"``, ``"map"`` (names to schemas, as in ``properties``)
    or ``"data"`` (inside ``const``, ``enum``, ``default`` or ``examples``).
    """
    yield pointer, node, kind
    for key, value in node.items():
        here = f"{pointer}/{_escape(str(key))}"
        child = "schema"
        if kind == "data" or (kind == "schema" and key in _DATA_KEYWORDS):
            child = "data"
        elif kind == "schema" and key in _NAME_MAPS:
            child = "map"
        items = enumerate(value) if isinstance(value, list) else [(None, value)]
        for index, item in items:
            if isinstance(item, Mapping):
                yield from _nodes(item, here if index is None else f"{here}/{index}", kind=child)


def _vllm_refusal(node: Mapping[str, Any], at: str) -> SchemaProblem | None:
    """vLLM's own check (``has_xgrammar_unsupported_json_features``), one object at a time."""
    types = _types(node)
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
    problem = _dropped_sibling(node, at) or _ignored_keyword(node, at) or _lookaround(node, at)
    if problem is None and "array" in _types(node):
        return _min_items_without_items(node, at)
    return problem


def _dropped_sibling(node: Mapping[str, Any], at: str) -> SchemaProblem | None:
    """A combinator or ``$ref`` beside another constraining keyword: xgrammar keeps only one."""
    for key in (*_COMBINATORS, "$ref"):
        if not isinstance(node.get(key), str if key == "$ref" else list):
            continue
        beside = sorted(name for name in node if name in _CONSTRAINING and name != key)
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


def _lookaround(node: Mapping[str, Any], at: str) -> SchemaProblem | None:
    """A ``pattern`` with a lookahead (ignored by xgrammar) or a lookbehind (fails to compile)."""
    pattern = node.get("pattern")
    if not isinstance(pattern, str) or not _has_lookaround(pattern):
        return None
    return SchemaProblem(
        "pattern",
        f"{at}/pattern",
        "xgrammar ignores lookahead and cannot compile lookbehind ((?=, (?!, (?<=, (?<!) in a pattern",
    )


def _has_lookaround(pattern: str) -> bool:
    """Whether a regular expression has a lookahead or lookbehind group (not escaped, not in a class)."""
    i, in_class = 0, False
    while i < len(pattern):
        char = pattern[i]
        if char == "\\":
            i += 2
            continue
        if in_class:
            in_class = char != "]"
        elif char == "[":
            in_class = True
            i += 1
            i += 1 if pattern.startswith("^", i) else 0
            i += 1 if pattern.startswith("]", i) else 0  # a leading ] is literal
            continue
        elif char == "(" and pattern.startswith(_LOOKAROUNDS, i + 1):
            return True
        i += 1
    return False


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


def _types(node: Mapping[str, Any]) -> set[str]:
    declared = node.get("type")
    if isinstance(declared, str):
        return {declared}
    if isinstance(declared, list):
        return {t for t in declared if isinstance(t, str)}
    return set()


def _length_beside_pattern(node: Mapping[str, Any]) -> str | None:
    """``minLength``/``maxLength`` when ``pattern`` or ``format`` sits beside it, else None."""
    if "pattern" not in node and "format" not in node:
        return None
    return next((key for key in ("minLength", "maxLength") if key in node), None)


def _escape(token: str) -> str:
    return token.replace("~", "~0").replace("/", "~1")


def _json_or_none(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return None
