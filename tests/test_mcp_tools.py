"""MCP tool servers in ``run_tools`` / ``stream_tools``: a real MCP server (tests/mcp_server.py,
written with the ``mcp`` SDK) over stdio and streamable HTTP, and a scripted engine (the look-alike
of tests/test_tool_loop.py) that makes the calls: discovery, calls, tool errors, timeouts,
cancellation, a server that dies mid-call, name clashes."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from types import SimpleNamespace
from typing import Annotated, Any

import anyio
import httpx
import psutil
import pytest
from pydantic import Field
from test_tool_loop import ASK, Script, call, message

import unillm
from unillm.client.mcp_servers import result_text, to_tool
from unillm.client.tool_loop import ToolResult, ToolRun
from unillm.launching.ports import free_port

pytestmark = pytest.mark.anyio
SERVER = str(Path(__file__).resolve().parent / "mcp_server.py")
WEATHER = '{"city": "Oslo", "forecast": "snowy", "temperature": 2}'


def get_time(city: str) -> str:
    """The local time in a city."""
    return f"12:00 in {city}"


class Recording(Script):
    """The scripted engine, also keeping the tools each request offered."""

    def __init__(self, *answers: dict[str, Any]) -> None:
        super().__init__(*answers)
        self.tools: list[list[str]] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/chat/completions"):
            body = json.loads(request.content)
            self.tools.append([t["function"]["name"] for t in body.get("tools", [])])
        return super().__call__(request)


def stdio(pid_file: Path | None = None, **options: Any) -> unillm.MCPServer:
    env = {"MCP_PID_FILE": str(pid_file)} if pid_file else None
    return unillm.MCPServer.stdio([sys.executable, SERVER, "stdio"], env=env, **options)


def gone(pid_file: Path) -> bool:
    pid = int(pid_file.read_text())
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


@contextmanager
def http_server() -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """The test server over streamable HTTP on a free port: its URL and its process."""
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, SERVER, "http", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.1)
        yield f"http://127.0.0.1:{port}/mcp", process
    finally:
        process.kill()
        process.wait(10)


@pytest.fixture(scope="module")
def http_url() -> Iterator[str]:
    with http_server() as (url, _):
        yield url


def weather_then_answer() -> Recording:
    return Recording(message(calls=[call("get_weather", {"city": "Oslo"}, 1)]), message("It is sunny."))


async def test_a_server_lists_its_tools_with_their_schemas() -> None:
    async with stdio() as server:
        tools = {t.name: t for t in server.tools}
    assert set(tools) == {"get_weather", "add", "fail", "slow", "die"}
    assert tools["get_weather"].parameters["properties"]["city"]["type"] == "string"
    assert tools["get_weather"].description == "Get the current weather in a city."
    assert "title" not in tools["get_weather"].parameters  # as for a Python function's
    assert not server.is_open


async def test_a_servers_tool_is_offered_as_the_same_python_function_would_be() -> None:
    def get_weather(city: Annotated[str, Field(max_length=32)]) -> str:
        """Get the current weather in a city."""
        return city

    async with stdio(tools=["get_weather"]) as server:
        (remote,) = server.tools
    local = unillm.Tool.from_spec(get_weather)
    assert (remote.name, remote.description, remote.parameters) == (
        local.name,
        local.description,
        local.parameters,
    )


async def test_the_loop_offers_mcp_and_python_tools_and_runs_the_call_on_the_server(tmp_path: Path) -> None:
    script, pid_file = weather_then_answer(), tmp_path / "pid"
    async with script.llm() as llm:
        run = await llm.run_tools(ASK, tools=[get_time, stdio(pid_file, tools=["get_weather"])])
    assert script.tools[0] == ["get_time", "get_weather"]
    assert (run.stopped, run.text) == ("answer", "It is sunny.")
    assert run.turns[0].results[0].content == WEATHER
    assert script.sent[1][-1]["content"] == WEATHER
    assert gone(pid_file), "the loop opened the server, so it closes it"


async def test_a_server_over_streamable_http_runs_the_call(http_url: str) -> None:
    script = weather_then_answer()
    async with script.llm() as llm:
        run = await llm.run_tools(ASK, tools=[unillm.MCPServer.http(http_url)])
    assert run.turns[0].results[0].content == WEATHER


async def test_the_streamed_loop_yields_the_servers_results() -> None:
    async with weather_then_answer().llm() as llm:
        events = [e async for e in llm.stream_tools(ASK, tools=[stdio()])]
    assert [e.content for e in events if isinstance(e, ToolResult)] == [WEATHER]
    assert isinstance(events[-1], ToolRun) and events[-1].stopped == "answer"


async def test_a_structured_result_goes_back_as_its_json() -> None:
    script = Recording(message(calls=[call("add", {"a": 2, "b": 3}, 1)]), message("5"))
    async with script.llm() as llm:
        run = await llm.run_tools(ASK, tools=[stdio()])
    assert json.loads(run.turns[0].results[0].content) == {"total": 5}
    only_structured = SimpleNamespace(content=[], structured_content={"total": 5})
    assert result_text(only_structured) == '{"total": 5}'


async def test_a_tool_error_goes_to_the_model_and_the_loop_goes_on() -> None:
    script = Recording(message(calls=[call("fail", {"why": "rain"}, 1)]), message("Sorry."))
    async with script.llm() as llm:
        run = await llm.run_tools(ASK, tools=[stdio()])
    result = run.turns[0].results[0]
    assert result.error == "fail failed: Error executing tool fail: no luck: rain"
    assert script.sent[1][-1]["content"] == f"error: {result.error}"
    assert (run.stopped, run.text) == ("answer", "Sorry.")


async def test_a_call_past_the_timeout_is_a_typed_error_and_the_server_is_closed(tmp_path: Path) -> None:
    script, pid_file = Recording(message(calls=[call("slow", {"seconds": 60}, 1)])), tmp_path / "pid"
    started = time.monotonic()
    async with script.llm() as llm:
        with pytest.raises(unillm.ToolServerTimeout, match="did not answer within 1 s"):
            await llm.run_tools(ASK, tools=[stdio(pid_file, timeout=1)])
    assert time.monotonic() - started < 20
    assert gone(pid_file)


async def test_cancelling_the_loop_cancels_the_call_and_closes_the_server(tmp_path: Path) -> None:
    script, pid_file = Recording(message(calls=[call("slow", {"seconds": 60}, 1)])), tmp_path / "pid"
    async with script.llm() as llm:
        with anyio.fail_after(30):
            async with anyio.create_task_group() as tg:
                tg.start_soon(partial(llm.run_tools, ASK, tools=[stdio(pid_file)]))
                while not script.sent:  # the engine was asked: the call is on its way
                    await anyio.sleep(0.05)
                await anyio.sleep(0.5)
                tg.cancel_scope.cancel()
    assert gone(pid_file)


async def test_a_server_that_dies_mid_call_is_a_typed_error_not_a_hang() -> None:
    script = Recording(message(calls=[call("die", {}, 1)]), message("never sent"))
    async with script.llm() as llm:
        with anyio.fail_after(20), pytest.raises(unillm.ToolServerError, match="closed the connection"):
            await llm.run_tools(ASK, tools=[stdio()])
    assert len(script.sent) == 1


async def test_an_http_server_that_goes_away_mid_call_is_a_typed_error_not_a_hang() -> None:
    script = Recording(message(calls=[call("slow", {"seconds": 60}, 1)]), message("never sent"))
    with http_server() as (url, process):
        async with script.llm() as llm, anyio.create_task_group() as tg:

            async def kill_mid_call() -> None:
                while not script.sent:
                    await anyio.sleep(0.05)
                await anyio.sleep(1)
                process.kill()

            tg.start_soon(kill_mid_call)
            with anyio.fail_after(30), pytest.raises(unillm.ToolServerError, match="broke off"):
                await llm.run_tools(ASK, tools=[unillm.MCPServer.http(url)])


async def test_a_server_that_cannot_start_is_a_typed_error() -> None:
    server = unillm.MCPServer.stdio(["/nonexistent/mcp-server"], timeout=10)
    async with Recording().llm() as llm:
        with pytest.raises(unillm.ToolServerError, match="nonexistent"):
            await llm.run_tools(ASK, tools=[server])


async def test_two_tools_of_one_name_are_refused_before_sending() -> None:
    def get_weather(city: str) -> str:
        """Shadows the server's tool."""
        return city

    script = Recording()
    async with script.llm() as llm:
        with pytest.raises(unillm.InvalidOptions, match=r"two tools are named .get_weather.*prefix="):
            await llm.run_tools(ASK, tools=[get_weather, stdio()])
    assert script.sent == []


