"""Pure judgements: from the answers a cell got, whether the option took effect, and the evidence.

Each returns ``(verdict, evidence)``; none does I/O, so each is tested on hand-made answers.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from typing import Any

from unillm.probing.asking import Answer
from unillm.probing.report import Verdict

Judged = tuple[Verdict, str]


def _short(text: str, limit: int = 24) -> str:
    return repr(text if len(text) <= limit else text[:limit] + "…")


def identical(answers: Sequence[Answer], what: str) -> Judged:
    """Honoured when every answer's text is the same (``what``: the setting, for the evidence).

    Args:
        answers: At least two answers to the same request.
        what: The setting that should make them equal, e.g. "temperature=0".
    """
    texts = {a.text for a in answers}
    if len(texts) == 1:
        return "honoured", f"{len(answers)}/{len(answers)} identical at {what}"
    return "ignored", f"{len(texts)} different texts in {len(answers)} at {what}"


def reproducible(same_seed: Sequence[Answer], other_seed: Answer) -> Judged:
    """Seed at temperature > 0: the same seed repeats the text, another seed changes it.

    Args:
        same_seed: Answers with one seed.
        other_seed: An answer with another seed.
    """
    texts = {a.text for a in same_seed}
    if len(texts) > 1:
        return "ignored", f"the same seed gave {len(texts)} different texts in {len(same_seed)}"
    if other_seed.text in texts:
        return "unmeasurable", "another seed gave the same text too (the model's output does not vary)"
    return "honoured", f"{len(same_seed)}/{len(same_seed)} identical with one seed; another seed differs"


def exact_length(answer: Answer, max_tokens: int) -> Judged:
    """``max_tokens``: the answer has at most that many tokens (exactly, unless it stopped early).

    Args:
        answer: An answer to a request with ``max_tokens``.
        max_tokens: What was asked.
    """
    got, finish = answer.completion_tokens, answer.choices[0].finish_reason
    if got is None:
        return "unmeasurable", "the answer reports no completion_tokens"
    if got > max_tokens:
        return "ignored", f"completion_tokens={got} > max_tokens={max_tokens}"
    if got == max_tokens:
        return "honoured", f"completion_tokens={got} == max_tokens, finish_reason={finish!r}"
    if finish == "stop":
        return "unmeasurable", f"the model stopped by itself after {got} < {max_tokens} tokens"
    return "ignored", f"completion_tokens={got} < max_tokens={max_tokens} with finish_reason={finish!r}"


def stop_word(baseline: str) -> str | None:
    """A stop string taken from a greedy answer (its first occurrence): from the middle on, else
    nearer the start (an answer that repeats itself from the middle on); None when the answer is
    too short to cut.

    Args:
        baseline: The greedy answer without ``stop``.
    """
    middle = max(3, len(baseline) // 3)
    for start in [*range(middle, len(baseline) - 3), *range(3, middle)]:
        word = baseline[start : start + 3]
        if word.strip() and baseline.find(word) == start:
            return word
    return None


def stopped(baseline: str, word: str, answer: Answer) -> Judged:
    """Stop string: the greedy answer is cut just before ``word``.

    Args:
        baseline: The greedy answer without ``stop``.
        word: The stop string sent.
        answer: The greedy answer with ``stop=[word]``.
    """
    text, cut = answer.text, baseline[: baseline.find(word)]
    if word in text:
        return "ignored", f"stop={word!r} sent, yet the answer goes on past it: {_short(text)}"
    if text == cut:
        return (
            "honoured",
            f"cut before {word!r} after {len(cut)} chars, finish_reason={answer.choices[0].finish_reason!r}",
        )
    return "unmeasurable", f"the greedy answer changed ({_short(text)} vs {_short(cut)})"


def logprob_counts(answer: Answer, top: int) -> Judged:
    """``logprobs`` + ``top_logprobs``: a logprob per token with ``top`` alternatives each.

    Args:
        answer: An answer to a request with ``logprobs=True, top_logprobs=top``.
        top: The number of alternatives asked for.
    """
    counts = answer.choices[0].top_counts
    if not counts:
        return "ignored", "no logprobs in the answer"
    wrong = sorted({c for c in counts if c != top})
    if wrong:
        return "ignored", f"top_logprobs={top} asked, got {wrong} alternatives"
    return "honoured", f"{len(counts)} tokens with {top} alternatives each"


def choices(answer: Answer, n: int) -> Judged:
    """``n``: as many choices as asked.

    Args:
        answer: An answer to a request with ``n``.
        n: The number of choices asked for.
    """
    got = len(answer.choices)
    if got != n:
        return "ignored", f"n={n} asked, got {got} choice(s)"
    return "honoured", f"{got} choices, {len({c.text for c in answer.choices})} distinct"


def changed(baseline: Answer, answer: Answer, what: str) -> Judged:
    """A penalty (or LoRA) changes the greedy answer; unchanged counts as ignored only when the
    baseline gives it something to act on (a token repeated).

    Args:
        baseline: The greedy answer without the setting.
        answer: The greedy answer with it.
        what: The setting, for the evidence.
    """
    if answer.text != baseline.text:
        at = next((i for i, (a, b) in enumerate(zip(baseline.text, answer.text, strict=False)) if a != b), 0)
        was, now = _short(baseline.text[at:], 16), _short(answer.text[at:], 16)
        return "honoured", f"{what} changed the greedy answer from char {at}: {was} -> {now}"
    units = baseline.choices[0].tokens or tuple(baseline.text.split())
    if len(set(units)) == len(units):
        return "unmeasurable", f"the greedy answer repeats no token for {what} to act on"
    return "ignored", f"{what} left the greedy answer unchanged though it repeats tokens"


def judgeable(answer: Answer, could_grow: Callable[[str], bool]) -> bool:
    """Whether a constrained answer tells anything: it ended by itself, or it was cut by
    ``max_tokens`` where no valid answer could start with it.

    Args:
        answer: One sampled answer.
        could_grow: Whether a cut text is the start of some valid one.
    """
    return answer.choices[0].finish_reason != "length" or not could_grow(answer.text)


def valid_share(
    answers: Sequence[Answer],
    is_valid: Callable[[str], bool],
    could_grow: Callable[[str], bool],
    what: str,
) -> Judged:
    """A constraint: every answer is valid. One cut by ``max_tokens`` counts only when no valid
    answer could start with it (it went wrong before the cut).

    Args:
        answers: Sampled answers to the constrained request.
        is_valid: Whether one whole text obeys the constraint.
        could_grow: Whether a cut text is the start of some valid one.
        what: The constraint, for the evidence.
    """
    judged = [a for a in answers if judgeable(a, could_grow)]
    if not judged:
        return "unmeasurable", f"all {len(answers)} answers were cut by max_tokens while still valid"
    bad = [a.text for a in judged if not is_valid(a.text)]
    if bad:
        return "ignored", f"{len(bad)}/{len(judged)} {what} answers invalid, e.g. {_short(bad[0])}"
    return "honoured", f"{len(judged)}/{len(judged)} valid {what} (temperature 1)"


def matches_schema(schema: dict[str, Any]) -> Callable[[str], bool]:
    """A validity check for JSON under ``schema``.

    Args:
        schema: The JSON schema.
    """
    import jsonschema

    def check(text: str) -> bool:
        try:
            jsonschema.validate(json.loads(text), schema)
        except (ValueError, jsonschema.ValidationError):
            return False
        return True

    return check


def matches_regex(pattern: str) -> Callable[[str], bool]:
    """A validity check for a text matching ``pattern`` whole.

    Args:
        pattern: The regular expression.
    """
    return lambda text: re.fullmatch(pattern, text) is not None


def thinking_switch(on: Answer, off: Answer) -> Judged:
    """``thinking=False`` leaves no reasoning where ``thinking=True`` gives some.

    Args:
        on: The answer with ``thinking=True``.
        off: The answer with ``thinking=False``.
    """
    if off.choices[0].reasoning:
        return "ignored", f"thinking=False still thought: {_short(off.choices[0].reasoning or '')}"
    if not on.choices[0].reasoning:
        return "unmeasurable", "the model did not think with thinking=True either"
    return "honoured", "reasoning with thinking=True, none with thinking=False"


def reasoning_split(answer: Answer) -> Judged:
    """The thinking comes apart from the text (no think tags left in it).

    Args:
        answer: An answer with ``thinking=True``.
    """
    text, reasoning = answer.text, answer.choices[0].reasoning
    if "<think>" in text or "</think>" in text:
        return "ignored", f"think tags left in the text: {_short(text)}"
    if reasoning:
        return "honoured", f"{len(reasoning)} chars of reasoning apart from the text"
    return "unmeasurable", "the model did not think (no reasoning, no think tags)"


def tool_called(answer: Answer, mode: str, tool: str) -> Judged:
    """``tool_choice``: none calls nothing, required and named call (the named: that tool),
    auto is accepted either way.

    Args:
        answer: An answer to a request with ``tools`` and ``tool_choice``.
        mode: "none", "auto", "required" or "named".
        tool: The name of the only tool offered.
    """
    calls = answer.choices[0].tool_calls
    if mode == "none":
        return (
            ("ignored", f"tool_choice=none, yet it called {list(calls)}")
            if calls
            else (
                "honoured",
                "no tool call",
            )
        )
    if mode == "auto":
        return "honoured", f"accepted; the model {'called ' + calls[0] if calls else 'answered text'}"
    if not calls:
        first = answer.choices[0]
        raw = first.broken_calls or (first.text,)
        if first.finish_reason == "length" and all(r.lstrip()[:1] in ("", "{") for r in raw):
            return "unmeasurable", f"tool_choice={mode}: the call was cut by max_tokens before it closed"
        return "ignored", f"tool_choice={mode} sent, the answer has no tool call: {_short(raw[0])}"
    if mode == "named" and calls[0] != tool:
        return "ignored", f"named {tool!r}, it called {calls[0]!r}"
    return "honoured", f"called {calls[0]!r}"


def stream_usage(answer: Answer) -> Judged:
    """A stream ends with the usage (completion tokens counted).

    Args:
        answer: A streamed answer.
    """
    if not answer.completion_tokens:
        return "ignored", "the stream carried no usage"
    return "honoured", f"the last chunk counts {answer.completion_tokens} completion tokens"


def cache_hit(second: Answer) -> Judged:
    """Cached tokens: the second of two identical long prompts reports cached prompt tokens.

    Args:
        second: The answer to the repeated prompt.
    """
    if second.cached_tokens is None:
        return "unmeasurable", "no cached-token count in the usage"
    if second.cached_tokens == 0:
        return "unmeasurable", "0 cached tokens on a repeated prompt (prefix caching off?)"
    return "honoured", f"{second.cached_tokens} cached prompt tokens on the repeat"
