"""A constrained answer after a thought, as one GBNF grammar (pure).

With ``thinking=True`` the model writes its thought first; a constraint (``output=``, a forced
tool call) that bound the first token would leave it no room. :func:`after_thought` wraps the
answer's GBNF in a grammar whose root is an optional thought — the start marker, any text
without the end marker, the end marker and a little white space — then the answer, unchanged::

    after_thought(choice_gbnf(["yes", "no"]))
    # root ::= think? answer-root       '<think>…</think>\\nyes', or 'yes'
    # think ::= "<think>" think-0 [ \\t\\r\\n]{0,20}
    # think-0 ::= "<" think-1 | [^<] think-0
    # think-1 ::= "/" think-2 | "<" think-1 | [^/<] think-0  ...  (no '</think>' before its end)
    # answer-root ::= "yes" | "no"

A JSON schema has no GBNF of its own on the wire (the server converts ``response_format``
itself), so :func:`schema_gbnf` converts it client-side: outlines-core turns it into a regex,
``regex_gbnf`` the regex into GBNF. The thought is split off the answer client-side
(``unillm.adapter.split_reasoning``): ``r.reasoning`` holds it, ``r.text`` / ``r.parsed`` the
answer alone.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from unillm_llamacpp.grammar import (
    GBNF_TOKEN,
    RegexNotExpressible,
    char_class,
    check_gbnf,
    gbnf_literal,
    regex_gbnf,
)

__all__ = ["THOUGHT_MARKERS", "SchemaNotConverted", "after_thought", "schema_gbnf", "thought_rules"]

#: The markers of the thought the grammar allows (Qwen3's, DeepSeek-R1's and the tiny model's).
THOUGHT_MARKERS = ("<think>", "</think>")
#: The answer's rules are renamed with this prefix, so none meets the thought's.
ANSWER_PREFIX = "answer-"
#: White space allowed between the end marker and the answer (bounded: a model cannot run away).
MAX_GAP = 20
#: The longest schema regex turned into GBNF: each optional property repeats the ones before it
#: in outlines-core's regex (20 optional integers: 9,165 characters), and checking the grammar
#: grows faster than its size (40 of them: 36,275 characters, 8 s).
MAX_SCHEMA_REGEX = 16_000
_NAME = re.compile(r"[A-Za-z0-9_-]+")


class SchemaNotConverted(ValueError):
    """A JSON schema that cannot be turned into GBNF here."""


def thought_rules(markers: tuple[str, str] = THOUGHT_MARKERS, name: str = "think") -> list[str]:
    """GBNF rules for one thought: ``name`` matches the start marker, any text in which the end
    marker does not occur, the end marker, then up to :data:`MAX_GAP` white-space characters.

    GBNF has no negation, so the text is a matching automaton for the end marker (Knuth-Morris-
    Pratt): rule ``name-i`` has read the marker's first ``i`` characters; reading all of them
    ends the thought.

    Args:
        markers: The (start, end) markers around the thought.
        name: The name of the thought's rule; its states are ``name-0``, ``name-1``, ...

    Returns:
        The rules, one ``x ::= ...`` line each.
    """
    start, end = markers
    if not end:
        raise ValueError("the end marker must not be empty")
    rules = [f"{name} ::= {gbnf_literal(start)} {name}-0 [ \\t\\r\\n]{{0,{MAX_GAP}}}"]
    for state in range(len(end)):
        # the characters that keep part of the marker read; any other starts again
        moves = {c: t for c in sorted(set(end)) if (t := _next_state(end, state, c))}
        alternatives = [gbnf_literal(c) + ("" if t == len(end) else f" {name}-{t}") for c, t in moves.items()]
        alternatives.append(char_class([(ord(c), ord(c)) for c in moves], True) + f" {name}-0")
        rules.append(f"{name}-{state} ::= " + " | ".join(alternatives))
    return rules


def _next_state(marker: str, state: int, c: str) -> int:
    """How many of ``marker``'s first characters end the text read so far (``state`` of them,
    then ``c``): the longest prefix of ``marker`` that is a suffix of it."""
    text = marker[:state] + c
    for size in range(min(len(text), len(marker)), 0, -1):
        if text.endswith(marker[:size]):
            return size
    return 0


def _renamed(grammar: str, prefix: str) -> str:
    """``grammar`` with every rule name (definitions and uses) prefixed by ``prefix``; literals,
    character classes, repetition counts and comments are left as they are."""
    return "".join(prefix + t if _NAME.fullmatch(t) else t for t in GBNF_TOKEN.findall(grammar))


def after_thought(answer: str, markers: tuple[str, str] = THOUGHT_MARKERS) -> str:
    """The GBNF grammar of an optional thought, then the answer ``answer`` allows.

    Args:
        answer: A GBNF grammar with a ``root`` rule (checked by ``check_gbnf``).
        markers: The (start, end) markers around the thought.

    Returns:
        A GBNF grammar whose ``root`` is the optional thought, then the answer's ``root``
        (renamed, with all its rules, under :data:`ANSWER_PREFIX`).

    Raises:
        GrammarError: ``answer``, or the grammar made of it, is not one llama.cpp parses.
    """
    check_gbnf(answer)
    lines = [f"root ::= think? {ANSWER_PREFIX}root", *thought_rules(markers), _renamed(answer, ANSWER_PREFIX)]
    grammar = "\n".join(lines)
    check_gbnf(grammar)
    return grammar


def schema_gbnf(schema: Mapping[str, Any]) -> str:
    """``schema`` as GBNF: outlines-core's regex for it, translated by ``regex_gbnf``.

    White space between JSON tokens is at most one space (outlines-core's default), so a model
    cannot run away in it.

    Args:
        schema: A JSON schema, already rewritten for the server (``server_schema``).

    Returns:
        The GBNF grammar (its start rule ``root``).

    Raises:
        SchemaNotConverted: The schema refers to itself (outlines-core unrolls ``$ref`` to a fixed
            depth, where its regex admits invalid JSON), outlines-core fails on it (e.g. a
            ``$ref`` it cannot resolve), its regex is longer than :data:`MAX_SCHEMA_REGEX`, or
            GBNF cannot express the regex (e.g. a ``pattern`` with a lookahead).
    """
    from outlines_core.json_schema import build_regex_from_schema

    if _refers_to_itself(schema, schema, frozenset()):
        raise SchemaNotConverted("a recursive schema ($ref to itself) is not converted client-side")
    try:
        regex = str(build_regex_from_schema(json.dumps(schema)))
    except Exception as e:  # outlines-core raises plain ValueErrors (and others) from Rust
        raise SchemaNotConverted(f"outlines-core cannot convert the schema: {e}") from None
    if len(regex) > MAX_SCHEMA_REGEX:
        raise SchemaNotConverted(
            f"its regex has {len(regex):,} characters, more than {MAX_SCHEMA_REGEX:,} (optional "
            "properties multiply it: make some required, or split the schema)"
        )
    try:
        return regex_gbnf(regex)
    except RegexNotExpressible as e:
        raise SchemaNotConverted(f"its regex has no GBNF equivalent: {e}") from None


def _refers_to_itself(node: Any, root: Mapping[str, Any], followed: frozenset[str]) -> bool:
    """Whether a ``$ref`` under ``node`` leads back to one already ``followed`` (local references
    only: ``#`` and ``#/a/b``; others are left to outlines-core)."""
    if isinstance(node, list):
        return any(_refers_to_itself(n, root, followed) for n in node)
    if not isinstance(node, Mapping):
        return False
    ref = node.get("$ref")
    if isinstance(ref, str) and ref.startswith("#"):
        if ref in followed:
            return True
        target: Any = root
        for part in filter(None, ref[1:].split("/")):
            key = part.replace("~1", "/").replace("~0", "~")
            target = target.get(key) if isinstance(target, Mapping) else None
        if _refers_to_itself(target, root, followed | {ref}):
            return True
    return any(
        _refers_to_itself(v, root, followed)
        for k, v in node.items()
        if k not in ("$ref", "$defs", "definitions")
    )
