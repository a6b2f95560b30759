"""Constraints as llama.cpp GBNF, and a check of GBNF before it reaches the server (pure).

llama.cpp enforces only GBNF grammars (and JSON schemas on chat, which the server converts
itself), and an invalid grammar crashes ``llama_cpp.server``: every grammar is checked here
before sending.

    choice_gbnf(["yes", "no"])          # 'root ::= "yes" | "no"'
    regex_gbnf(r"\\d{4}-\\d{2}")           # 'root ::= [0-9]{4} "-" [0-9]{2}'
    check_gbnf('root ::= "a" | "b"')     # None, or raises GrammarError saying why

Regexes are parsed by Python's own regex parser and translated node by node; what GBNF cannot
express (lookarounds, backreferences, word boundaries, inline flags) raises
:class:`RegexNotExpressible`. ``\\d``, ``\\w`` and ``\\s`` become their ASCII classes, so an
answer always matches the regex (a subset of what Python's Unicode classes accept).
"""

from __future__ import annotations

import importlib
import re
import sys
from collections.abc import Iterable, Sequence
from typing import Any

__all__ = ["GrammarError", "RegexNotExpressible", "check_gbnf", "choice_gbnf", "gbnf_literal", "regex_gbnf"]

_sre: Any = importlib.import_module("re._parser" if sys.version_info >= (3, 11) else "sre_parse")
_DIGIT = [(0x30, 0x39)]
_WORD = [(0x30, 0x39), (0x41, 0x5A), (0x5F, 0x5F), (0x61, 0x7A)]
_SPACE = [(0x09, 0x0D), (0x20, 0x20)]
_CATEGORIES = {
    "CATEGORY_DIGIT": (_DIGIT, False),
    "CATEGORY_NOT_DIGIT": (_DIGIT, True),
    "CATEGORY_WORD": (_WORD, False),
    "CATEGORY_NOT_WORD": (_WORD, True),
    "CATEGORY_SPACE": (_SPACE, False),
    "CATEGORY_NOT_SPACE": (_SPACE, True),
}
_ANCHORS = {"AT_BEGINNING", "AT_BEGINNING_STRING", "AT_END", "AT_END_STRING"}


class GrammarError(ValueError):
    """A GBNF grammar llama.cpp would reject (and crash on)."""


class RegexNotExpressible(ValueError):
    """A regex construct GBNF cannot express."""


def _char(cp: int, *, in_class: bool) -> str:
    """One code point, escaped for a GBNF literal or character class."""
    c = chr(cp)
    if c.isascii() and (c.isalnum() or c in " _.,:;!?@#%&'/~`<>=+*$|{}()" + ("" if in_class else "[]^-")):
        return c
    if cp < 0x100:
        return f"\\x{cp:02X}"
    return f"\\u{cp:04X}" if cp < 0x10000 else f"\\U{cp:08X}"


def gbnf_literal(text: str) -> str:
    """``text`` as a quoted GBNF literal."""
    return '"' + "".join(_char(ord(c), in_class=False) for c in text) + '"'


def choice_gbnf(options: Sequence[str]) -> str:
    """A grammar whose only sentences are ``options``."""
    return "root ::= " + " | ".join(gbnf_literal(o) for o in options)


def char_class(ranges: Iterable[tuple[int, int]], negate: bool) -> str:
    """A GBNF character class.

    Args:
        ranges: Inclusive code-point ranges.
        negate: Match every character outside them (``[^...]``).

    Returns:
        The class, e.g. ``[a-z0-9]``.
    """
    body = "".join(
        _char(a, in_class=True) if a == b else f"{_char(a, in_class=True)}-{_char(b, in_class=True)}"
        for a, b in ranges
    )
    return f"[{'^' if negate else ''}{body}]"


def regex_gbnf(pattern: str) -> str:
    """A GBNF grammar whose sentences all fully match ``pattern`` (raises RegexNotExpressible)."""
    try:
        parsed = _sre.parse(pattern)
    except re.error as e:
        raise RegexNotExpressible(f"not a valid regex: {e}") from None
    if parsed.state.flags & (re.IGNORECASE | re.MULTILINE | re.DOTALL | re.VERBOSE):
        raise RegexNotExpressible("inline flags such as (?i) have no GBNF equivalent")
    items = list(parsed)
    while items and str(items[0][0]) == "AT" and str(items[0][1]) in _ANCHORS:
        items.pop(0)
    while items and str(items[-1][0]) == "AT" and str(items[-1][1]) in _ANCHORS:
        items.pop()
    return "root ::= " + _sequence(items)


def _sequence(items: Sequence[tuple[Any, Any]]) -> str:
    parts = [_node(op, av) for op, av in items]
    return " ".join(p for p in parts if p) or '""'


