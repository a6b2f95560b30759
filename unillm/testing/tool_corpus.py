"""Tool calls that parse the same whole or streamed: a generated corpus of calls (parallel
calls, nested JSON, unicode, empty arguments, arguments cut short) through each tool-call layout
unillm parses client-side, the whole answer against the stream split at every byte.

    answers = corpus(500)
    report = compare(answers)          # {"openai": (identical, total), "forced_required": ..., ...}

The layouts unillm parses itself (engines parse the model's text with their own tool parsers —
hermes, qwen25, llama3_json, mistral, pythonic — and send OpenAI-layout calls):

* ``openai``: an OpenAI-layout answer's ``tool_calls`` (whole) against its streamed ``tool_calls``
  deltas (vLLM, SGLang, TensorRT-LLM, llama.cpp, MLX): each call's arguments one character a
  delta, the server-sent-event body fed to unillm's event reader one byte at a time;
* ``forced_required`` / ``forced_named``: a call forced by a JSON-schema constraint (engines that
  cannot force calls themselves), read back from the answer text: ``{"name": ..., "arguments":
  {...}}`` or the arguments alone, streamed one character a chunk.

A call is identical when its id, name, arguments, parsed arguments and error are.
"""

from __future__ import annotations

import json
import random
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass
from typing import Any

from unillm.adapter.openai_compat import OpenAIStreamDecoder, with_tool_calls
from unillm.results import CompletionChoice, ToolCall
from unillm.tools import Tool, ToolCallAccumulator, to_tool_choice, to_tools

__all__ = ["LAYOUTS", "TOOLS", "Answer", "compare", "corpus", "streamed_openai", "whole_openai"]

LAYOUTS = ("openai", "forced_required", "forced_named")
_UNICODE = (
    "Zürich",
    "東京",
    "Ελλάδα",
    "🙂🚀",
    "naïve café",
    "\u2028line\u2029",
    'quo"te\\',
    "tab\tnew\nline",
    "\U0001d518\U0001d52b\U0001d526",
)
#: The corpus's tools: any object, no parameters, and typed nested parameters.
TOOLS: tuple[Tool, ...] = to_tools(
    [
        {"name": "lookup", "description": "Look anything up.", "parameters": {"type": "object"}},
        {"name": "ping", "description": "No arguments.", "parameters": {"type": "object", "properties": {}}},
        {
            "name": "book",
            "description": "Book a trip.",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string"},
                    "nights": {"type": "integer"},
                    "guests": {"type": "array", "items": {"type": "object"}},
                },
                "required": ["city"],
            },
        },
    ]
)


@dataclass(frozen=True, slots=True)
class Answer:
    """One model answer: its calls as (id, name, arguments JSON text), and the corpus shape."""

    calls: tuple[tuple[str, str, str], ...]
    shape: str


