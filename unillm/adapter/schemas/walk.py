"""Walking a JSON schema document: every schema object in it, with its JSON pointer (pure).

for pointer, node, kind in nodes(schema, ""):
    ...   # kind: "schema", "map" (names to schemas, as in properties) or "data" (in const, enum)
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "CONSTRAINING",
    "DATA_KEYWORDS",
    "NAME_MAPS",
    "SchemaProblem",
    "escape",
    "largest_count",
    "nodes",
    "regex_syntax",
    "rewrite_children",
    "types_of",
]

_COUNT = re.compile(r"\{(\d+)(?:,(\d*))?\}")
_CODE_POINT = re.compile(r"\\u\{[0-9A-Fa-f]{1,6}\}")

DATA_KEYWORDS = frozenset({"const", "enum", "default", "examples"})
#: Keywords whose values map names to schemas: the map itself is not a schema.
NAME_MAPS = frozenset({"properties", "patternProperties", "$defs", "definitions", "dependentSchemas"})
#: JSON Schema's validating keywords (applicators and assertions); annotations are not among them.
CONSTRAINING = frozenset(
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


@dataclass(frozen=True)
class SchemaProblem:
    """A keyword the backend cannot honour, where it is (a JSON pointer) and why."""

    keyword: str
    pointer: str
    why: str


def nodes(
    node: Mapping[str, Any], pointer: str = "", *, kind: str = "schema"
) -> Iterator[tuple[str, Mapping[str, Any], str]]:
    """Every object in the document, depth first, as vLLM's check visits them.

    Each comes with its kind: ``"schema"``, ``"map"`` (names to schemas, as in ``properties``)
    or ``"data"`` (inside ``const``, ``enum``, ``default`` or ``examples``).
    """
    yield pointer, node, kind
    for key, value in node.items():
        here = f"{pointer}/{escape(str(key))}"
        child = "schema"
        if kind == "data" or (kind == "schema" and key in DATA_KEYWORDS):
            child = "data"
        elif kind == "schema" and key in NAME_MAPS:
            child = "map"
        items = enumerate(value) if isinstance(value, list) else [(None, value)]
        for index, item in items:
            if isinstance(item, Mapping):
                yield from nodes(item, here if index is None else f"{here}/{index}", kind=child)


def types_of(node: Mapping[str, Any]) -> set[str]:
    """The JSON types a schema object declares in ``type`` (empty when it declares none)."""
    declared = node.get("type")
    if isinstance(declared, str):
        return {declared}
    if isinstance(declared, list):
        return {t for t in declared if isinstance(t, str)}
    return set()


def escape(token: str) -> str:
    """``token`` escaped for a JSON pointer (RFC 6901: ``~`` as ``~0``, ``/`` as ``~1``)."""
    return token.replace("~", "~0").replace("/", "~1")


def regex_syntax(pattern: str) -> Iterator[int]:
    """Positions of a regular expression's characters that are syntax: not escaped, not in a class
    (a code point escape ``\\u{10000}`` is one escape, braces included)."""
    i, in_class = 0, False
    while i < len(pattern):
        char = pattern[i]
        if char == "\\":
            point = _CODE_POINT.match(pattern, i)
            i = point.end() if point else i + 2
            continue
        if in_class:
            in_class = char != "]"
        elif char == "[":
            in_class = True
            i += 1
            i += 1 if pattern.startswith("^", i) else 0
            i += 1 if pattern.startswith("]", i) else 0  # a leading ] is literal
            continue
        else:
            yield i
        i += 1


def largest_count(pattern: str) -> int:
    """The largest number in the pattern's counted repetitions (``a{3}``, ``a{2,}``, ``a{1,9}``); 0: none."""
    counts = (_COUNT.match(pattern, i) for i in regex_syntax(pattern) if pattern[i] == "{")
    return max((int(n) for m in counts if m for n in m.groups() if n), default=0)


def rewrite_children(value: Any, rewrite: Callable[[Mapping[str, Any]], Any], *, names: bool) -> Any:
    """A keyword's value with its sub-schemas rewritten, or ``value`` itself when none changed.

    Args:
        value: The keyword's value: a schema, a name map (``properties``...) or a list of schemas.
        rewrite: Rewrites one sub-schema (returns it unchanged, the same object, when it keeps it).
        names: ``value`` is a name map: its values are the sub-schemas.

    Returns:
        The rewritten value (a new object only where something changed).
    """
    if isinstance(value, Mapping):
        if not names:
            return rewrite(value)
        new = {k: rewrite(v) if isinstance(v, Mapping) else v for k, v in value.items()}
        return value if all(new[k] is value[k] for k in value) else new
    if isinstance(value, list):
        items = [rewrite(v) if isinstance(v, Mapping) else v for v in value]
        return value if all(a is b for a, b in zip(items, value, strict=True)) else items
    return value