def _node(op: Any, av: Any) -> str:
    name = str(op)
    if name == "LITERAL":
        return gbnf_literal(chr(av))
    if name == "NOT_LITERAL":
        return char_class([(av, av)], True)
    if name == "ANY":
        return "[^\\x0A]"
    if name == "IN":
        return _in(av)
    if name == "BRANCH":
        return "(" + " | ".join(_sequence(list(b)) for b in av[1]) + ")"
    if name == "SUBPATTERN":
        _group, add_flags, del_flags, sub = av
        if add_flags or del_flags:
            raise RegexNotExpressible("inline flags such as (?i:...) have no GBNF equivalent")
        return "(" + _sequence(list(sub)) + ")"
    if name in ("MAX_REPEAT", "MIN_REPEAT"):
        low, high, sub = av
        inner = "(" + _sequence(list(sub)) + ")"
        if high == _sre.MAXREPEAT:
            return inner + {0: "*", 1: "+"}.get(low, f"{{{low},}}")
        if (low, high) == (0, 1):
            return inner + "?"
        return inner + (f"{{{low}}}" if low == high else f"{{{low},{high}}}")
    if name == "AT":
        raise RegexNotExpressible(
            f"anchor {av} inside the pattern has no GBNF equivalent (only ^ and $ at its ends are allowed)"
        )
    raise RegexNotExpressible(
        f"{name.lower()} (lookarounds, backreferences, possessive or atomic groups) has no GBNF equivalent"
    )


def _in(items: Sequence[tuple[Any, Any]]) -> str:
    negate = False
    ranges: list[tuple[int, int]] = []
    negated_categories: list[tuple[int, int]] = []
    for op, av in items:
        name = str(op)
        if name == "NEGATE":
            negate = True
        elif name == "LITERAL":
            ranges.append((av, av))
        elif name == "RANGE":
            ranges.append(av)
        elif name == "CATEGORY":
            cat_ranges, cat_negated = _CATEGORIES[str(av)]
            (negated_categories if cat_negated else ranges).extend(cat_ranges)
        else:
            raise RegexNotExpressible(f"{name.lower()} inside a character class has no GBNF equivalent")
    if negated_categories:
        if ranges:
            raise RegexNotExpressible(
                "a character class mixing \\D, \\W or \\S with other characters has no GBNF equivalent"
            )
        return char_class(negated_categories, not negate)
    return char_class(ranges, negate)


def check_gbnf(text: str) -> None:
    """Raise GrammarError unless llama.cpp can parse ``text``: GBNF with a ``root`` rule.

    The syntax is checked by llguidance (the grammar engine unillm uses for MLX), after
    translating to Lark; llama.cpp's own limits are checked here: rule names of letters, digits
    and ``-`` only, every rule used is defined, no rule is left-recursive, and no repeated group
    expands to more rules than its parser allows (:data:`MAX_REPEATED_RULES`).
    """
    from llguidance import LLMatcher
    from llguidance.gbnf_to_lark import gbnf_to_lark

    if not re.search(r"(?m)^\s*root\s*::=", text):
        raise GrammarError("a GBNF grammar needs a rule named root (root ::= ...)")
    try:
        lark = gbnf_to_lark(text)
    except Exception as e:  # the converter raises plain exceptions for syntax errors
        raise GrammarError(f"not valid GBNF: {e}") from None
    error = LLMatcher.validate_grammar(LLMatcher.grammar_from_lark(lark))
    if error:
        raise GrammarError(f"not valid GBNF: {error}")
    _check_rules(_rules(text))
    _check_repetitions(text)


#: llama.cpp's parser refuses a repeated group that expands to more than this many rules times
#: its count (measured with llama-cpp-python 0.3.36: 2 rules x 1000 pass, x 1001 do not; a
#: one-rule item is not limited by it).
MAX_REPEATED_RULES = 2000
_QUANTIFIER = re.compile(r"[*+?]|\{\s*([0-9]+)\s*(?:(,)\s*([0-9]*)\s*)?\}")


def _check_repetitions(text: str) -> None:
    """Raise GrammarError where llama.cpp's parser would refuse a repetition: it counts the rules
    a parenthesized item expands to (one per group, one per optional repetition in it) and
    refuses the item repeated when that count times the repetition's count exceeds
    :data:`MAX_REPEATED_RULES` (e.g. a large group made optional with ``?``)."""
    tokens = [t for t in GBNF_TOKEN.findall(text) if t.strip() and not t.startswith("#")]
    generated, starts, seen = 0, [], set()
    item_rules = 1
    for token in tokens:
        if token == "(":
            starts.append(generated)
            generated += 1
        elif token == ")" and starts:
            item_rules = max(1, generated - starts.pop())
        elif (m := _QUANTIFIER.fullmatch(token)) is not None:
            low, high = _counts(token, m)
            count = high if high is not None and high > 0 else max(low, 1)
            if item_rules > 1 and item_rules * count > MAX_REPEATED_RULES:
                raise GrammarError(
                    f"a repeated item expands to {item_rules} rules, times {count}: llama.cpp refuses "
                    f"more than {MAX_REPEATED_RULES} (make it smaller, or repeat it fewer times)"
                )
            generated += 1 if high is None else high - low
        else:  # a literal, a class, a rule name (new names are rules too), "|" or "::="
            if re.fullmatch(r"[A-Za-z0-9-]+", token) and token not in seen:
                seen.add(token)
                generated += 1
            item_rules = 1


