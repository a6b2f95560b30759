"""A tool's parameters schema as Ollama keeps it, or a refusal naming what it would lose.

Ollama decodes a tool's ``parameters`` into Go structs (``api/types.go``): ToolFunctionParameters
keeps ``type``, ``$defs``, ``items``, ``required`` and ``properties``; each property is a
ToolProperty, which keeps ``anyOf``, ``type``, ``items`` (whole), ``description``, ``enum``,
``properties`` and ``required``. Go drops every other key silently, so the model would never see
it. This module sends what Ollama keeps and refuses, before sending, what would change the
schema's meaning::

    ollama_parameters("send", {"$defs": {...}, "properties": {"to": {"$ref": "#/$defs/Addr"}}})
    # {"type": "object", "properties": {"to": {"type": "object", "properties": {...}}}}

Exact rewrites first: a local ``$ref`` (``#/$defs/X``, ``#/definitions/X``) is replaced by what
it points to (a recursive one is refused), ``const`` becomes a one-value ``enum``, and
annotations that constrain nothing (``title``, ``default``, ``examples``, ``$comment``,
``$schema``, ``additionalProperties: true``) are left out. Any other keyword Ollama would drop
(``minimum``, ``pattern``, ``format``, ``additionalProperties: false``, ``oneOf``, ...) is an
UnsupportedFeature naming the tool, the parameter and the keyword.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from unillm.adapter import UnsupportedFeature

ENGINE = "ollama"
#: What ToolFunctionParameters keeps ($defs are inlined, so not sent).
TOP_KEYS = frozenset({"type", "items", "required", "properties"})
#: What ToolProperty keeps.
PROPERTY_KEYS = frozenset({"anyOf", "type", "items", "description", "enum", "properties", "required"})
#: Keywords that constrain nothing: left out without changing what the arguments may be.
ANNOTATIONS = frozenset({"title", "default", "examples", "$comment", "$schema"})
_DEF_ROOTS = ("#/$defs/", "#/definitions/")


def ollama_parameters(tool: str, schema: Mapping[str, Any]) -> dict[str, Any]:
    """``schema`` (a tool's parameters) with only what Ollama's tool types keep.

    Args:
        tool: The tool's name, for the refusal.
        schema: The tool's parameters JSON schema.

    Returns:
        The schema to send, meaning unchanged.

    Raises:
        UnsupportedFeature: A keyword whose meaning Ollama would drop, a recursive or non-local
            ``$ref``, or a top-level ``type`` that is not one name.
    """
    inlined = _inline(schema, schema, tool, "", ())
    if not isinstance(inlined.get("type", "object"), str):
        raise _refusal(tool, "", "type", "its parameters' type must be one name (e.g. 'object')")
    out = _kept(inlined, TOP_KEYS, tool, "")
    out.setdefault("type", "object")
    return out


def _kept(node: Mapping[str, Any], keys: frozenset[str], tool: str, where: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in ANNOTATIONS or key in ("$defs", "definitions"):
            continue
        if key == "additionalProperties" and value is True:
            continue
        if key == "const":
            out["enum"] = [value]
        elif key not in keys:
            raise _refusal(tool, where, key, "Ollama's tool types drop it, so the model would never see it")
        elif key == "properties" and isinstance(value, Mapping):
            out[key] = {
                name: _property(sub, tool, f"{where}.{name}" if where else name)
                for name, sub in value.items()
            }
        elif key == "anyOf" and isinstance(value, list):
            out[key] = [_property(sub, tool, where) for sub in value]
        else:
            out[key] = value  # items is kept whole; type, enum, required, description as given
    if "const" in node and "enum" in node:
        raise _refusal(tool, where, "const", "it sits beside an enum (Ollama keeps one enum)")
    return out


def _property(node: Any, tool: str, where: str) -> Any:
    if not isinstance(node, Mapping):
        raise _refusal(tool, where, "true/false schema", "a ToolProperty must be an object")
    return _kept(node, PROPERTY_KEYS, tool, where)


def _inline(node: Any, root: Mapping[str, Any], tool: str, where: str, seen: tuple[str, ...]) -> Any:
    """``node`` with every local ``$ref`` replaced by its target (siblings merged in)."""
    if isinstance(node, list):
        return [_inline(v, root, tool, where, seen) for v in node]
    if not isinstance(node, Mapping):
        return node
    if "$ref" in node:
        ref = node["$ref"]
        target = _target(ref, root, tool, where)
        if ref in seen:
            raise _refusal(tool, where, "$ref", f"{ref} refers to itself; Ollama has no references")
        resolved = _inline(target, root, tool, where, (*seen, ref))
        siblings = {k: v for k, v in node.items() if k != "$ref"}
        clash = [k for k in siblings if k in resolved and k not in ANNOTATIONS and siblings[k] != resolved[k]]
        if clash:
            raise _refusal(tool, where, clash[0], f"it is set both beside {ref} and in it")
        return {**resolved, **_inline(siblings, root, tool, where, seen)}
    return {
        k: _inline(v, root, tool, where, seen) if k not in ("$defs", "definitions") else v
        for k, v in node.items()
    }


def _target(ref: Any, root: Mapping[str, Any], tool: str, where: str) -> Any:
    for prefix in _DEF_ROOTS:
        if isinstance(ref, str) and ref.startswith(prefix):
            defs = root.get(prefix[2:-1])
            name = ref[len(prefix) :]
            if isinstance(defs, Mapping) and name in defs:
                return defs[name]
    raise _refusal(tool, where, "$ref", f"{ref!r} is not a definition in the schema's $defs")


def _refusal(tool: str, where: str, keyword: str, why: str) -> UnsupportedFeature:
    at = f"parameter {where!r}" if where else "its parameters"
    return UnsupportedFeature(
        ENGINE,
        f"tool {tool!r}: {keyword!r} in {at}",
        why=why + " (ToolProperty keeps only type, description, enum, properties, required, anyOf and items)",
        alternative="Leave the keyword out and check the value in the tool itself, or use an engine "
        "that passes tool schemas whole (vLLM, SGLang, llama.cpp)",
    )
