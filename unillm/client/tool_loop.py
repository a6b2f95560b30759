"""Agents that run their tools: send, execute the calls the model makes, send the results back,
until the model answers or ``max_turns`` is reached.

    def add(a: int, b: int) -> int:
        \"\"\"Add two numbers.\"\"\"
        return a + b

    run = await llm.run_tools(messages, tools=[add], max_turns=4)
    run.text, run.stopped, run.turns[0].results[0].content, run.messages

Each turn's thought stays in the transcript (the assistant message's ``reasoning``) and goes back
to the engine as ``replay_reasoning=`` (one of ``options``) says. Async tools are awaited, sync
ones run in a worker thread; a tool that raises (or is called with
arguments that do not validate) is reported to the model as a tool error, and the loop goes on.
Cancelling the task that runs the loop stops it (a sync tool's thread is abandoned, not killed).

MCP tool servers (:class:`~unillm.client.mcp_servers.MCPServer`) go in ``tools=[...]`` too: the loop
opens those not open, offers their tools, runs the calls on them and closes them when it ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Literal, Protocol, runtime_checkable

import anyio
from pydantic import BaseModel

from unillm.client.mcp_servers import with_server_tools
from unillm.errors import InvalidOptions, ToolServerError
from unillm.results import Delta, Timings, ToolCall, Usage, assistant_message
from unillm.tools import Tool, to_tools

__all__ = ["ToolResult", "ToolRun", "Turn", "run_tools", "stream_tools"]


@dataclass(frozen=True, slots=True)
class ToolResult:
    """One executed call: what went back to the model (``content``), and ``error`` when the
    tool raised or its arguments did not validate."""

    call: ToolCall
    content: str
    error: str | None = None
    seconds: float = 0.0

    def message(self) -> dict[str, Any]:
        """The result as an OpenAI ``tool`` message (what every unillm engine reads)."""
        return {"role": "tool", "tool_call_id": self.call.id, "name": self.call.name, "content": self.content}


@dataclass(frozen=True, slots=True)
class Turn:
    """One model answer in the loop and the calls executed after it."""

    text: str
    reasoning: str | None
    tool_calls: list[ToolCall]
    usage: Usage
    timings: Timings
    results: list[ToolResult] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class ToolRun:
    """A finished loop: every turn, the whole transcript (``messages``), and why it stopped:
    ``"answer"`` (the model answered without calling a tool) or ``"max_turns"``."""

    turns: list[Turn]
    messages: list[dict[str, Any]]
    stopped: Literal["answer", "max_turns"]

    @property
    def text(self) -> str:
        """The last turn's answer text."""
        return self.turns[-1].text

    @property
    def usage(self) -> Usage:
        """Tokens over all turns (cached and reasoning tokens too, where the engine reports them)."""
        return sum((t.usage for t in self.turns), Usage())


@runtime_checkable
class RemoteFunction(Protocol):
    """A tool that runs elsewhere (an MCP server's): its text result, and True for a tool error."""

    async def call_remote(self, arguments: Mapping[str, Any]) -> tuple[str, bool]: ...


def _functions(tools: Sequence[Any]) -> tuple[tuple[Tool, ...], dict[str, Callable[..., Any]]]:
    """The tools and the Python function behind each (every tool must be one)."""
    normalized = to_tools(tools)
    missing = [t.name for t in normalized if t.function is None]
    if missing:
        raise InvalidOptions(
            f"run_tools runs the tools itself, so each must be a typed Python function or an MCPServer; "
            f"{', '.join(missing)} is not (pass the function, or use generate(tools=...) and run it)"
        )
    return normalized, {t.name: t.function for t in normalized if t.function is not None}


def _check_turns(max_turns: int) -> None:
    if not isinstance(max_turns, int) or isinstance(max_turns, bool) or max_turns < 1:
        raise InvalidOptions(f"max_turns must be a whole number >= 1, got {max_turns!r}")


def _as_text(value: Any) -> str:
    """A tool's return value as message content (strings as is, the rest as JSON)."""
    if isinstance(value, str):
        return value
    if isinstance(value, BaseModel):
        return value.model_dump_json()
    return json.dumps(value, default=str)


async def execute(call: ToolCall, functions: Mapping[str, Callable[..., Any]]) -> ToolResult:
    """Run one call: an async function awaited, a sync one in a worker thread.

    Args:
        call: The model's call (its arguments validated against the tool's schema).
        functions: The Python function of each tool, by name.

    Returns:
        The result; a raising tool, an unknown name or invalid arguments give an error result.

    Raises:
        ToolServerError: A remote tool's server broke off or timed out (not the model's business).
    """
    fn = functions.get(call.name)
    started = time.perf_counter()
    if fn is None:
        error = f"no tool named {call.name!r}; the tools are {', '.join(sorted(functions))}"
    elif not call.valid or not isinstance(call.parsed, dict):
        error = f"invalid arguments for {call.name}: {call.error or 'not an object'}"
    else:
        args, kwargs = _by_kind(fn, call.parsed)
        try:
            if isinstance(fn, RemoteFunction):
                text, failed = await fn.call_remote(call.parsed)
                if not failed:
                    return ToolResult(call, text, seconds=time.perf_counter() - started)
                raise _Failed(text)
            if inspect.iscoroutinefunction(fn):
                value = await fn(*args, **kwargs)
            else:
                value = await anyio.to_thread.run_sync(partial(fn, *args, **kwargs), abandon_on_cancel=True)
            return ToolResult(call, _as_text(value), seconds=time.perf_counter() - started)
        except ToolServerError:
            raise
        except _Failed as e:
            error = f"{call.name} failed: {e}"
        except Exception as e:  # the model hears of it: a tool error is part of the conversation
            error = f"{call.name} raised {type(e).__name__}: {e}"
    return ToolResult(call, f"error: {error}", error=error, seconds=time.perf_counter() - started)


