"""Thinking on Ollama: ``thinking=`` and ``reasoning_effort=`` are its ``think`` field (a bool, or
a level "low"/"medium"/"high": ThinkValue in api/types.go at fb30760), ``thinking_budget=`` is
refused (Ollama has no field for it), and the thought comes back in ``r.reasoning``: Ollama's
``message.thinking`` / ``thinking`` fields, whole and streamed, or ``<think>`` split off the
content when no field came."""

from __future__ import annotations

from typing import Any

import pytest
from ollama_server import OllamaServer, connect
from ollama_types import check_request
from unillm_ollama import OllamaAdapter

from unillm.adapter.base import EngineInfo
from unillm.errors import InvalidRequest, UnsupportedFeature
from unillm.options import make_request

ADAPTER = OllamaAdapter()
INFO = EngineInfo(engine="ollama", model="qwen3:0.6b", version="0.32.15")
CHAT = [{"role": "user", "content": "2+2?"}]
CREATED = "2026-08-21T10:00:00.000000Z"


def sent(**options: Any) -> dict[str, Any]:
    call = ADAPTER.build(make_request(None, CHAT, None, options, stream=False), INFO)
    check_request(call.path, call.json)  # Ollama would keep every key
    assert call.json is not None
    return dict(call.json)


@pytest.mark.parametrize("on", [True, False])
def test_thinking_is_sent_as_think(on: bool) -> None:
    assert sent(thinking=on)["think"] is on


@pytest.mark.parametrize(
    ("effort", "think"), [("low", "low"), ("medium", "medium"), ("high", "high"), ("none", False)]
)
def test_reasoning_effort_is_the_think_level(effort: str, think: Any) -> None:
    assert sent(reasoning_effort=effort)["think"] == think


def test_thinking_with_an_effort_sends_the_level() -> None:
    assert sent(thinking=True, reasoning_effort="high")["think"] == "high"


def test_thinking_off_with_an_effort_is_refused_as_a_contradiction() -> None:
    with pytest.raises(InvalidRequest, match="contradict"):
        sent(thinking=False, reasoning_effort="high")


def test_an_effort_ollama_has_no_level_for_is_refused_before_sending() -> None:
    with pytest.raises(UnsupportedFeature, match="minimal") as e:
        sent(reasoning_effort="minimal")
    assert e.value.engine == "ollama" and "low" in e.value.alternative


def test_a_thinking_budget_is_refused_before_sending() -> None:
    with pytest.raises(UnsupportedFeature, match="thinking_budget") as e:
        sent(thinking_budget=64)
    assert e.value.engine == "ollama" and e.value.why and "reasoning_effort" in e.value.alternative


def test_no_thinking_option_sends_no_think() -> None:
    assert "think" not in sent()


def chat_answer(content: str, thinking: str | None = None) -> dict[str, Any]:
    message = {"role": "assistant", "content": content}
    if thinking is not None:
        message["thinking"] = thinking
    return {"model": "qwen3:0.6b", "created_at": CREATED, "message": message, "done": True}


def test_a_chat_answers_thinking_is_the_reasoning() -> None:
    request = make_request(None, CHAT, None, {}, stream=False)
    choice = ADAPTER.parse(chat_answer("4", "2 and 2 make 4"), request, INFO).choices[0]
    assert (choice.reasoning, choice.text) == ("2 and 2 make 4", "4")


def test_a_generate_answers_thinking_is_the_reasoning() -> None:
    body = {"model": "m", "created_at": CREATED, "response": "4", "thinking": "add", "done": True}
    request = make_request("2+2=", None, None, {}, stream=False)
    choice = ADAPTER.parse(body, request, INFO).choices[0]
    assert (choice.reasoning, choice.text) == ("add", "4")


def test_think_markers_in_the_content_are_split_when_no_field_came() -> None:
    request = make_request(None, CHAT, None, {}, stream=False)
    choice = ADAPTER.parse(chat_answer("<think>2 and 2</think>\n\n4"), request, INFO).choices[0]
    assert (choice.reasoning, choice.text) == ("2 and 2", "4")


def line(content: str, thinking: str = "", done: bool = False) -> str:
    import json

    body = chat_answer(content, thinking or None)
    body["done"] = done
    if done:
        body["done_reason"] = "stop"
    return json.dumps(body)


def test_a_streamed_chunk_with_only_thinking_is_a_reasoning_delta() -> None:
    decoder = ADAPTER.decoder(make_request(None, CHAT, None, {}, stream=True), INFO)
    deltas = [
        d
        for text in (line("", "2 and"), line("", " 2"), line("4"), line("", done=True))
        for d in decoder.feed(text)
    ]
    assert "".join(d.reasoning for d in deltas) == "2 and 2"
    assert "".join(d.text for d in deltas) == "4"


def test_streamed_think_markers_are_split_when_no_field_came() -> None:
    decoder = ADAPTER.decoder(make_request(None, CHAT, None, {}, stream=True), INFO)
    pieces = ("<thi", "nk>2 and 2</th", "ink>4", "")
    deltas = [d for i, p in enumerate(pieces) for d in decoder.feed(line(p, done=i == len(pieces) - 1))]
    assert ("".join(d.reasoning for d in deltas), "".join(d.text for d in deltas)) == ("2 and 2", "4")


@pytest.fixture
def thinker() -> Any:
    """An Ollama look-alike serving a model that thinks (on unless ``think`` is false)."""
    with OllamaServer(
        library={"qwen3:0.6b": ["4"]}, store={"qwen3:0.6b"}, thinking={"qwen3:0.6b": ["2 and", " 2"]}
    ) as s:
        yield s
    assert s.errors == [] and s.dropped == [], (s.errors, s.dropped)


@pytest.mark.anyio
async def test_a_thinking_model_thinks_and_the_thought_is_read(thinker: OllamaServer) -> None:
    async with connect(thinker, model="qwen3:0.6b") as llm:
        whole = await llm.generate(messages=CHAT)
        async with llm.stream(messages=CHAT) as stream:
            streamed = [d async for d in stream]
    assert (whole.reasoning, whole.text) == ("2 and 2", "4")
    assert "".join(d.reasoning for d in streamed) == "2 and 2"


@pytest.mark.anyio
async def test_thinking_false_turns_a_thinking_model_off(thinker: OllamaServer) -> None:
    async with connect(thinker, model="qwen3:0.6b") as llm:
        r = await llm.generate(messages=CHAT, thinking=False)
    assert (r.reasoning, r.text) == (None, "4")
    assert thinker.requests[-1][1]["think"] is False


WEATHER = {
    "name": "get_weather",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
}


@pytest.mark.parametrize(
    "constraint",
    [{"output": {"type": "object"}}, {"tools": [WEATHER], "tool_choice": "get_weather"}],
    ids=["output", "forced call"],
)
def test_a_constraint_after_a_thought_goes_out_with_think(constraint: dict[str, Any]) -> None:
    # Ollama's /api/chat applies ``format`` once the thought has ended, for a model that can think
    # (ChatHandler's "structured outputs via double request", server/routes.go at fb30760), so
    # unillm sends both rather than refusing; a prompt with thinking is refused (raw: no template)
    options = {"thinking": True, **constraint}
    call = ADAPTER.build(make_request(None, CHAT, options.pop("output", None), options, stream=False), INFO)
    check_request(call.path, call.json)
    assert call.json is not None and call.json["think"] is True
    assert call.json["format"]["type"] == "object"
