"""Streams end with one final delta (finish reason, usage, timings) and carry client timings.

The engine is a scripted SSE answer (httpx.MockTransport) in vLLM's layout, so each test states
exactly which chunks arrive; the real engines' streams are checked with the same
``unillm.testing.streams.final_delta`` in their own tests.
"""

from __future__ import annotations

import json
import math
from typing import Any

import httpx
import pytest

import unillm
from unillm.results import Delta, Timings
from unillm.testing.mock_answers import discovery
from unillm.testing.streams import final_delta

pytestmark = pytest.mark.anyio


def sse(*events: dict[str, Any] | str) -> bytes:
    return b"".join(f"data: {e if isinstance(e, str) else json.dumps(e)}\n\n".encode() for e in events)


def text_chunk(text: str, finish: str | None = None, index: int = 0) -> dict[str, Any]:
    return {
        "id": "cmpl-1",
        "object": "text_completion",
        "model": "tiny",
        "choices": [{"index": index, "text": text, "logprobs": None, "finish_reason": finish}],
    }


def chat_chunk(content: str | None, finish: str | None = None, role: bool = False) -> dict[str, Any]:
    delta: dict[str, Any] = {"role": "assistant", "content": ""} if role else {}
    if content is not None:
        delta["content"] = content
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "model": "tiny",
        "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
    }


def usage_chunk(completion_tokens: int) -> dict[str, Any]:
    return {
        "id": "cmpl-1",
        "object": "text_completion",
        "model": "tiny",
        "choices": [],
        "usage": {
            "prompt_tokens": 3,
            "completion_tokens": completion_tokens,
            "total_tokens": 3 + completion_tokens,
        },
    }


def engine(body: bytes) -> unillm.LLM:
    def answer(request: httpx.Request) -> httpx.Response:
        if (found := discovery(request)) is not None:
            return found
        return httpx.Response(200, content=body, headers={"content-type": "text/event-stream"})

    return unillm.LLM("vllm", "http://engine.invalid", http_transport=httpx.MockTransport(answer))


async def deltas_of(body: bytes, **options: Any) -> list[Delta]:
    async with engine(body) as llm:
        if "messages" in options:
            return [d async for d in llm.stream(**options)]
        return [d async for d in llm.stream("hi", **options)]


async def test_finish_then_usage_chunks_arrive_as_one_final_delta() -> None:
    deltas = await deltas_of(
        sse(text_chunk("a"), text_chunk("b"), text_chunk("c", "length"), usage_chunk(3), "[DONE]")
    )
    assert [d.text for d in deltas] == ["a", "b", "c"]  # no empty trailing usage delta
    last = final_delta(deltas)
    assert (last.finish_reason, last.usage) == ("length", unillm.Usage(prompt_tokens=3, completion_tokens=3))


async def test_chat_finish_in_an_empty_chunk_merges_with_the_usage() -> None:
    deltas = await deltas_of(
        sse(
            chat_chunk(None, role=True),
            chat_chunk("x"),
            chat_chunk("y"),
            chat_chunk("", "stop"),
            usage_chunk(2),
            "[DONE]",
        ),
        messages=[{"role": "user", "content": "hi"}],
    )
    assert [d.text for d in deltas] == ["x", "y", ""]
    last = final_delta(deltas)
    assert last.finish_reason == "stop" and last.usage is not None and last.usage.completion_tokens == 2


async def test_a_stream_without_usage_still_ends_with_finish_and_timings() -> None:
    deltas = await deltas_of(sse(text_chunk("a"), text_chunk("b", "stop"), "[DONE]"))
    last = final_delta(deltas, usage=False)
    assert last.usage is None and last.text == "b" and last.timings is not None
    assert last.timings.tpot_s is None  # no token count, no TPOT


async def test_timings_follow_vllm_bench_definitions() -> None:
    deltas = await deltas_of(
        sse(
            text_chunk("a"),
            text_chunk("b"),
            text_chunk("c"),
            text_chunk("d", "length"),
            usage_chunk(4),
            "[DONE]",
        )
    )
    t = final_delta(deltas).timings
    assert t is not None and t.ttft_s is not None and t.tpot_s is not None
    assert len(t.itl_s) == 3  # four content chunks, three gaps
    assert t.tpot_s == pytest.approx((t.total_s - t.ttft_s) / 3)
    assert t.tokens_per_s == pytest.approx(4 / t.total_s)
    assert t.first_token_s == t.ttft_s  # the earlier name still reads


async def test_several_choices_leave_tpot_undefined_and_still_end_once() -> None:
    deltas = await deltas_of(
        sse(
            text_chunk("a"),
            text_chunk("x", index=1),
            text_chunk("b", "length"),
            text_chunk("y", "length", index=1),
            usage_chunk(4),
            "[DONE]",
        ),
        n=2,
    )
    last = final_delta(deltas)
    assert [d.text for d in deltas] == ["a", "x", "b", "y"]
    assert [d.finish_reason for d in deltas] == [None, None, "length", "length"]
    assert last.timings is not None and last.timings.tpot_s is None and len(last.timings.itl_s) == 1


async def test_text_after_a_finish_releases_the_held_delta_in_order() -> None:
    # choice 0 finishes first, choice 1 keeps going: nothing is reordered or lost
    deltas = await deltas_of(
        sse(
            text_chunk("a", "length"),
            text_chunk("x", index=1),
            text_chunk("y", "length", index=1),
            usage_chunk(3),
            "[DONE]",
        ),
        n=2,
    )
    assert [(d.index, d.text, d.finish_reason) for d in deltas] == [
        (0, "a", "length"),
        (1, "x", None),
        (1, "y", "length"),
    ]
    final_delta(deltas)


async def test_generate_has_total_time_and_no_stream_timings() -> None:
    body = {
        "id": "cmpl-1",
        "object": "text_completion",
        "model": "tiny",
        "choices": [{"index": 0, "text": "abc", "finish_reason": "length"}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 3},
    }

    def answer(request: httpx.Request) -> httpx.Response:
        if (found := discovery(request, max_model_len=None)) is not None:
            return found
        return httpx.Response(200, json=body)

    async with unillm.LLM("vllm", "http://e.invalid", http_transport=httpx.MockTransport(answer)) as llm:
        r = await llm.generate("hi")
    t = r.timings
    assert t.total_s > 0 and t.ttft_s is None and t.itl_s == () and t.tpot_s is None
    assert t.tokens_per_s == pytest.approx(3 / t.total_s)


def test_timings_serialize_to_standard_json() -> None:
    t = Timings(total_s=1.0, ttft_s=0.25, itl_s=(0.1, 0.2), tpot_s=0.375, tokens_per_s=3.0)
    assert Timings.model_validate_json(t.model_dump_json()) == t
    assert math.isclose(t.ttft_s + sum(t.itl_s), 0.55)  # type: ignore[operator]