class _Failed(Exception):
    """A remote tool reported an error (its text is the message)."""


def _by_kind(fn: Callable[..., Any], parsed: Mapping[str, Any]) -> tuple[list[Any], dict[str, Any]]:
    """The arguments of a call: positional-only parameters in order, the rest by name."""
    try:
        parameters = inspect.signature(fn).parameters
    except (TypeError, ValueError):  # no signature to read: every argument by name
        return [], dict(parsed)
    kwargs = dict(parsed)
    args = []
    for name, p in parameters.items():
        if p.kind is not p.POSITIONAL_ONLY or name not in kwargs:
            break
        args.append(kwargs.pop(name))
    return args, kwargs


async def _results(calls: list[ToolCall], functions: Mapping[str, Callable[..., Any]]) -> list[ToolResult]:
    tasks = [asyncio.ensure_future(execute(c, functions)) for c in calls]
    try:
        return list(await asyncio.gather(*tasks))
    except ToolServerError:  # the loop stops: the other calls too
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise


def _record(transcript: list[dict[str, Any]], turns: list[Turn], turn: Turn) -> bool:
    """Append a turn's answer and results to the transcript; True when it was the final answer."""
    transcript.append(assistant_message(turn.text, turn.tool_calls, turn.reasoning))
    transcript += [res.message() for res in turn.results]
    turns.append(turn)
    return not turn.tool_calls


async def run_tools(
    client: Any,  # an LLM or a Fleet: anything with generate() and stream()
    messages: Sequence[Mapping[str, Any]],
    tools: Sequence[Any],
    *,
    max_turns: int = 8,
    **options: Any,
) -> ToolRun:
    """Send ``messages`` with ``tools``, run the calls the model makes, send the results back,
    until the model answers without a call or ``max_turns`` answers were made.

    Args:
        client: The LLM (or Fleet) to ask.
        messages: The conversation so far (chat messages).
        tools: Typed Python functions (sync or async) and MCP servers the model may call.
        max_turns: The most model answers in the loop.
        **options: Per-call options for every turn (max_tokens, temperature, ...).

    Returns:
        The loop: its turns (usage, timings, results each), the whole transcript, why it stopped.

    Raises:
        InvalidOptions: A tool that is not a Python function or MCP server, two tools of one name,
            or ``max_turns`` below 1.
        ToolServerError: An MCP server could not be opened, broke off or timed out.
    """
    async with _opened(client, messages, tools, max_turns, options) as loop:
        return await _run(loop)


@dataclass(frozen=True, slots=True)
class _Loop:
    """One loop's inputs, with its tools loaded (the MCP servers among them open)."""

    client: Any
    messages: Sequence[Mapping[str, Any]]
    tools: tuple[Tool, ...]
    functions: Mapping[str, Callable[..., Any]]
    max_turns: int
    options: Mapping[str, Any]


@contextlib.asynccontextmanager
async def _opened(
    client: Any,
    messages: Sequence[Mapping[str, Any]],
    tools: Sequence[Any],
    max_turns: int,
    options: Mapping[str, Any],
) -> AsyncIterator[_Loop]:
    """A loop's inputs, ``max_turns`` checked and the tools loaded; the MCP servers among them stay
    open until the loop ends."""
    _check_turns(max_turns)
    async with with_server_tools(tools) as specs:
        yield _Loop(client, messages, *_functions(specs), max_turns, options)


async def _run(loop: _Loop) -> ToolRun:
    client, normalized, functions, options = loop.client, loop.tools, loop.functions, loop.options
    transcript = [dict(m) for m in loop.messages]
    turns: list[Turn] = []
    for _ in range(loop.max_turns):
        r = await client.generate(messages=transcript, tools=normalized, **options)
        results = await _results(r.tool_calls, functions)
        if _record(transcript, turns, Turn(r.text, r.reasoning, r.tool_calls, r.usage, r.timings, results)):
            return ToolRun(turns, transcript, "answer")
    return ToolRun(turns, transcript, "max_turns")


async def stream_tools(
    client: Any,  # an LLM or a Fleet: anything with generate() and stream()
    messages: Sequence[Mapping[str, Any]],
    tools: Sequence[Any],
    *,
    max_turns: int = 8,
    **options: Any,
) -> AsyncIterator[Delta | ToolResult | ToolRun]:
    """:func:`run_tools`, streamed: each turn's deltas as they arrive, each executed call's
    :class:`ToolResult`, and last the :class:`ToolRun` (the arguments, and the errors raised, are
    :func:`run_tools`'s).
    """
    async with _opened(client, messages, tools, max_turns, options) as loop:
        async for event in _stream(loop):
            yield event


async def _stream(loop: _Loop) -> AsyncIterator[Delta | ToolResult | ToolRun]:
    client, normalized, functions, options = loop.client, loop.tools, loop.functions, loop.options
    transcript = [dict(m) for m in loop.messages]
    turns: list[Turn] = []
    for _ in range(loop.max_turns):
        usage, timings = Usage(), Timings(total_s=0.0)
        async with client.stream(messages=transcript, tools=normalized, **options) as s:
            async for delta in s:
                usage, timings = delta.usage or usage, delta.timings or timings
                yield delta
        results = await _results(s.tool_calls, functions)
        for res in results:
            yield res
        if _record(
            transcript, turns, Turn(s.text, s.reasoning or None, s.tool_calls, usage, timings, results)
        ):
            yield ToolRun(turns, transcript, "answer")
            return
    yield ToolRun(turns, transcript, "max_turns")
