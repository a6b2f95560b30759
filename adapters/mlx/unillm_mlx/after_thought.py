"""A constrained answer after a thought, in process: the grammar lets the model think first.

With ``thinking=True`` the chat template opens the model's thought; a constraint (``output=``, a
forced tool call) that bound the first token would leave it no room. :func:`after_thought` wraps
the compiled constraint in an llguidance grammar whose start is an optional thought — the start
marker, any text without the end marker, the end marker and white space — then the constrained
answer, unchanged::

    grammar = compile_constraint({"json": schema}, lltokenizer)
    if thinks(body):
        grammar = after_thought(grammar)      # '<think>…</think>\\n{"a": 1}' or '{"a": 1}'

The thought is split off the answer client-side (``unillm.adapter.split_reasoning``), so
``r.reasoning`` holds it and ``r.parsed`` reads the answer alone.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

__all__ = ["after_thought", "special_markers", "thinks"]

#: The markers of the thought the grammar allows (Qwen3's, DeepSeek-R1's and the tiny model's).
THOUGHT_MARKERS = ("<think>", "</think>")
_ANY = "(.|\\n)*"


def thinks(body: Mapping[str, Any]) -> bool:
    """True when the request turns thinking on (``chat_template_kwargs.enable_thinking``).

    Args:
        body: The chat request body.
    """
    kwargs = body.get("chat_template_kwargs")
    return isinstance(kwargs, Mapping) and kwargs.get("enable_thinking") is True


def _lexeme(marker: str) -> str:
    """``marker`` as literal text inside a ``/.../`` lark regex."""
    return re.escape(marker).replace("/", "\\/")


def special_markers(lltokenizer: Any, markers: tuple[str, str] = THOUGHT_MARKERS) -> bool:
    """True when the tokenizer holds both markers as whole added tokens, which llguidance treats
    as special: no text lexeme can match them, so the grammar must name them as tokens.

    Args:
        lltokenizer: The llguidance tokenizer of the model (``tokenizer_for``).
        markers: The (start, end) markers around the thought.
    """
    for marker in markers:
        ids = lltokenizer.tokenize_str(marker)
        if len(ids) != 1 or not lltokenizer.is_special_token(ids[0]):
            return False
    return True


def after_thought(grammar: str, markers: tuple[str, str] = THOUGHT_MARKERS, *, special: bool = False) -> str:
    """The llguidance grammar of an optional thought, then the answer ``grammar`` allows.

    Args:
        grammar: A compiled llguidance grammar (``compile_constraint``): a top-level grammar in
            JSON, or lark text.
        markers: The (start, end) markers around the thought.
        special: The markers are special tokens to the model's llguidance tokenizer
            (:func:`special_markers`; e.g. ``<think>`` added as a whole token): the grammar names
            them as tokens, since text cannot spell them.

    Returns:
        The top-level grammar (JSON) whose start is the thought, then the answer's grammar.
    """
    try:
        top = json.loads(grammar)
    except ValueError:
        top = None
    if not isinstance(top, dict) or not isinstance(top.get("grammars"), list) or not top["grammars"]:
        top = {"grammars": [{"lark_grammar": grammar}]}
    answer = [dict(g) for g in top["grammars"]]
    answer[0]["name"] = answer[0].get("name") or "answer"
    if special:  # the markers as tokens; the thought's text cannot hold them
        lark = (
            f"start: thought? @{answer[0]['name']}\n"
            f"thought: {markers[0]} THOUGHT_TEXT {markers[1]} WHITE_SPACE?\n"
            f"THOUGHT_TEXT: /{_ANY}/\n"
            "WHITE_SPACE: /[ \\t\\r\\n]+/\n"
        )
    else:
        start, end = (_lexeme(m) for m in markers)
        lark = (
            f"start: THOUGHT? @{answer[0]['name']}\n"
            # one thought: the end marker once, at its end, then white space
            f"THOUGHT: /{start}{_ANY}{end}[ \\t\\r\\n]*/ & ~/{_ANY}{end}{_ANY}{end}{_ANY}/\n"
        )
    return json.dumps({**top, "grammars": [{"name": "after_thought", "lark_grammar": lark}, *answer]})
