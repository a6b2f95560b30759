"""Hostile tools (issue 29, items 4, 7, 11, 12 and 20): schemas that point outside themselves,
arguments nested past Python's recursion limit, type hints with no JSON schema, and parameters the
schema used to leave out. Each one ends typed, before sending where it can, and never fetches.

The engine is :class:`unillm.testing.fault_server.FaultServer` (a vLLM look-alike on 127.0.0.1), scripted to
answer with a tool call; it also serves ``/schema.json``, the remote ``$ref`` target, and
records every request, so "never fetched" is ``server.count(SCHEMA) == 0``.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from fault_helpers import checked_server
from pydantic import BaseModel, ConfigDict

import unillm
from unillm import RetryPolicy, Timeouts
from unillm.client.tool_loop import ToolResult, ToolRun
from unillm.errors import InvalidOptions
from unillm.options import to_constraint
from unillm.results import ToolCallDelta
from unillm.testing.fault_server import CHAT, FaultServer, Raw
from unillm.tools import Tool, ToolCallAccumulator, to_tools, validate_call

pytestmark = pytest.mark.anyio

SCHEMA = "/schema.json"
ASK = [{"role": "user", "content": "Look it up."}]
DEEP = 100_000


def lookup(key: str) -> str:
    """Look a key up."""
    return f"value of {key}"


@pytest.fixture(scope="module")
def server() -> Iterator[FaultServer]:
    yield from checked_server(model="tiny")


@pytest.fixture(autouse=True)
def clean(server: FaultServer) -> Iterator[None]:
    server.script(SCHEMA, Raw(200, b'{"type": "string"}'))
    yield
    server.scripts.clear()
    server.requests.clear()


def connect(server: FaultServer) -> unillm.LLM:
    return unillm.connect(
        "vllm", server.url, model="tiny", retry=RetryPolicy(attempts=1), timeouts=Timeouts(connect=2, read=10)
    )


def remote(server: FaultServer) -> dict[str, Any]:
    """Parameters whose ``key`` is a ``$ref`` to the server's /schema.json."""
    return {"type": "object", "properties": {"key": {"$ref": f"{server.url}{SCHEMA}"}}, "required": ["key"]}


def chat_answer(message: dict[str, Any]) -> Raw:
    """A whole chat answer with one choice: ``message``."""
    finish = "tool_calls" if message.get("tool_calls") else "stop"
    choice = {"index": 0, "message": {"role": "assistant", **message}, "finish_reason": finish}
    return Raw(200, json.dumps({"id": "c", "model": "tiny", "choices": [choice]}).encode())


def answer_with_call(server: FaultServer, arguments: str, *, stream: bool, name: str = "lookup") -> None:
    """Script the chat path: one call to ``name`` with ``arguments`` (whole or as SSE)."""
    call = {"id": "call_1", "type": "function", "function": {"name": name, "arguments": arguments}}
    if not stream:
        server.script(CHAT, chat_answer({"content": None, "tool_calls": [call]}))
        return
    delta = {"tool_calls": [{"index": 0, **call}]}
    chunk = {
        "id": "c",
        "model": "tiny",
        "choices": [{"index": 0, "delta": delta, "finish_reason": "tool_calls"}],
    }
    events = [f"data: {json.dumps(chunk)}\n\n".encode(), b"data: [DONE]\n\n"]
    server.script(CHAT, Raw(200, events, content_type="text/event-stream"))


# -- item 4 / 20: a remote $ref is refused before sending and never fetched --------------------------
async def run_loop(llm: unillm.LLM, tool: Tool) -> object:
    return await llm.run_tools(ASK, tools=[tool], max_turns=1)


async def stream_loop(llm: unillm.LLM, tool: Tool) -> object:
    return [e async for e in llm.stream_tools(ASK, tools=[tool], max_turns=1)]


async def generate_with(llm: unillm.LLM, tool: Tool) -> object:
    return await llm.generate(messages=ASK, tools=[tool.to_openai()])


async def stream_with(llm: unillm.LLM, tool: Tool) -> object:
    async with llm.stream(messages=ASK, tools=[tool.to_openai()]) as s:
        return [d async for d in s], s.tool_calls


