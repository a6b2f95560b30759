"""``llm.run_tools`` / ``llm.stream_tools``: the calls the model makes are executed (async awaited,
sync in a thread), their results sent back as ``tool`` messages, until a final answer or
``max_turns``. The engine is scripted (httpx.MockTransport, vLLM's layout): turn by turn it
answers with a call, then with text, and records the messages it was sent."""

from __future__ import annotations

import copy
import json
from functools import partial
from typing import Any

import anyio
import httpx
import pytest

import unillm
from unillm.adapter.registry import get_adapter
from unillm.client.tool_loop import ToolResult, ToolRun
from unillm.testing.mock_answers import discovery

pytestmark = pytest.mark.anyio
ASK = [{"role": "user", "content": "What is 2 + 3, doubled?"}]


def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


async def double(x: int) -> int:
    """Double a number."""
    return 2 * x


def broken(x: int) -> int:
    """Always fails."""
    raise ValueError("no luck")


def call(name: str, arguments: dict[str, Any], n: int) -> dict[str, Any]:
    return {
        "id": f"call_{n}",
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(arguments)},
    }


def message(content: str | None = None, calls: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        body["tool_calls"] = calls
    return body


def sse(*events: dict[str, Any] | str) -> bytes:
    return b"".join(f"data: {e if isinstance(e, str) else json.dumps(e)}\n\n".encode() for e in events)


def streamed(answer: dict[str, Any]) -> bytes:
    delta: dict[str, Any] = {"content": answer["content"]} if answer["content"] else {}
    if answer.get("tool_calls"):
        delta["tool_calls"] = [{"index": i, **c} for i, c in enumerate(answer["tool_calls"])]
    finish = "tool_calls" if answer.get("tool_calls") else "stop"
    chunk = {"id": "c", "model": "tiny", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
    usage = {"id": "c", "model": "tiny", "choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 4}}
    return sse(chunk, usage, "[DONE]")


class Script:
    """An engine answering each chat request with the next scripted message."""

    def __init__(self, *answers: dict[str, Any]) -> None:
        self.answers = list(answers)
        self.sent: list[list[dict[str, Any]]] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if (found := discovery(request, version="0.11.0")) is not None:
            return found
        body = json.loads(request.content)
        self.sent.append(body["messages"])
        answer = self.answers.pop(0)
        if body.get("stream"):
            return httpx.Response(
                200, content=streamed(answer), headers={"content-type": "text/event-stream"}
            )
        finish = "tool_calls" if answer.get("tool_calls") else "stop"
        return httpx.Response(
            200,
            json={
                "id": "c",
                "model": "tiny",
                "choices": [{"index": 0, "message": answer, "finish_reason": finish}],
                "usage": {"prompt_tokens": 5, "completion_tokens": 4},
            },
        )

    def llm(self, url: str = "http://engine.invalid") -> unillm.LLM:
        # a launched vLLM with a tool parser: tool_choice="auto" is allowed. A copy of the adapter:
        # the registry's is shared by every client of the test session.
        adapter = copy.copy(get_adapter("vllm"))
        adapter.launched, adapter.tool_parser = False, "hermes"  # type: ignore[attr-defined]
        return unillm.LLM(adapter, url, http_transport=httpx.MockTransport(self))


def two_step() -> Script:
    return Script(
        message(calls=[call("add", {"a": 2, "b": 3}, 1)]),
        message(calls=[call("double", {"x": 5}, 2)]),
        message("It is 10."),
    )


async def test_a_loop_runs_sync_and_async_tools_until_the_final_answer() -> None:
    script = two_step()
    async with script.llm() as llm:
        run = await llm.run_tools(ASK, tools=[add, double])
    assert (run.stopped, run.text) == ("answer", "It is 10.")
    assert [r.content for t in run.turns for r in t.results] == ["5", "10"]


async def test_results_go_back_as_tool_messages_after_the_assistants_call() -> None:
    script = two_step()
    async with script.llm() as llm:
        await llm.run_tools(ASK, tools=[add, double])
    second = script.sent[1]
    assert second[1]["tool_calls"][0]["id"] == "call_1"
    assert second[2] == {"role": "tool", "tool_call_id": "call_1", "name": "add", "content": "5"}


async def test_each_turn_carries_its_usage_and_the_run_their_sum() -> None:
    async with two_step().llm() as llm:
        run = await llm.run_tools(ASK, tools=[add, double])
    assert [t.usage.completion_tokens for t in run.turns] == [4, 4, 4]
    assert run.usage.completion_tokens == 12


async def test_the_loop_stops_at_max_turns() -> None:
    async with two_step().llm() as llm:
        run = await llm.run_tools(ASK, tools=[add, double], max_turns=1)
    assert (run.stopped, len(run.turns)) == ("max_turns", 1)


async def test_a_raising_tool_is_reported_to_the_model_as_a_tool_error() -> None:
    script = Script(message(calls=[call("broken", {"x": 1}, 1)]), message("Sorry."))
    async with script.llm() as llm:
        run = await llm.run_tools(ASK, tools=[broken])
    result = run.turns[0].results[0]
    assert result.error is not None and "ValueError: no luck" in result.error
    assert script.sent[1][-1]["content"].startswith("error: broken raised ValueError")


async def test_invalid_arguments_are_reported_without_running_the_tool() -> None:
    script = Script(message(calls=[call("add", {"a": "two"}, 1)]), message("Sorry."))
    async with script.llm() as llm:
        run = await llm.run_tools(ASK, tools=[add])
    assert (run.turns[0].results[0].error or "").startswith("invalid arguments for add")


async def test_a_tool_that_is_not_a_function_is_refused_before_sending() -> None:
    script = Script()
    async with script.llm() as llm:
        with pytest.raises(unillm.InvalidOptions, match="typed Python function"):
            await llm.run_tools(ASK, tools=[{"name": "f", "parameters": {"type": "object"}}])
    assert script.sent == []


async def test_the_streamed_loop_yields_deltas_results_and_the_run_last() -> None:
    async with two_step().llm() as llm:
        events = [e async for e in llm.stream_tools(ASK, tools=[add, double])]
    results = [e.content for e in events if isinstance(e, ToolResult)]
    assert results == ["5", "10"]
    assert isinstance(events[-1], ToolRun) and events[-1].text == "It is 10."


async def test_cancelling_the_loop_stops_it_inside_a_running_tool() -> None:
    started = anyio.Event()

    async def wait(x: int) -> int:
        """Wait forever."""
        started.set()
        await anyio.sleep_forever()
        return x

    script = Script(message(calls=[call("wait", {"x": 1}, 1)]), message("never sent"))
    async with script.llm() as llm, anyio.create_task_group() as tg:
        tg.start_soon(partial(llm.run_tools, ASK, tools=[wait]))
        await started.wait()
        tg.cancel_scope.cancel()
    assert len(script.sent) == 1


async def test_a_fleet_runs_the_loop_over_its_replicas() -> None:
    script = two_step()
    async with unillm.Fleet([script.llm(), script.llm("http://other.invalid")]) as fleet:
        run = await fleet.run_tools(ASK, tools=[add, double])
    assert (run.stopped, run.text, len(script.sent)) == ("answer", "It is 10.", 3)
