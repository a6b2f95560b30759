"""JSON schemas as llama-cpp-python's server enforces them (pure).

The server turns ``response_format``'s schema into GBNF with llama.cpp's converter, which
enforces structure, enums, string lengths, anchored patterns and array sizes, but *ignores*
number bounds and several other keywords. So, before sending:

* an integer with both bounds (``Field(ge=0, le=30)``) becomes an ``enum`` of its values
  (up to :data:`MAX_INT_CHOICES`), which the converter enforces exactly;
* every keyword it would ignore raises :class:`SchemaNotEnforced` (a typed refusal upstream);
* so do repetitions above :data:`MAX_REPEAT` (``maxLength``, ``maxItems``, ``{n,m}`` in a
  pattern): the converter nests one optional rule per repetition, and the server's grammar
  sampler overflows its stack on them (SIGSEGV: measured at 1500 with llama-cpp-python 0.3.36;
  1000 passes).
* so does a pattern with an escape inside ``[...]`` that llama.cpp's grammar parser does not
  know (``[a-z\\.]``, ``[\\d]``): the converter copies character classes as they are, the parser
  refuses the grammar ("unknown escape") and the server dies of SIGSEGV on that request (measured
  with llama-cpp-python 0.3.36; the parser knows ``\\ \\] \\[ \\" \\- \\n \\r \\t \\x \\u``).
* so does a (sub)schema the converter cannot read: one with nothing it acts on (no ``type``,
  ``properties``, ``items``, ``enum``, ``const``, ``$ref``, ``anyOf``/``oneOf``/``allOf``,
  ``pattern`` or ``format``; e.g. ``{"description": "any value"}`` or ``{"required": [...]}``),
  an array whose ``items`` is ``{}``, a ``$ref`` other than ``#/...``: the converter raises, and
  the server then falls back to *any* JSON without a word (``_grammar_for_json_schema`` in
  llama-cpp-python 0.3.36's ``llama_chat_format.py``; 24 of the 33 unenforced answers of
  JSONSchemaBench's sample were these).

    server_schema({"type": "integer", "minimum": 1, "maximum": 3})   # {"enum": [1, 2, 3]}

Answers are still validated against the caller's own schema.
"""

from __future__ import annotations

from typing import Any

from unillm.adapter.schemas import largest_count

__all__ = ["MAX_INT_CHOICES", "MAX_REPEAT", "SchemaNotEnforced", "server_schema"]

MAX_INT_CHOICES = 1000
MAX_REPEAT = 1000
_BOUNDS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf")
_IGNORED = (
    "minProperties",
    "maxProperties",
    "not",
    "if",
    "then",
    "else",
    "patternProperties",
    "propertyNames",
    "contains",
    "minContains",
    "maxContains",
    "dependentRequired",
    "dependentSchemas",
    "unevaluatedProperties",
    "unevaluatedItems",
)
_FORMATS = ("date", "time", "date-time", "uuid", "uuid1", "uuid2", "uuid3", "uuid4", "uuid5")
_SUBSCHEMA_MAPS = ("properties", "$defs", "definitions")
_SUBSCHEMA_LISTS = ("anyOf", "oneOf", "allOf", "prefixItems")


class SchemaNotEnforced(ValueError):
    """A schema keyword llama-cpp-python's converter would silently ignore."""


