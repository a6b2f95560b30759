"""Unified output constraints as TGI grammars: JSON schema (refs inlined), regex, choice.

    grammar(unillm.Choice(["yes", "no"]), None)  # {"type": "regex", "value": "(yes|no)"}

TGI compiles every grammar to a regular expression. Its JSON-schema compiler resolves ``$ref``
poorly across versions (older servers drop them), so local references are inlined before
sending; a recursive schema cannot become a regular expression and is refused.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import unquote

from unillm.adapter import Choice, Constraint, Feature, JsonSchema, Regex, UnsupportedFeature

ENGINE = "tgi"
_REGEX_META = frozenset("\\.^$*+?{}[]()|")
# Keywords that only describe a schema: a $ref's siblings made of these merge into the target.
_ANNOTATIONS = frozenset(
    {"title", "description", "default", "examples", "deprecated", "readOnly", "writeOnly", "$comment"}
)
_DEFINITIONS = ("$defs", "definitions")


def grammar(output: Constraint, version: str | None) -> dict[str, Any]:
    """TGI's ``GrammarType`` for a constraint (the ``grammar`` / ``response_format`` value).

    grammar(unillm.Regex(r"[0-9]{3}"), "3.3.5")  # {"type": "regex", "value": "[0-9]{3}"}
    """
    if isinstance(output, JsonSchema):
        schema = inline_refs(output.schema, version)
        if not isinstance(schema.get("properties"), Mapping):
            raise UnsupportedFeature(
                ENGINE,
                "output=JSON schema without top-level 'properties'",
                version=version,
                why="TGI compiles only object schemas with a top-level 'properties' (it answers 422 "
                "otherwise)",
                alternative="Wrap the value in an object: {'type': 'object', 'properties': "
                "{'value': <schema>}, 'required': ['value']}",
            )
        return {"type": "json", "value": schema}
    if isinstance(output, Regex):
        return {"type": "regex", "value": output.pattern}
    if isinstance(output, Choice):
        return {"type": "regex", "value": output.as_regex()}
    raise UnsupportedFeature(
        ENGINE,
        Feature.GRAMMAR.value,
        version=version,
        why="TGI has no context-free grammars, only JSON schemas and regular expressions",
        alternative="Use output=unillm.Regex(...) or a JSON schema, or an engine with grammars "
        "(vLLM, SGLang)",
    )


def escape_literal(text: str) -> str:
    """``text`` as a regular expression that matches exactly it (meta characters escaped)."""
    return "".join("\\" + c if c in _REGEX_META else c for c in text)


def inline_refs(schema: Mapping[str, Any], version: str | None = None) -> dict[str, Any]:
    """``schema`` with every local ``$ref`` replaced by its target and the root ``$defs`` dropped.

    Raises UnsupportedFeature for a recursive or a non-local reference.

        inline_refs(Outer.model_json_schema())  # no "$ref" / "$defs" left
    """

    def resolve(ref: str, seen: frozenset[str]) -> Any:
        if not ref.startswith("#"):
            raise UnsupportedFeature(
                ENGINE,
                "output=JSON schema with a non-local $ref",
                version=version,
                why=f"unillm inlines only references inside the schema, not {ref!r}",
                alternative="Inline the referenced schema yourself",
            )
        if ref in seen:
            raise UnsupportedFeature(
                ENGINE,
                "output=JSON schema with a recursive $ref",
                version=version,
                why=f"{ref!r} refers to itself; TGI compiles schemas to a regular expression, "
                "which cannot express recursion",
                alternative="Bound the depth (spell out the nesting levels you need as separate "
                "models), or use an engine with recursive schemas (vLLM, SGLang)",
            )
        target: Any = schema
        for part in filter(None, ref[1:].split("/")):
            key = unquote(part).replace("~1", "/").replace("~0", "~")
            try:
                target = target[int(key)] if isinstance(target, list) else target[key]
            except (KeyError, IndexError, ValueError, TypeError):
                raise UnsupportedFeature(
                    ENGINE,
                    "output=JSON schema with a dangling $ref",
                    version=version,
                    why=f"{ref!r} points at nothing in the schema",
                    alternative="Fix the reference",
                ) from None
        return walk(target, seen | {ref})

    def walk(node: Any, seen: frozenset[str]) -> Any:
        if isinstance(node, Mapping):
            ref = node.get("$ref")
            if isinstance(ref, str):
                target = resolve(ref, seen)
                siblings = {k: walk(v, seen) for k, v in node.items() if k != "$ref"}
                return _merge(target, siblings)
            return {k: walk(v, seen) for k, v in node.items()}
        if isinstance(node, list):
            return [walk(item, seen) for item in node]
        return node

    body = {k: v for k, v in schema.items() if k not in _DEFINITIONS}
    result: dict[str, Any] = walk(body, frozenset())
    return result


def _merge(target: Any, siblings: dict[str, Any]) -> Any:
    if not siblings:
        return target
    if not isinstance(target, Mapping):
        return {"allOf": [target, siblings]}
    clash = {k for k in siblings if k in target and k not in _ANNOTATIONS}
    if clash:
        return {"allOf": [dict(target), siblings]}
    return {**target, **siblings}