async def test_a_prefix_keeps_names_apart_and_calls_the_servers_own_name() -> None:
    def get_weather(city: str) -> str:
        """A local forecast."""
        return city

    script = Recording(message(calls=[call("remote_get_weather", {"city": "Oslo"}, 1)]), message("ok"))
    async with script.llm() as llm:
        run = await llm.run_tools(ASK, tools=[get_weather, stdio(prefix="remote_", tools=["get_weather"])])
    assert script.tools[0] == ["get_weather", "remote_get_weather"]
    assert run.turns[0].results[0].content == WEATHER


async def test_a_tool_name_the_server_lacks_is_refused() -> None:
    async with Recording().llm() as llm:
        with pytest.raises(unillm.InvalidOptions, match="no tool named 'nope'"):
            await llm.run_tools(ASK, tools=[stdio(tools=["nope"])])


def test_a_servers_schema_with_a_remote_ref_is_refused() -> None:
    remote = SimpleNamespace(
        name="fetcher", description=None, input_schema={"$ref": "https://example.com/schema.json"}
    )
    with pytest.raises(unillm.InvalidOptions, match=r"MCPServer.*\$ref"):
        to_tool(remote, stdio(), "MCPServer.stdio(['x'])")


async def test_a_server_opened_by_the_caller_serves_several_loops_and_stays_open(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    async with stdio(pid_file) as server:
        for _ in range(2):
            async with weather_then_answer().llm() as llm:
                run = await llm.run_tools(ASK, tools=[server])
            assert run.turns[0].results[0].content == WEATHER
            assert server.is_open and not gone(pid_file)
    assert gone(pid_file)


def test_bad_server_options_are_refused() -> None:
    with pytest.raises(unillm.InvalidOptions, match="non-empty list"):
        unillm.MCPServer.stdio("python server.py")
    with pytest.raises(unillm.InvalidOptions, match="http"):
        unillm.MCPServer.http("127.0.0.1:8765/mcp")
    with pytest.raises(unillm.InvalidOptions, match="timeout"):
        stdio(timeout=0)


def test_the_repr_shows_no_secret() -> None:
    server = unillm.MCPServer.http("http://u:pw@h/mcp", headers={"Authorization": "Bearer sk-1"})
    assert "pw" not in repr(server) and "sk-1" not in repr(server)


def test_import_unillm_does_not_import_mcp() -> None:
    code = "import sys, unillm; unillm.MCPServer; unillm.LLM; print('mcp' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
