"""Checks every engine's streams must pass: one final delta, with timings as vLLM bench defines them.

deltas = [d async for d in llm.stream("Hi", max_tokens=8)]
last = final_delta(deltas)          # raises AssertionError naming what is wrong
last.usage, last.finish_reason, last.timings.ttft_s
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from unillm.results import Completion, Delta, Timings


def final_delta(deltas: Sequence[Delta], *, usage: bool = True) -> Delta:
    """The last delta, after checking it is the only one with timings (and usage) and that its
    timings follow their definitions (TTFT, one ITL per gap between choice 0's content chunks
    (text or tool-call pieces),
    TPOT = (total - TTFT) / (output tokens - 1))."""
    assert deltas, "the stream yielded nothing"
    last = deltas[-1]
    early = [i for i, d in enumerate(deltas[:-1]) if d.usage is not None or d.timings is not None]
    assert not early, f"deltas {early} carry usage/timings before the final one"
    assert last.finish_reason is not None, "the final delta has no finish reason"
    assert not usage or last.usage is not None, "the final delta has no usage"
    t = last.timings
    assert isinstance(t, Timings), "the final delta has no timings"
    chunks = sum(1 for d in deltas if d.index == 0 and (d.text or d.tool_calls))
    assert len(t.itl_s) == max(0, chunks - 1), f"{len(t.itl_s)} ITLs for {chunks} content chunks"
    assert all(gap >= 0 for gap in t.itl_s)
    if chunks:
        assert t.ttft_s is not None and 0 <= t.ttft_s <= t.total_s
        assert t.ttft_s + math.fsum(t.itl_s) <= t.total_s + 1e-9
    tokens = last.usage.completion_tokens if last.usage else None
    if t.tpot_s is not None:
        assert tokens is not None and tokens > 1 and t.ttft_s is not None
        assert math.isclose(t.tpot_s, (t.total_s - t.ttft_s) / (tokens - 1))
    return last


async def forced_call_streams_alike(llm: Any, **args: Any) -> Completion[Any]:
    """Ask for one forced tool call (``args``: ``generate()``'s, e.g. ``tool_choice="required"``),
    whole and streamed; assert the whole answer's one call is valid and the stream's is the same.

    Args:
        llm: The client (an LLM or a Fleet).
        **args: The call's arguments, the same both ways.

    Returns:
        The whole answer.
    """
    whole: Completion[Any] = await llm.generate(**args)
    (call,) = whole.tool_calls
    assert call.valid, call
    async with llm.stream(**args) as stream:
        async for _ in stream:
            pass
    assert [(c.name, c.arguments) for c in stream.tool_calls] == [(call.name, call.arguments)]
    return whole
