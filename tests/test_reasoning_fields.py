"""``r.reasoning`` and streamed ``d.reasoning`` from each place an OpenAI-layout engine puts the
thought: vLLM's ``reasoning``, the older ``reasoning_content`` (SGLang, llama.cpp, vLLM < 0.10.2),
or nowhere (split client-side from the template's markers); ``r.text`` is the answer alone."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

import unillm
from unillm.testing.mock_answers import discovery

pytestmark = pytest.mark.anyio
MESSAGES = [{"role": "user", "content": "2+2?"}]


def sse(*events: dict[str, Any] | str) -> bytes:
    return b"".join(f"data: {e if isinstance(e, str) else json.dumps(e)}\n\n".encode() for e in events)


def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {"id": "c", "model": "tiny", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


def engine(answer_body: dict[str, Any] | bytes) -> unillm.LLM:
    def answer(request: httpx.Request) -> httpx.Response:
        if (found := discovery(request, version="0.11.0")) is not None:
            return found
        if isinstance(answer_body, bytes):
            return httpx.Response(200, content=answer_body, headers={"content-type": "text/event-stream"})
        return httpx.Response(200, json=answer_body)

    return unillm.LLM("vllm", "http://engine.invalid", http_transport=httpx.MockTransport(answer))


def message_body(message: dict[str, Any], usage: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "id": "c",
        "model": "tiny",
        "choices": [{"index": 0, "message": {"role": "assistant", **message}, "finish_reason": "stop"}],
        "usage": usage or {"prompt_tokens": 3, "completion_tokens": 5},
    }


@pytest.mark.parametrize("field", ["reasoning", "reasoning_content"])
async def test_the_engines_reasoning_field_is_the_reasoning(field: str) -> None:
    body = message_body({"content": "\n\nFour.", field: "2 and 2 make 4."})
    async with engine(body) as llm:
        r = await llm.generate(messages=MESSAGES)
    assert (r.reasoning, r.text) == ("2 and 2 make 4.", "Four.")


async def test_a_thought_left_in_the_text_is_split_client_side() -> None:
    body = message_body({"content": "<think>2 and 2 make 4.</think>\n\nFour."})
    async with engine(body) as llm:
        r = await llm.generate(messages=MESSAGES)
    assert (r.reasoning, r.text) == ("2 and 2 make 4.", "Four.")


async def test_an_answer_without_a_thought_has_no_reasoning() -> None:
    async with engine(message_body({"content": "Four.", "reasoning": None})) as llm:
        r = await llm.generate(messages=MESSAGES)
    assert (r.reasoning, r.text) == (None, "Four.")


async def test_reasoning_tokens_are_read_from_the_completion_token_details() -> None:
    usage = {"prompt_tokens": 3, "completion_tokens": 9, "completion_tokens_details": {"reasoning_tokens": 6}}
    async with engine(message_body({"content": "Four."}, usage)) as llm:
        r = await llm.generate(messages=MESSAGES)
    assert r.usage.reasoning_tokens == 6


@pytest.mark.parametrize(
    "deltas",
    [
        pytest.param(
            [
                {"role": "assistant", "content": ""},
                {"reasoning": "2 and 2"},
                {"reasoning": " make 4."},
                {"content": "\n\nFour"},
                {"content": "."},
            ],
            id="reasoning-fields",
        ),
        pytest.param(
            [
                {"content": "<th"},
                {"content": "ink>2 and 2 make 4.</"},
                {"content": "think>\n\nFo"},
                {"content": "ur."},
            ],
            id="markers-in-the-text-split-across-chunks",
        ),
    ],
)
async def test_a_streamed_thought_arrives_as_reasoning_deltas(deltas: list[dict[str, Any]]) -> None:
    body = sse(*(chunk(d) for d in deltas[:-1]), chunk(deltas[-1], finish="stop"), "[DONE]")
    async with engine(body) as llm, llm.stream(messages=MESSAGES) as s:
        got = [d async for d in s]
    assert (s.reasoning, s.text) == ("2 and 2 make 4.", "Four.")
    assert not any("<" in d.text or "<" in d.reasoning for d in got)  # no marker leaks


async def test_a_held_back_partial_marker_is_released_at_the_finish() -> None:
    body = sse(chunk({"content": "<thi"}, finish="length"), "[DONE]")
    async with engine(body) as llm, llm.stream(messages=MESSAGES) as s:
        await s.collect()
    assert (s.reasoning, s.text) == ("", "<thi")


def get_time(city: str) -> str:
    """Local time in a city."""
    return city


async def test_a_call_forced_by_a_constraint_keeps_the_thought() -> None:
    # a connected vLLM: unillm forces the call with a JSON schema, which the server applies after the thought
    body = message_body({"content": '{"city": "Oslo"}', "reasoning": "The time, then."})
    async with engine(body) as llm:
        r = await llm.generate(messages=MESSAGES, tools=[get_time], tool_choice="get_time")
    assert r.reasoning == "The time, then." and [(c.name, c.parsed) for c in r.tool_calls] == [
        ("get_time", {"city": "Oslo"})
    ]


async def test_a_streamed_call_forced_by_a_constraint_keeps_the_thought() -> None:
    stream = sse(
        chunk({"reasoning": "The time, then."}),
        chunk({"content": '{"city": '}),
        chunk({"content": '"Oslo"}'}, finish="stop"),
        "[DONE]",
    )
    async with (
        engine(stream) as llm,
        llm.stream(messages=MESSAGES, tools=[get_time], tool_choice="get_time") as s,
    ):
        await s.collect()
    assert s.reasoning == "The time, then." and [c.parsed for c in s.tool_calls] == [{"city": "Oslo"}]


# -- issue 29: the same reasoning whole and streamed, however the stream is cut ----------------------
THOUGHT_IN_TEXT = "<think>\nLet me think.\n</think>\n\n4"
THOUGHT_FIELD, ANSWER_FIELD = "\nLet me think.\n", "\n\n4"  # how a reasoning parser splits it


def cuts(text: str) -> list[list[str]]:
    """``text`` cut in two at every position, and cut into single characters."""
    return [[text[:i], text[i:]] for i in range(len(text) + 1)] + [list(text)]


async def whole(message: dict[str, Any]) -> tuple[str | None, str]:
    async with engine(message_body(message)) as llm:
        r = await llm.generate(messages=MESSAGES)
    return r.reasoning, r.text


async def streamed(deltas: list[dict[str, Any]]) -> tuple[str, str]:
    llm = engine(sse(*map(chunk, deltas), chunk({}, "stop"), "[DONE]"))
    async with llm, llm.stream(messages=MESSAGES) as s:
        async for _ in s:
            pass
    return s.reasoning, s.text


async def test_a_thought_in_the_text_gives_the_same_reasoning_whole_and_streamed() -> None:
    assert await whole({"content": THOUGHT_IN_TEXT}) == ("Let me think.", "4")
    for pieces in cuts(THOUGHT_IN_TEXT):
        assert await streamed([{"content": p} for p in pieces]) == ("Let me think.", "4"), pieces


async def test_the_engines_reasoning_field_gives_the_same_reasoning_whole_and_streamed() -> None:
    assert await whole({"content": ANSWER_FIELD, "reasoning": THOUGHT_FIELD}) == ("Let me think.", "4")
    for pieces in cuts(THOUGHT_FIELD):
        deltas = [*({"reasoning": p} for p in pieces), *({"content": c} for c in ANSWER_FIELD)]
        assert await streamed(deltas) == ("Let me think.", "4"), pieces