def _counts(token: str, m: re.Match[str]) -> tuple[int, int | None]:
    """A quantifier's (least, most) count; most is None when unbounded."""
    if token in "*+?":
        return {"*": (0, None), "+": (1, None), "?": (0, 1)}[token]
    low = int(m.group(1))
    if not m.group(2):
        return low, low
    return low, int(m.group(3)) if m.group(3) else None


#: A GBNF grammar's lexical tokens (white space, comments, literals, classes, names, operators).
GBNF_TOKEN = re.compile(
    r"""\s+|\#[^\n]*|"(?:\\.|[^"\\])*"|\[(?:\\.|[^\]\\])*\]|::=|\{[0-9, ]*\}
                        |[A-Za-z0-9_-]+|[()|*+?.]|.""",
    re.VERBOSE | re.DOTALL,
)
Item = tuple[str, Any]  # ("name", rule) | ("group", alternatives) | ("text", nullable)


def _rules(text: str) -> dict[str, list[list[Item]]]:
    """The rules of a GBNF grammar whose syntax llguidance accepted: name -> alternatives."""
    tokens = [t for t in GBNF_TOKEN.findall(text) if t.strip() and not t.startswith("#")]
    starts = [i for i in range(len(tokens) - 1) if tokens[i + 1] == "::="]
    rules: dict[str, list[list[Item]]] = {}
    for n, start in enumerate(starts):
        name, body = tokens[start], tokens[start + 2 : starts[n + 1] if n + 1 < len(starts) else len(tokens)]
        if not re.fullmatch(r"[A-Za-z0-9-]+", name):
            raise GrammarError(f"rule name {name!r}: llama.cpp allows letters, digits and '-' only")
        alternatives, rest = _alternatives(body)
        if rest:
            raise GrammarError(f"rule {name!r}: unexpected {rest[0]!r}")
        rules[name] = alternatives
    return rules


def _alternatives(tokens: list[str]) -> tuple[list[list[Item]], list[str]]:
    alternatives: list[list[Item]] = [[]]
    while tokens and tokens[0] != ")":
        token, tokens = tokens[0], tokens[1:]
        item: Item
        if token == "|":
            alternatives.append([])
            continue
        if token == "(":
            inner, tokens = _alternatives(tokens)
            tokens = tokens[1:]  # ")"
            item = ("group", inner)
        elif token[0] in '"[.':  # a literal, a character class or any character
            item = ("text", token == '""')
        elif re.fullmatch(r"[A-Za-z0-9_-]+", token):
            if "_" in token:
                raise GrammarError(f"rule name {token!r}: llama.cpp allows letters, digits and '-' only")
            item = ("name", token)
        else:
            raise GrammarError(f"unexpected {token!r}")
        while tokens and (tokens[0] in ("*", "?", "+") or tokens[0].startswith("{")):
            quantifier, tokens = tokens[0], tokens[1:]
            if quantifier in ("*", "?") or re.match(r"\{\s*0", quantifier):
                item = ("group", [[item], []])  # may be empty
        alternatives[-1].append(item)
    return alternatives, tokens


def _check_rules(rules: dict[str, list[list[Item]]]) -> None:
    if "root" not in rules:
        raise GrammarError("a GBNF grammar needs a rule named root (root ::= ...)")
    nullable: set[str] = set()

    def can_be_empty(item: Item) -> bool:
        kind, value = item
        if kind == "name":
            return bool(value in nullable)
        if kind == "group":
            return any(all(can_be_empty(i) for i in alt) for alt in value)
        return bool(value)

    changed = True
    while changed:
        before = len(nullable)
        nullable |= {n for n, alts in rules.items() if any(all(can_be_empty(i) for i in a) for a in alts)}
        changed = len(nullable) != before

    def leftmost(alternatives: list[list[Item]]) -> set[str]:
        names: set[str] = set()
        for alt in alternatives:
            for kind, value in alt:
                if kind == "name":
                    if value not in rules:
                        raise GrammarError(f"rule {value!r} is used but not defined")
                    names.add(value)
                elif kind == "group":
                    names |= leftmost(value)
                if not can_be_empty((kind, value)):
                    break
        return names

    edges = {name: leftmost(alts) for name, alts in rules.items()}
    for name in rules:
        seen, todo = set(), list(edges[name])
        while todo:
            current = todo.pop()
            if current == name:
                raise GrammarError(f"rule {name!r} is left-recursive, which llama.cpp rejects")
            if current not in seen:
                seen.add(current)
                todo += edges[current]