def server_schema(schema: Any) -> Any:
    """``schema`` rewritten so that the server enforces all of it (raises SchemaNotEnforced)."""
    if isinstance(schema, list):
        return [server_schema(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = dict(schema)
    if (unreadable := _unreadable(out)) is not None:
        raise SchemaNotEnforced(unreadable)
    if (key := _true_false_subschema(out)) is not None:
        raise SchemaNotEnforced(f"a true/false schema in {key!r}: the converter cannot read it (use {{}})")
    for key in _IGNORED:
        if key in out:
            raise SchemaNotEnforced(f"{key!r} is not enforced by llama-cpp-python's schema converter")
    if out.get("uniqueItems"):
        raise SchemaNotEnforced("'uniqueItems' is not enforced by llama-cpp-python's schema converter")
    if any(key in out for key in _BOUNDS):
        out = _bounded(out)
    _check_repeats(out)
    if "pattern" in out:
        pattern = str(out["pattern"])
        if not (pattern.startswith("^") and pattern.endswith("$")):
            raise SchemaNotEnforced(
                f"pattern {pattern!r}: the converter takes only patterns anchored with ^ and $"
            )
        if (escape := class_escape(pattern)) is not None:
            raise SchemaNotEnforced(
                f"pattern {pattern!r}: {escape!r} inside [...] is an escape llama.cpp's grammar parser "
                "refuses, and llama-cpp-python's server dies of SIGSEGV on it; inside [...] write the "
                "character unescaped (e.g. [a-z.]) or as a range (0-9 for \\d)"
            )
        if "minLength" in out or "maxLength" in out:
            raise SchemaNotEnforced(
                "a string with both a pattern and a length: the converter keeps only the pattern"
            )
    if out.get("type") == "string" and "format" in out and out["format"] not in _FORMATS:
        raise SchemaNotEnforced(f"string format {out['format']!r} is not enforced by the converter")
    for key in _SUBSCHEMA_MAPS:
        if isinstance(out.get(key), dict):
            out[key] = {name: server_schema(s) for name, s in out[key].items()}
    for key in _SUBSCHEMA_LISTS:
        if isinstance(out.get(key), list):
            out[key] = [server_schema(s) for s in out[key]]
    for key in ("items", "additionalProperties"):
        if isinstance(out.get(key), (dict, list)):
            out[key] = server_schema(out[key])
    return out


def _true_false_subschema(node: dict[str, Any]) -> str | None:
    """The keyword holding a ``true``/``false`` subschema the converter would visit, or None."""
    props = node.get("properties")
    places = {"properties": list(props.values()) if isinstance(props, dict) else []}
    for key in (*_SUBSCHEMA_LISTS, "items"):
        value = node.get(key)
        places[key] = value if isinstance(value, list) else [value]
    return next((key for key, values in places.items() if any(isinstance(v, bool) for v in values)), None)


#: The escapes llama.cpp's GBNF parser reads inside a character class (``parse_char``).
_CLASS_ESCAPES = frozenset('\\]["-nrtxu')


def class_escape(pattern: str) -> str | None:
    """The first escape inside a ``[...]`` of ``pattern`` that llama.cpp's grammar parser refuses,
    read as the converter reads classes (up to the first unescaped ``]``), or None."""
    i, in_class = 0, False
    while i < len(pattern):
        c = pattern[i]
        if c == "\\":
            if in_class and pattern[i + 1 : i + 2] not in _CLASS_ESCAPES:
                return pattern[i : i + 2]
            i += 2
            continue
        in_class = (c == "[") if not in_class else c != "]"
        i += 1
    return None


#: The types the converter has a rule for (its ``PRIMITIVE_RULES``' JSON types).
_TYPES = frozenset({"boolean", "number", "integer", "string", "array", "object", "null"})


def _unreadable(node: dict[str, Any]) -> str | None:
    """Why the converter cannot read ``node`` (it raises and the server enforces no schema), or None."""
    kind = node.get("type")
    ref = node.get("$ref")
    if ref is not None:
        if str(ref).startswith("#/"):
            return None
        return f"$ref {ref!r}: the converter resolves only references inside the schema ('#/...')"
    if isinstance(kind, list) or any(key in node for key in ("anyOf", "oneOf", "const", "enum")):
        return None
    if kind in (None, "object") and (
        "properties" in node or "allOf" in node or node.get("additionalProperties", True) is not True
    ):
        return None
    if kind in (None, "array") and ("items" in node or "prefixItems" in node):
        if node.get("items") or "prefixItems" in node:
            return None
        return "an array whose 'items' is empty ({}): the converter cannot read it (drop 'items')"
    if kind in (None, "string") and ("pattern" in node or node.get("format") in _FORMATS):
        return None
    if not node or kind in _TYPES:
        return None
    what = f"type {kind!r}" if kind is not None else f"only {', '.join(map(repr, sorted(node)))}"
    return (
        f"a schema with {what}: the converter reads none of it, and the server then enforces no "
        "schema at all; give it a type ({} for any value)"
    )


def _check_repeats(node: dict[str, Any]) -> None:
    for key in ("maxLength", "maxItems"):
        limit = node.get(key)
        if isinstance(limit, int) and limit > MAX_REPEAT:
            raise SchemaNotEnforced(
                f"{key} {limit} is above {MAX_REPEAT}: llama-cpp-python's server crashes (SIGSEGV) on so "
                "many nested repetitions"
            )
    pattern = node.get("pattern")
    if isinstance(pattern, str) and largest_count(pattern) > MAX_REPEAT:
        raise SchemaNotEnforced(
            f"pattern {pattern!r} repeats more than {MAX_REPEAT} times: llama-cpp-python's server crashes "
            "(SIGSEGV) on so many nested repetitions"
        )


def _bounded(node: dict[str, Any]) -> dict[str, Any]:
    """An integer with bounds as the enum of its values; other bounded numbers are refused."""
    if node.get("type") != "integer":
        raise SchemaNotEnforced(
            "bounds on non-integer numbers (minimum, maximum, multipleOf) are not "
            "enforced by llama-cpp-python's schema converter"
        )
    low, high = node.get("minimum"), node.get("maximum")
    above, below = node.get("exclusiveMinimum"), node.get("exclusiveMaximum")
    if isinstance(above, int) and not isinstance(above, bool):
        low = above + 1 if low is None else max(low, above + 1)
    if isinstance(below, int) and not isinstance(below, bool):
        high = below - 1 if high is None else min(high, below - 1)
    if not isinstance(low, int) or not isinstance(high, int) or high - low + 1 > MAX_INT_CHOICES:
        raise SchemaNotEnforced(
            f"integer bounds need both a minimum and a maximum at most "
            f"{MAX_INT_CHOICES} values apart (they become an enum)"
        )
    step = node.get("multipleOf", 1)
    if not isinstance(step, int) or step < 1:
        raise SchemaNotEnforced("a non-integer multipleOf is not enforced")
    values = [v for v in range(low, high + 1) if v % step == 0]
    if not values:
        raise SchemaNotEnforced("the integer bounds admit no value")
    rest = {k: v for k, v in node.items() if k not in (*_BOUNDS, "type")}
    return {**rest, "enum": values}
