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
itself), so :func:`schema_gbnf` runs the server's own converter (llama.cpp's, vendored from
llama-cpp-python) client-side. The thought is split off the answer client-side
(``unillm.adapter.split_reasoning``): ``r.reasoning`` holds it, ``r.text`` / ``r.parsed`` the
answer alone.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from unillm_llamacpp.grammar import _TOKEN, _char_class, check_gbnf, gbnf_literal

__all__ = ["THOUGHT_MARKERS", "SchemaNotConverted", "after_thought", "schema_gbnf", "thought_rules"]

#: The markers of the thought the grammar allows (Qwen3's, DeepSeek-R1's and the tiny model's).
THOUGHT_MARKERS = ("<think>", "</think>")
#: The answer's rules are renamed with this prefix, so none meets the thought's.
ANSWER_PREFIX = "answer-"
#: White space allowed between the end marker and the answer (bounded: a model cannot run away).
MAX_GAP = 20
_NAME = re.compile(r"[A-Za-z0-9_-]+")


class SchemaNotConverted(ValueError):
    """A JSON schema llama.cpp's converter cannot turn into GBNF."""


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
        alternatives.append(_char_class([(ord(c), ord(c)) for c in moves], True) + f" {name}-0")
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
    return "".join(prefix + t if _NAME.fullmatch(t) else t for t in _TOKEN.findall(grammar))


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
    """``schema`` as GBNF, by the converter llama-cpp-python's server runs on ``response_format``.

    Args:
        schema: A JSON schema, already rewritten for the server (``server_schema``).

    Returns:
        The GBNF grammar (its start rule ``root``).

    Raises:
        SchemaNotConverted: The converter fails on it (e.g. a ``$ref`` it cannot resolve).
    """
    from unillm_llamacpp._vendor.llama_grammar import json_schema_to_gbnf

    try:
        return str(json_schema_to_gbnf(json.dumps(schema)))
    except Exception as e:  # the vendored converter raises plain exceptions and asserts
        raise SchemaNotConverted(f"llama.cpp's schema converter failed: {type(e).__name__}: {e}") from None