def _value(rng: random.Random, depth: int) -> Any:
    kind = rng.choice(
        ["str", "int", "float", "bool", "null", "list", "dict"] if depth < 4 else ["str", "int"]
    )
    if kind == "str":
        return rng.choice((*_UNICODE, "", "plain", "a b c", "{}[]:,"))
    if kind == "int":
        return rng.randint(-(10**12), 10**12)
    if kind == "float":
        return rng.choice([0.5, -1.25, 1e-7, 3.14159])
    if kind == "bool":
        return rng.random() < 0.5
    if kind == "null":
        return None
    if kind == "list":
        return [_value(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    return {
        rng.choice((*_UNICODE, "k", "key", "x")) + str(i): _value(rng, depth + 1)
        for i in range(rng.randint(0, 3))
    }


def _call(rng: random.Random, shape: str, n: int) -> tuple[str, str, str]:
    call_id = f"call_{n:05d}"
    if shape == "empty":
        return call_id, "ping", rng.choice(["{}", "{ }", ""])
    if shape == "cut":  # cut by max_tokens: both parses must report the same error
        text = json.dumps({"k": _value(rng, 1), "text": rng.choice(_UNICODE)}, ensure_ascii=False)
        return call_id, "lookup", text[: rng.randint(1, len(text) - 1)]
    if shape == "typed":
        args: dict[str, Any] = {"city": rng.choice(_UNICODE), "nights": rng.randint(1, 9)}
        if rng.random() < 0.5:
            args["guests"] = [{"name": rng.choice(_UNICODE), "age": rng.randint(1, 90)}]
        return call_id, "book", json.dumps(args, ensure_ascii=rng.random() < 0.3)
    depth = 0 if shape == "unicode" else 1
    args = {f"k{i}": _value(rng, depth) for i in range(rng.randint(1, 4))}
    if shape == "unicode":
        args["text"] = "".join(rng.choice(_UNICODE) for _ in range(3))
    return (
        call_id,
        "lookup",
        json.dumps(args, ensure_ascii=rng.random() < 0.3, indent=rng.choice([None, None, 2])),
    )


def corpus(calls: int = 500, seed: int = 0) -> list[Answer]:
    """Answers holding at least ``calls`` calls: one or several (parallel) each, of every shape.

    Args:
        calls: The fewest calls in all.
        seed: Seeds the generator (the same seed, the same corpus).
    """
    rng = random.Random(seed)
    answers: list[Answer] = []
    made = 0
    shapes = ("nested", "unicode", "empty", "typed", "parallel", "cut")
    while made < calls:
        shape = shapes[len(answers) % len(shapes)]
        count = rng.randint(2, 4) if shape == "parallel" else 1
        kinds = (
            [rng.choice(["nested", "unicode", "empty", "typed"]) for _ in range(count)]
            if count > 1
            else [shape]
        )
        answers.append(Answer(tuple(_call(rng, k, made + i) for i, k in enumerate(kinds)), shape))
        made += count
    return answers


def _key(calls: Iterable[ToolCall]) -> list[tuple[Any, ...]]:
    return [
        (c.id, c.name, c.arguments, json.dumps(c.parsed, sort_keys=True, default=str), c.error) for c in calls
    ]


# -- the OpenAI layout ---------------------------------------------------------------------------
def whole_openai(answer: Answer) -> list[ToolCall]:
    """The calls of the whole (non-streamed) OpenAI-layout answer."""
    raw = [{"id": i, "type": "function", "function": {"name": n, "arguments": a}} for i, n, a in answer.calls]
    return with_tool_calls(
        CompletionChoice(index=0, text="", finish_reason="tool_calls"), raw, TOOLS
    ).tool_calls


def _sse(answer: Answer) -> bytes:
    """The stream an engine sends: per call a head (id, name), then one delta per character."""
    chunks: list[dict[str, Any]] = []
    for index, (call_id, name, arguments) in enumerate(answer.calls):
        head = {
            "index": index,
            "id": call_id,
            "type": "function",
            "function": {"name": name, "arguments": ""},
        }
        chunks.append({"tool_calls": [head]})
        chunks += [{"tool_calls": [{"index": index, "function": {"arguments": ch}}]} for ch in arguments]
    events = [
        {"id": "x", "model": "m", "choices": [{"index": 0, "delta": d, "finish_reason": None}]}
        for d in chunks
    ]
    events.append(
        {"id": "x", "model": "m", "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}
    )
    body = "".join(f"data: {json.dumps(e, ensure_ascii=False)}\n\n" for e in events) + "data: [DONE]\n\n"
    return body.encode()


class _ByteAnswer:
    """A streamed HTTP answer whose body arrives in pieces of ``size`` bytes."""

    def __init__(self, body: bytes, size: int) -> None:
        self.headers = {"content-type": "text/event-stream"}
        self._body, self._size = body, size

    async def aiter_bytes(self) -> AsyncIterator[bytes]:
        for i in range(0, len(self._body), self._size):
            yield self._body[i : i + self._size]


async def streamed_openai(answer: Answer, piece_bytes: int = 1) -> list[ToolCall]:
    """The calls of the streamed answer, its body read ``piece_bytes`` bytes at a time."""
    from unillm.client.transport import event_stream

    decoder, acc = OpenAIStreamDecoder("corpus", chat=True), ToolCallAccumulator(TOOLS)
    async for data in event_stream(_ByteAnswer(_sse(answer), piece_bytes), "corpus"):  # type: ignore[arg-type]
        for delta in decoder.feed(data):
            acc.add(delta.tool_calls)
    return acc.calls()


# -- calls forced by a constraint, read from the answer text -------------------------------------
def _forced_text(call: tuple[str, str, str], layout: str) -> str:
    _, name, arguments = call
    if layout == "forced_named":
        return arguments
    return f'{{"name": {json.dumps(name, ensure_ascii=False)}, "arguments": {arguments or "{}"}}}'


def _forced(call: tuple[str, str, str], layout: str) -> tuple[list[ToolCall], list[ToolCall]]:
    """The whole and the streamed (one character a chunk) calls of a forced answer (ids aside:
    unillm makes them up, one per parse)."""
    choice = to_tool_choice(call[1] if layout == "forced_named" else "required", TOOLS)
    text = _forced_text(call, layout)
    whole = with_tool_calls(CompletionChoice(index=0, text=text, finish_reason="stop"), None, TOOLS, choice)
    decoder, acc = OpenAIStreamDecoder("corpus", forced=choice, chat=True), ToolCallAccumulator(TOOLS)
    pieces = [{"content": ch} for ch in text] + [{}]
    for i, delta in enumerate(pieces):
        finish = "stop" if i == len(pieces) - 1 else None
        chunk = {"id": "x", "model": "m", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
        for d in decoder.feed(json.dumps(chunk)):
            acc.add(d.tool_calls)
    same_id = [c.model_copy(update={"id": "forced"}) for c in whole.tool_calls]
    return same_id, [c.model_copy(update={"id": "forced"}) for c in acc.calls()]


async def compare(answers: list[Answer], piece_bytes: int = 1) -> dict[str, tuple[int, int]]:
    """How many calls parse identically whole and streamed, per layout: ``(identical, total)``.

    Args:
        answers: The corpus (:func:`corpus`).
        piece_bytes: The size of the pieces the streamed body arrives in.

    Returns:
        Per layout, the identical calls and all calls (a call the stream parses differently, or
        that raises anything but a ``UnillmError``, is not identical).
    """
    counts = dict.fromkeys(LAYOUTS, (0, 0))
    for answer in answers:
        whole, streamed = _key(whole_openai(answer)), _key(await streamed_openai(answer, piece_bytes))
        same = (
            sum(a == b for a, b in zip(whole, streamed, strict=False)) if len(whole) == len(streamed) else 0
        )
        done, total = counts["openai"]
        counts["openai"] = (done + same, total + len(answer.calls))
        for layout in ("forced_required", "forced_named"):
            for call in answer.calls:
                whole_calls, streamed_calls = _forced(call, layout)
                done, total = counts[layout]
                counts[layout] = (done + (_key(whole_calls) == _key(streamed_calls)), total + 1)
    return counts