@pytest.mark.parametrize(
    ("call", "stream"),
    [(run_loop, False), (stream_loop, True), (generate_with, False), (stream_with, True)],
    ids=["run_tools", "stream_tools", "generate", "stream"],
)
async def test_a_remote_ref_in_a_tool_schema_is_refused_before_sending_and_never_fetched(
    server: FaultServer, call: Callable[[unillm.LLM, Tool], Any], stream: bool
) -> None:
    answer_with_call(server, '{"key": "a"}', stream=stream)
    tool = Tool("lookup", remote(server), function=lookup)
    async with connect(server) as llm:
        with pytest.raises(
            InvalidOptions,
            match=r"tool 'lookup': \$ref 'http://127\.0\.0\.1:\d+/schema\.json'.*never fetches",
        ):
            await call(llm, tool)
    assert (server.count(SCHEMA), server.count()) == (0, 0)


async def test_a_remote_ref_in_an_output_schema_is_refused_before_sending_and_never_fetched(
    server: FaultServer,
) -> None:
    server.script(CHAT, chat_answer({"content": '{"key": "a"}'}))
    async with connect(server) as llm:
        with pytest.raises(InvalidOptions, match=r"the output schema: \$ref 'http://.*/schema\.json'"):
            await llm.generate(messages=ASK, output=remote(server))
    assert (server.count(SCHEMA), server.count()) == (0, 0)


@pytest.mark.parametrize("ref", ["file:///etc/passwd", "other.json", "https://example.invalid/s.json#/x"])
def test_every_ref_outside_the_schema_is_refused(ref: str) -> None:
    with pytest.raises(InvalidOptions, match="points outside the schema"):
        to_tools([{"name": "f", "parameters": {"type": "object", "properties": {"a": {"$ref": ref}}}}])


def test_a_call_validated_against_a_tool_made_by_hand_never_fetches_its_remote_ref(
    server: FaultServer,
) -> None:
    # a Tool used directly (not through to_tools) still resolves only inside its schema
    call = validate_call("c1", "lookup", '{"key": "a"}', [Tool("lookup", remote(server))])
    assert call.parsed is None and "cannot resolve" in (call.error or "")
    assert server.count(SCHEMA) == 0


@pytest.mark.parametrize("ref", ["#/$defs/missing", "#/definitions/missing", "#nowhere"])
def test_a_local_ref_that_resolves_to_nothing_is_refused_typed(ref: str) -> None:
    schema: dict[str, Any] = {"type": "object", "properties": {"a": {"$ref": ref}}}
    with pytest.raises(InvalidOptions, match=r"tool 'f': \$ref .* resolves to nothing"):
        to_tools([{"name": "f", "parameters": schema}])
    with pytest.raises(InvalidOptions, match=r"the output schema: \$ref .* resolves to nothing"):
        to_constraint(schema)


class Point(BaseModel):
    x: int


def plot(p: Point, q: Point) -> str:
    return ""


def test_local_refs_still_resolve_and_validate() -> None:
    schema = {
        "$id": "https://example.invalid/root.json",
        "$defs": {"key": {"type": "string", "$anchor": "k"}},
        "type": "object",
        "properties": {
            "a": {"$ref": "#/$defs/key"},
            "b": {"$ref": "#k"},
            "c": {"$ref": "root.json#/$defs/key"},
        },
    }
    (plotter, keyed) = to_tools([plot, {"name": "keyed", "parameters": schema}])
    assert "$ref" in json.dumps(plotter.parameters)  # pydantic's own #/$defs refs pass
    assert validate_call("c1", "keyed", '{"a": "x", "b": "y", "c": "z"}', [keyed]).parsed == {
        "a": "x",
        "b": "y",
        "c": "z",
    }
    assert "do not validate" in (validate_call("c2", "keyed", '{"a": 1}', [keyed]).error or "")


# -- item 7: arguments nested 100,000 deep are the call's error -----------------------------------------
NESTED = '{"key": ' + "[" * DEEP + "]" * DEEP + "}"


def test_deeply_nested_streamed_arguments_are_the_calls_error() -> None:
    acc = ToolCallAccumulator(to_tools([lookup]))
    acc.add([ToolCallDelta(index=0, id="c1", name="lookup"), ToolCallDelta(index=0, arguments=NESTED)])
    (call,) = acc.calls()
    assert call.parsed is None and "nested too deeply" in (call.error or "")


