"""Length-bounded strings spelled so xgrammar cannot emit invalid JSON in them (pure).

    xgrammar_strings({"type": "string", "maxLength": 8})
    # {"type": "string", "pattern": "^(?:" + JSON_STRING_CHAR + "){0,8}$"}

xgrammar (measured on 0.2.7, SGLang 0.5.23's CPU build; seen on 0.2.9 beside MLX) compiles a string with
``minLength`` / ``maxLength`` to the character class ``[^"\\\r\n]`` repeated that many times:
every raw control character but CR and LF passes (a tab, U+0001, ...), and no escape does. JSON
forbids a raw control character inside a string (RFC 8259, section 7), so an answer sampled
through such a string can be no JSON at all (a plain string, without bounds, is compiled right:
``[^\0-\x1f"\\\r\n]`` or an escape). Confirmed with xgrammar itself by
``adapters/vllm/tests/test_vllm_schema_rules_xgrammar.py``; seen on SGLang-CPU by the probe.

The rewrite replaces the bounds by a pattern with the same counts over the same class less the
control characters, which xgrammar compiles with its counts: it admits exactly the strings
xgrammar's own length-bounded class admits that are valid JSON.

The class also keeps out bytes that are not UTF-8. xgrammar (0.2.7 and 0.2.8) reads a character
class beyond ASCII loosely: ``[^"\\\x00-\x1f]`` admits a surrogate's three bytes (``ED A0 80``) and
overlong forms (``E0 80 80``, ``F0 80 80 80``). A decoder turns each such byte into U+FFFD, so a
string of 8 characters under the grammar comes back as 10, too long for its schema (SGLang's probe
saw ``"\ufffd\ufffd\ufffd c test"`` under ``maxLength: 8``). Naming the surrogates, U+0800 and
U+10000 in the class makes xgrammar split the lead bytes ``ED``, ``E0`` and ``F0`` at the right
places; U+0800 and U+10000 are then admitted as alternatives of their own. U+D000-U+D7FF (lead
byte ``ED`` too) is an alternative of its own as well: inside the negated class, xgrammar 0.2.7
took ``ED`` and then no continuation at all, a dead end where SGLang sampled a masked token and
answered 500 (its probe, 2026-12-04). It is written with
``\\u{...}`` escapes, which xgrammar reads (0.2.7 rejects literal characters above ASCII in a
negated class).
Applied to a node whose ``type`` is ``"string"`` and that has no ``pattern``, ``format``,
``enum`` or ``const``, when the counts are at most :data:`~unillm.adapter.schemas.xgrammar.MAX_REPEAT`
(xgrammar's largest counted repetition); any other string keeps its bounds as they are.

The input is never modified; a new document is returned (the same object when nothing changed).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from unillm.adapter.schemas.walk import DATA_KEYWORDS, NAME_MAPS, rewrite_children
from unillm.adapter.schemas.xgrammar import MAX_REPEAT

__all__ = ["JSON_STRING_CHAR", "xgrammar_strings"]

#: One character xgrammar's length-bounded strings admit, less the control characters JSON forbids
#: and any byte sequence that is not UTF-8 (surrogates, overlong forms: see above).
JSON_STRING_CHAR = '[^"\\\\\\x00-\\x1f\\u0800\\ud000-\\udfff\\u{10000}]|\\u0800|[\\ud000-\\ud7ff]|\\u{10000}'
_KEPT_BY = ("pattern", "format", "enum", "const")


def xgrammar_strings(schema: Mapping[str, Any]) -> Mapping[str, Any]:
    """``schema`` with each length-bounded plain string rewritten as a pattern (see above).

    Args:
        schema: A JSON schema document.

    Returns:
        The rewritten document, or ``schema`` itself when no string is rewritten.
    """
    return _rewrite(schema)


def _rewrite(node: Mapping[str, Any]) -> Mapping[str, Any]:
    out: dict[str, Any] = {}
    changed = False
    for key, value in node.items():
        new = value if key in DATA_KEYWORDS else rewrite_children(value, _rewrite, names=key in NAME_MAPS)
        changed |= new is not value
        out[key] = new
    pattern = _bounds_pattern(out)
    if pattern is not None:
        out = {k: v for k, v in out.items() if k not in ("minLength", "maxLength")}
        out["pattern"], changed = pattern, True
    return out if changed else node


def _bounds_pattern(node: Mapping[str, Any]) -> str | None:
    """The pattern for a length-bounded plain string, or None when the node is not one."""
    if node.get("type") != "string" or any(k in node for k in _KEPT_BY):
        return None
    if "minLength" not in node and "maxLength" not in node:
        return None
    low, high = node.get("minLength", 0), node.get("maxLength")
    if not _count(low) or not (high is None or _count(high)) or (high is not None and low > high):
        return None  # not counts xgrammar compiles (or unsatisfiable): left to the backend as it was
    return f"^(?:{JSON_STRING_CHAR}){{{low},{'' if high is None else high}}}$"


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_REPEAT
