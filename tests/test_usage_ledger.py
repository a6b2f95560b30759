"""One usage ledger (issue 33, item 6): cached prompt tokens and reasoning tokens, as the engine
reports them in ``usage.*_details``, on every call of an OpenAI-shaped engine; None when it does
not report them, MalformedResponse when it reports something that is no count."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import pytest

import unillm
from unillm import RetryPolicy
from unillm.adapter.openai_compat import parse_usage
from unillm.results import Usage
from unillm.testing.fault_server import CHAT, COMPLETIONS, FaultServer, Raw

pytestmark = pytest.mark.anyio
MESSAGES = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def server() -> Iterator[FaultServer]:
    with FaultServer(model="tiny") as s:
        yield s
    assert s.errors == []


@pytest.fixture(autouse=True)
def clean(server: FaultServer) -> Iterator[None]:
    yield
    server.scripts.clear()
    server.cached_tokens = None


def connect(server: FaultServer) -> unillm.LLM:
    return unillm.connect("vllm", server.url, model="tiny", retry=RetryPolicy(attempts=1))


async def generate(llm: unillm.LLM) -> Usage:
    return (await llm.generate("hi", max_tokens=4)).usage


async def chat(llm: unillm.LLM) -> Usage:
    return (await llm.generate(messages=MESSAGES, max_tokens=4)).usage


async def stream(llm: unillm.LLM) -> Usage:
    async with llm.stream("hi", max_tokens=4) as s:
        return _last_usage([d.usage async for d in s])


async def chat_stream(llm: unillm.LLM) -> Usage:
    async with llm.stream(messages=MESSAGES, max_tokens=4) as s:
        return _last_usage([d.usage async for d in s])


def _last_usage(usages: list[Usage | None]) -> Usage:
    assert usages[-1] is not None, "the stream ended without its usage"
    return usages[-1]


CALLS: dict[str, Callable[[unillm.LLM], Awaitable[Usage]]] = {
    "generate": generate,
    "chat": chat,
    "stream": stream,
    "chat_stream": chat_stream,
}


def test_cached_and_reasoning_tokens_come_from_the_usage_details() -> None:
    usage = parse_usage(
        {
            "prompt_tokens": 40,
            "completion_tokens": 9,
            "prompt_tokens_details": {"cached_tokens": 32},
            "completion_tokens_details": {"reasoning_tokens": 6},
        }
    )
    assert (usage.cached_tokens, usage.reasoning_tokens) == (32, 6)


@pytest.mark.parametrize(
    "usage",
    [
        {"prompt_tokens": 4},
        {"prompt_tokens": 4, "prompt_tokens_details": None},
        {"prompt_tokens_details": {}},
    ],
    ids=["absent", "null", "empty"],
)
def test_an_engine_that_reports_no_cached_tokens_gives_none(usage: dict[str, Any]) -> None:
    assert parse_usage(usage).cached_tokens is None


@pytest.mark.parametrize("call", CALLS)
async def test_every_call_reports_the_engines_cached_tokens(server: FaultServer, call: str) -> None:
    server.cached_tokens = 3
    async with connect(server) as llm:
        usage = await CALLS[call](llm)
    assert usage.cached_tokens == 3


@pytest.mark.parametrize("call", CALLS)
async def test_every_call_gives_none_when_the_engine_does_not_report_them(
    server: FaultServer, call: str
) -> None:
    async with connect(server) as llm:
        usage = await CALLS[call](llm)
    assert usage.cached_tokens is None


BAD_COUNTS = [-1, "32", True, 1.5, [32], {"n": 32}]
BAD_DETAILS = [
    *({"prompt_tokens_details": {"cached_tokens": v}} for v in BAD_COUNTS),
    *({"completion_tokens_details": {"reasoning_tokens": v}} for v in BAD_COUNTS),
    {"prompt_tokens_details": "32"},
    {"completion_tokens_details": [6]},
]


def _answer(details: dict[str, Any], stream: bool) -> Raw:
    usage = {"prompt_tokens": 40, "completion_tokens": 1, **details}
    choice = {"index": 0, "text": "a", "finish_reason": "stop"}
    if not stream:
        return Raw(200, json.dumps({"model": "tiny", "choices": [choice], "usage": usage}).encode())
    docs = [{"model": "tiny", "choices": [choice]}, {"model": "tiny", "choices": [], "usage": usage}]
    events = [f"data: {json.dumps(d)}\n\n".encode() for d in docs] + [b"data: [DONE]\n\n"]
    return Raw(200, events, content_type="text/event-stream")


@pytest.mark.parametrize("details", BAD_DETAILS, ids=json.dumps)
@pytest.mark.parametrize("call", ["generate", "stream"])
async def test_a_detail_count_that_is_no_count_is_malformed_response(
    server: FaultServer, details: dict[str, Any], call: str
) -> None:
    server.script(COMPLETIONS, _answer(details, stream=call == "stream"))
    async with connect(server) as llm:
        with pytest.raises(unillm.MalformedResponse, match="tokens"):
            await CALLS[call](llm)


async def test_a_chat_answer_reports_cached_and_reasoning_tokens(server: FaultServer) -> None:
    usage = {
        "prompt_tokens": 40,
        "completion_tokens": 9,
        "prompt_tokens_details": {"cached_tokens": 32},
        "completion_tokens_details": {"reasoning_tokens": 6},
    }
    answer = {"model": "tiny", "choices": [{"index": 0, "message": {"content": "a"}}], "usage": usage}
    server.script(CHAT, Raw(200, json.dumps(answer).encode()))
    async with connect(server) as llm:
        got = await chat(llm)
    assert (got.cached_tokens, got.reasoning_tokens, got.prompt_tokens) == (32, 6, 40)


def test_usages_add_up_with_their_details() -> None:
    a = Usage(prompt_tokens=40, completion_tokens=9, cached_tokens=32, reasoning_tokens=6)
    b = Usage(prompt_tokens=50, completion_tokens=1, cached_tokens=40)
    total = a + b
    assert (total.prompt_tokens, total.total_tokens, total.cached_tokens, total.reasoning_tokens) == (
        90,
        100,
        72,
        6,
    )
    assert (Usage(prompt_tokens=1) + Usage(prompt_tokens=2)).cached_tokens is None
