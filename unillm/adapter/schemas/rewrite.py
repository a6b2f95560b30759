"""Exact rewrites of a JSON schema into a form xgrammar compiles right (pure).

    portable_schema({"allOf": [{"properties": {"a": {}}}, {"required": ["a"]}]})
    # {"properties": {"a": {}}, "required": ["a"]}

Each rewrite accepts exactly the same JSON documents as the original, and is applied only where
that holds; anything else is left as it was (and the backend's rules then refuse it):

* ``allOf`` whose branches (and the keywords beside it) use only ``type``, ``properties``,
  ``required``, numeric/length/count bounds and annotations is merged into one schema: types
  intersected, property maps joined (a name in two branches only when both say the same),
  ``required`` joined, each bound the strictest. Branches with ``$ref``, ``additionalProperties``,
  ``patternProperties``, combinators or anything else are not merged (those keywords' meaning
  depends on the branch they sit in).
* ``required`` names missing from ``properties`` (xgrammar never emits them) are declared there
  with the schema ``additionalProperties`` already gives them (``{}`` when it is absent or
  ``true``), unless ``patternProperties`` or ``unevaluatedProperties`` could also apply to them.
* ``minItems`` above the number of ``prefixItems`` with no ``items``: ``"items": true`` is added,
  which is what a missing ``items`` means (xgrammar's strict mode reads it as ``false``).

The input is never modified; a new document is returned (the same object when nothing changed).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from unillm.adapter.schemas.walk import DATA_KEYWORDS, NAME_MAPS, rewrite_children

__all__ = ["portable_schema"]

_ANNOTATIONS = frozenset({"title", "description", "$comment", "examples", "default", "deprecated"})
_LOWER = ("minimum", "exclusiveMinimum", "minLength", "minItems", "minProperties")
_UPPER = ("maximum", "exclusiveMaximum", "maxLength", "maxItems", "maxProperties")
_MERGEABLE = frozenset({"type", "properties", "required", *_LOWER, *_UPPER}) | _ANNOTATIONS


def portable_schema(schema: Mapping[str, Any]) -> Mapping[str, Any]:
    """``schema`` with the exact rewrites above applied at every level.

    Args:
        schema: A JSON schema document.

    Returns:
        The rewritten document, or ``schema`` itself when no rewrite applies.
    """
    return _rewrite(schema)


def _rewrite(node: Mapping[str, Any]) -> Mapping[str, Any]:
    merged = _merge_all_of(node)  # before the branches' own rewrites, which could tell them apart
    base = node if merged is None else merged
    out: dict[str, Any] = {}
    changed = merged is not None
    for key, value in base.items():
        new = value if key in DATA_KEYWORDS else rewrite_children(value, _rewrite, names=key in NAME_MAPS)
        changed |= new is not value
        out[key] = new
    for step in (_declare_required, _open_items):
        rewritten = step(out)
        if rewritten is not None:
            out, changed = rewritten, True
    return out if changed else node


def _merge_all_of(node: Mapping[str, Any]) -> dict[str, Any] | None:
    branches = node.get("allOf")
    if not isinstance(branches, list) or not branches:
        return None
    parts = [{k: v for k, v in node.items() if k != "allOf"}, *branches]
    if not all(isinstance(p, Mapping) and set(p) <= _MERGEABLE for p in parts):
        return None
    merged: dict[str, Any] = {}
    for part in parts:
        if not _merge_into(merged, part):
            return None
    return merged


def _merge_into(merged: dict[str, Any], part: Mapping[str, Any]) -> bool:
    """Add one branch's keywords to ``merged``; False when they cannot be merged exactly."""
    for key, value in part.items():
        if key not in merged:
            merged[key] = value
        elif key == "type":
            both = _type_set(merged[key]) & _type_set(value)
            if not both:
                return False  # no value can pass: leave the schema as written
            merged[key] = sorted(both)[0] if len(both) == 1 else sorted(both)
        elif key == "properties":
            if not isinstance(value, Mapping) or not isinstance(merged[key], Mapping):
                return False
            if any(name in merged[key] and merged[key][name] != sub for name, sub in value.items()):
                return False
            merged[key] = {**merged[key], **value}
        elif key == "required":
            if not isinstance(value, list) or not isinstance(merged[key], list):
                return False
            merged[key] = [*merged[key], *(name for name in value if name not in merged[key])]
        elif key in _LOWER or key in _UPPER:
            if not all(isinstance(v, (int, float)) for v in (value, merged[key])):
                return False
            merged[key] = (max if key in _LOWER else min)(merged[key], value)
        # annotations: the first one stays (they do not change what validates)
    return True


def _type_set(value: Any) -> set[str]:
    return {value} if isinstance(value, str) else {t for t in value if isinstance(t, str)}


def _declare_required(node: dict[str, Any]) -> dict[str, Any] | None:
    required, properties = node.get("required"), node.get("properties", {})
    if not isinstance(required, list) or not isinstance(properties, Mapping):
        return None
    if "patternProperties" in node or "unevaluatedProperties" in node:
        return None  # they could also apply to the missing names
    missing = [name for name in required if isinstance(name, str) and name not in properties]
    extra = node.get("additionalProperties", True)
    if not missing or extra is False:
        return None  # nothing to declare, or no object can have them
    declared = extra if isinstance(extra, Mapping) else {}
    return {**node, "properties": {**properties, **dict.fromkeys(missing, declared)}}


def _open_items(node: dict[str, Any]) -> dict[str, Any] | None:
    prefix, least = node.get("prefixItems"), node.get("minItems")
    fixed = len(prefix) if isinstance(prefix, list) else 0
    if "items" in node or not isinstance(least, int) or least <= fixed:
        return None
    return {**node, "items": True}
