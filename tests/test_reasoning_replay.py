"""An assistant turn's thought goes back to the engine once, as the engine reads it: in its own
field (vLLM's ``reasoning``, SGLang's and MLX's ``reasoning_content``, Ollama's ``thinking``),
inline between ``<think>`` markers, or dropped (``replay_reasoning=``; the default: the field
where the engine reads one, else dropped). ``r.message()`` and the ``run_tools`` /
``stream_tools`` transcripts carry each thought, and the next turn sends it back."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

import unillm
from unillm.adapter import get_adapter
from unillm.adapter.base import EngineInfo
from unillm.client.tool_loop import ToolRun
from unillm.content import normalize_messages
from unillm.embeddings import tokenize_request
from unillm.options import make_request
from unillm.testing.mock_answers import discovery

THOUGHT, ANSWER = "The user wants 2+2; that is 4.", "Four."
CHAT = [
    {"role": "user", "content": "2+2?"},
    {"role": "assistant", "content": ANSWER, "reasoning": THOUGHT},
    {"role": "user", "content": "And 3+3?"},
]
#: engine, version -> the field the thought goes back in (None: dropped by default)
DEFAULTS = [
    ("vllm", "0.32.0", "reasoning"),
    ("vllm", "0.11.0", None),  # before interleaved thinking the server dropped the field
    ("sglang", "0.5.23", "reasoning_content"),
    ("mlx", None, "reasoning_content"),
    ("ollama", "0.12.0", "thinking"),
    ("ollama", "0.8.0", None),
    ("llamacpp", None, None),
    ("tgi", "3.3.6", None),
    ("tensorrt_llm", "1.0.0", None),
]


def sent_assistant(engine: str, version: str | None = None, **options: Any) -> dict[str, Any]:
    request = make_request(None, CHAT, None, options, stream=False)
    call = get_adapter(engine).build(request, EngineInfo(engine=engine, model="m", version=version))
    assert call.json is not None
    return dict(call.json["messages"][1])


@pytest.mark.parametrize(("engine", "version", "field"), DEFAULTS)
def test_by_default_the_thought_goes_in_the_engines_field_or_is_dropped(
    engine: str, version: str | None, field: str | None
) -> None:
    message = sent_assistant(engine, version)
    thoughts = {k: v for k, v in message.items() if v == THOUGHT}
    assert (thoughts, message["content"]) == ({field: THOUGHT} if field else {}, ANSWER)


@pytest.mark.parametrize(("engine", "version"), [(e, v) for e, v, _ in DEFAULTS])
def test_inline_writes_the_thought_once_before_the_answer(engine: str, version: str | None) -> None:
    message = sent_assistant(engine, version, replay_reasoning="inline")
    assert json.dumps(message).count(THOUGHT) == 1
    assert message["content"] == f"<think>{THOUGHT}</think>{ANSWER}"


@pytest.mark.parametrize(("engine", "version"), [(e, v) for e, v, _ in DEFAULTS])
def test_drop_sends_no_thought(engine: str, version: str | None) -> None:
    assert THOUGHT not in json.dumps(sent_assistant(engine, version, replay_reasoning="drop"))


@pytest.mark.parametrize(("engine", "version"), [(e, v) for e, v, f in DEFAULTS if f is None])
def test_field_is_refused_where_the_engine_reads_none(engine: str, version: str | None) -> None:
    with pytest.raises(unillm.UnsupportedFeature, match="replay_reasoning='inline'"):
        sent_assistant(engine, version, replay_reasoning="field")


def test_an_unknown_replay_mode_is_refused() -> None:
    with pytest.raises(unillm.InvalidOptions, match="replay_reasoning='keep'"):
        make_request(None, CHAT, None, {"replay_reasoning": "keep"}, stream=False)


def test_reasoning_content_is_read_as_the_thought() -> None:
    message = {"role": "assistant", "content": ANSWER, "reasoning_content": THOUGHT}
    assert normalize_messages([message])[0] == {"role": "assistant", "content": ANSWER, "reasoning": THOUGHT}


@pytest.mark.parametrize(
    ("message", "match"),
    [
        ({"role": "user", "content": "hi", "reasoning": THOUGHT}, "only assistant"),
        ({"role": "assistant", "content": "a", "reasoning": 3}, "must be a string"),
        ({"role": "assistant", "content": "a", "reasoning": "x", "reasoning_content": "y"}, "two different"),
    ],
)
def test_a_wrong_thought_is_refused(message: dict[str, Any], match: str) -> None:
    with pytest.raises(unillm.InvalidOptions, match=match):
        normalize_messages([message])


def test_tokenize_renders_the_thought_and_the_tools_as_a_chat_request_sends_them() -> None:
    def add(a: int, b: int) -> int:
        """Add."""
        return a + b

    request = tokenize_request(None, CHAT, tools=[add], replay_reasoning="inline")
    call = get_adapter("vllm").tokenize_call(request, EngineInfo(engine="vllm", model="m", version="0.32.0"))
    assert call.json is not None
    assert (call.json["messages"][1]["content"], call.json["tools"][0]["function"]["name"]) == (
        f"<think>{THOUGHT}</think>{ANSWER}",
        "add",
    )


def test_replay_options_on_tokenize_need_messages() -> None:
    with pytest.raises(unillm.InvalidOptions, match="messages"):
        tokenize_request("text", None, replay_reasoning="drop")


# -- the transcripts of r.message(), run_tools and stream_tools ---------------------------------
def call_body(turn: int) -> dict[str, Any]:
    call = {
        "id": f"c{turn}",
        "type": "function",
        "function": {"name": "add", "arguments": '{"a": 1, "b": 2}'},
    }
    message = {"role": "assistant", "content": None, "reasoning": f"thought {turn}", "tool_calls": [call]}
    return {
        "id": "x",
        "model": "tiny",
        "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls"}],
    }


def answer_body(turn: int) -> dict[str, Any]:
    message = {"role": "assistant", "content": "3", "reasoning": f"thought {turn}"}
    return {
        "id": "x",
        "model": "tiny",
        "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
    }


def sse(body: dict[str, Any]) -> bytes:
    message = body["choices"][0]["message"]
    delta = {k: v for k, v in message.items() if k != "tool_calls"}
    if "tool_calls" in message:
        delta["tool_calls"] = [{"index": 0, **c} for c in message["tool_calls"]]
    chunk = {"id": "x", "model": "tiny", "choices": [{"index": 0, "delta": delta, "finish_reason": None}]}
    end = {"id": "x", "model": "tiny", "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
    return b"".join(f"data: {json.dumps(c)}\n\n".encode() for c in (chunk, end)) + b"data: [DONE]\n\n"


def recording_engine(turns: int, sent: list[dict[str, Any]]) -> unillm.LLM:
    """A vLLM look-alike that calls ``add`` ``turns - 1`` times, then answers; each body kept."""

    def answer(request: httpx.Request) -> httpx.Response:
        if (found := discovery(request, max_model_len=4096)) is not None:
            return found
        body = json.loads(request.content)
        sent.append(body)
        turn = len(sent)
        reply = call_body(turn) if turn < turns else answer_body(turn)
        if body.get("stream"):
            return httpx.Response(200, content=sse(reply), headers={"content-type": "text/event-stream"})
        return httpx.Response(200, json=reply)

    return unillm.LLM("vllm", "http://engine.invalid", http_transport=httpx.MockTransport(answer))


def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


def thoughts_sent(body: dict[str, Any]) -> list[str]:
    return [m["reasoning"] for m in body["messages"] if m["role"] == "assistant"]


@pytest.mark.anyio
@pytest.mark.parametrize("streamed", [False, True])
async def test_a_tool_loop_sends_every_earlier_thought_back_once(streamed: bool) -> None:
    sent: list[dict[str, Any]] = []
    messages = [{"role": "user", "content": "1+2?"}]
    async with recording_engine(10, sent) as llm:
        if streamed:
            async for item in llm.stream_tools(messages, tools=[add], max_turns=10):
                run = item
        else:
            run = await llm.run_tools(messages, tools=[add], max_turns=10)
    assert isinstance(run, ToolRun)
    assert [thoughts_sent(b) for b in sent] == [[f"thought {t}" for t in range(1, k)] for k in range(1, 11)]


@pytest.mark.anyio
async def test_r_message_carries_the_thought_to_the_next_turn() -> None:
    sent: list[dict[str, Any]] = []
    async with recording_engine(1, sent) as llm:
        r = await llm.generate(messages=[{"role": "user", "content": "1+2?"}])
        await llm.generate(messages=[{"role": "user", "content": "1+2?"}, r.message()])
    assert (r.message()["reasoning"], thoughts_sent(sent[1])) == ("thought 1", ["thought 1"])


@pytest.mark.anyio
async def test_r_message_of_a_thought_without_an_answer_goes_back() -> None:
    # the turn spent its max_tokens thinking: no answer text and no call, only the thought
    sent: list[dict[str, Any]] = []

    def answer(request: httpx.Request) -> httpx.Response:
        if (found := discovery(request, max_model_len=4096)) is not None:
            return found
        sent.append(json.loads(request.content))
        body = answer_body(len(sent))
        body["choices"][0].update(message={"role": "assistant", "content": None, "reasoning": "hm"})
        body["choices"][0].update(finish_reason="length")
        return httpx.Response(200, json=body)

    first = [{"role": "user", "content": "1+2?"}]
    async with unillm.LLM("vllm", "http://engine.invalid", http_transport=httpx.MockTransport(answer)) as llm:
        r = await llm.generate(messages=first)
        await llm.generate(messages=[*first, r.message(), {"role": "user", "content": "2+2?"}])
    assert r.message() == {"role": "assistant", "content": "", "reasoning": "hm"}
    assert [m["content"] for m in sent[1]["messages"]] == ["1+2?", "", "2+2?"]
    assert thoughts_sent(sent[1]) == ["hm"]
