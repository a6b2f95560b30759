"""Scripted chat answers from the vLLM look-alike (:class:`fault_server.FaultServer`) for the
framework-model tests: a tool call, a text with thinking, whole or streamed, and what was sent."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from pydantic import BaseModel

import unillm
from unillm import RetryPolicy, Timeouts
from unillm.testing.fault_server import CHAT, FaultServer, Raw

USAGE = {"prompt_tokens": 7, "completion_tokens": 5, "total_tokens": 12}


class Capital(BaseModel):
    """The structured answer the framework tests ask for."""

    country: str
    capital: str


def get_weather(city: str) -> str:
    """Get the current weather in a city."""
    return f"snowy in {city}"


def connect(server: FaultServer) -> unillm.LLM:
    """A client of the look-alike that does not retry."""
    return unillm.connect(
        "vllm", server.url, model="tiny", retry=RetryPolicy(attempts=1), timeouts=Timeouts(connect=2, read=10)
    )


def call(name: str, arguments: dict[str, Any], ident: str = "call_1") -> dict[str, Any]:
    """One OpenAI tool call."""
    return {"id": ident, "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}


def answer(
    server: FaultServer,
    *,
    text: str | None = None,
    reasoning: str | None = None,
    calls: list[dict[str, Any]] | None = None,
    stream: bool = False,
) -> None:
    """Script the next chat answers: ``text``, ``reasoning`` and tool ``calls``, whole or as SSE."""
    finish = "tool_calls" if calls else "stop"
    if not stream:
        message: dict[str, Any] = {"role": "assistant", "content": text, "reasoning_content": reasoning}
        if calls:
            message["tool_calls"] = calls
        body = {
            "id": "chatcmpl-1",
            "model": "tiny",
            "usage": USAGE,
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        }
        server.script(CHAT, Raw(200, json.dumps(body).encode()))
        return
    deltas: list[dict[str, Any]] = [{"role": "assistant", "content": ""}]
    if reasoning:
        deltas += [
            {"reasoning_content": reasoning[: len(reasoning) // 2]},
            {"reasoning_content": reasoning[len(reasoning) // 2 :]},
        ]
    if text:
        deltas += [{"content": text[: len(text) // 2]}, {"content": text[len(text) // 2 :]}]
    for i, c in enumerate(calls or ()):
        head = {
            "index": i,
            "id": c["id"],
            "type": "function",
            "function": {"name": c["function"]["name"], "arguments": ""},
        }
        deltas += [
            {"tool_calls": [head]},
            {"tool_calls": [{"index": i, "function": {"arguments": c["function"]["arguments"]}}]},
        ]
    chunks: list[dict[str, Any]] = [
        {"id": "chatcmpl-1", "model": "tiny", "choices": [{"index": 0, "delta": d, "finish_reason": None}]}
        for d in deltas
    ]
    chunks[-1]["choices"][0]["finish_reason"] = finish
    chunks.append({"id": "chatcmpl-1", "model": "tiny", "choices": [], "usage": USAGE})
    events = [f"data: {json.dumps(c)}\n\n".encode() for c in chunks] + [b"data: [DONE]\n\n"]
    server.script(CHAT, Raw(200, events, content_type="text/event-stream"))


def sent(server: FaultServer) -> dict[str, Any]:
    """The body of the last chat request."""
    body: dict[str, Any] = server.seen(CHAT)[-1].body
    return body


@pytest.fixture(scope="module")
def server() -> Iterator[FaultServer]:
    """The look-alike, one per test module (import this fixture into the module)."""
    with FaultServer(model="tiny") as s:
        yield s
    assert s.errors == [], f"the look-alike server itself failed: {s.errors}"


@pytest.fixture
async def llm(server: FaultServer) -> AsyncIterator[unillm.LLM]:
    """A client of the look-alike; the scripted answers and the recorded requests are cleared after."""
    async with connect(server) as client:
        yield client
    server.scripts.clear()
    server.requests.clear()