def test_deeply_nested_arguments_against_a_json_schema_tool_are_the_calls_error() -> None:
    call = validate_call("c1", "f", NESTED, to_tools([{"name": "f", "parameters": {"type": "object"}}]))
    assert "nested too deeply" in (call.error or "")


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
async def test_deeply_nested_arguments_from_the_engine_are_the_calls_error(
    server: FaultServer, stream: bool
) -> None:
    answer_with_call(server, NESTED, stream=stream)
    async with connect(server) as llm:
        if stream:
            async with llm.stream(messages=ASK, tools=[lookup]) as s:
                async for _ in s:
                    pass
            calls = s.tool_calls
        else:
            calls = (await llm.generate(messages=ASK, tools=[lookup])).tool_calls
    assert "nested too deeply" in (calls[0].error or "")


async def test_deeply_nested_arguments_in_the_streamed_loop_are_a_tool_error(server: FaultServer) -> None:
    answer_with_call(server, NESTED, stream=True)
    async with connect(server) as llm:
        events = [e async for e in llm.stream_tools(ASK, tools=[lookup], max_turns=1)]
    (result,) = [e for e in events if isinstance(e, ToolResult)]
    assert "nested too deeply" in (result.error or "")
    assert isinstance(events[-1], ToolRun) and events[-1].stopped == "max_turns"


# -- item 11: a type hint with no JSON schema is InvalidOptions naming the tool and parameter ---------
class Loose(BaseModel):
    model_config = ConfigDict(arbitrary_types_allowed=True)
    conn: socket.socket


class BadConfig(BaseModel):
    model_config = ConfigDict(json_schema_extra="not a dict")  # type: ignore[typeddict-item]
    a: int


def takes_socket(conn: socket.socket) -> str:
    return ""


def takes_callback(callback: Callable[[int], int]) -> str:
    return ""


def takes_loose(item: Loose) -> str:
    return ""


def takes_bad_config(item: BadConfig) -> str:
    return ""


@pytest.mark.parametrize(
    ("spec", "match"),
    [
        (takes_socket, r"tool 'takes_socket': parameter 'conn' has a type \(socket\.socket\)"),
        (takes_callback, r"tool 'takes_callback': parameter 'callback' has a type \(.*Callable"),
        (takes_loose, r"tool 'takes_loose': parameter 'item' has a type \(.*Loose\)"),
        (takes_bad_config, r"tool 'takes_bad_config': parameter 'item'.*json_schema_extra"),
        (Loose, r"tool 'Loose': parameter 'conn' has a type \(socket\.socket\)"),
        (BadConfig, r"tool 'BadConfig': its arguments cannot become a JSON schema.*json_schema_extra"),
    ],
    ids=[
        "socket",
        "callable",
        "model-with-socket",
        "model-bad-config",
        "class-with-socket",
        "class-bad-config",
    ],
)
async def test_a_hint_with_no_json_schema_is_refused_naming_the_parameter_before_sending(
    server: FaultServer, spec: Any, match: str
) -> None:
    async with connect(server) as llm:
        with pytest.raises(InvalidOptions, match=match):
            await llm.generate(messages=ASK, tools=[spec])
    assert server.count() == 0


# -- item 12: no parameter is left out of the schema ---------------------------------------------------
def scaled(_factor: int, value: int) -> int:
    """Scale a value."""
    return _factor * value


def power(base: int, exponent: int = 2, /, *, label: str = "") -> str:
    """Raise base to a power."""
    return f"{label}{base**exponent}"


def test_a_parameter_named_with_a_leading_underscore_is_offered_and_parsed_under_its_name() -> None:
    (tool,) = to_tools([scaled])
    assert tool.parameters["required"] == ["_factor", "value"]
    assert validate_call("c1", "scaled", '{"_factor": 3, "value": "4"}', [tool]).parsed == {
        "_factor": 3,
        "value": 4,
    }
    assert "_factor" in (validate_call("c2", "scaled", '{"value": 4}', [tool]).error or "")


@pytest.mark.parametrize(
    ("fn", "arguments", "content"),
    [(scaled, {"_factor": 3, "value": 4}, "12"), (power, {"base": 3, "label": "= "}, "= 9")],
    ids=["underscore", "positional-only"],
)
async def test_the_loop_calls_every_offered_parameter(
    server: FaultServer, fn: Callable[..., Any], arguments: dict[str, Any], content: str
) -> None:
    answer_with_call(server, json.dumps(arguments), stream=False, name=fn.__name__)
    async with connect(server) as llm:
        run = await llm.run_tools(ASK, tools=[fn], max_turns=1)
    (result,) = run.turns[0].results
    assert (result.error, result.content) == (None, content)
