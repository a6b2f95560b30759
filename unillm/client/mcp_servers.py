"""MCP tool servers in the tool loop: ``run_tools`` / ``stream_tools`` offer their tools next to
Python functions and run the model's calls on the server.

    weather = unillm.MCPServer.stdio(["python", "weather_server.py"])
    run = await llm.run_tools(messages, tools=[get_time, weather])

    async with unillm.MCPServer.http("http://127.0.0.1:8765/mcp") as server:  # one session, many loops
        await llm.run_tools(first, tools=[server])
        await llm.run_tools(second, tools=[server])

The official ``mcp`` SDK (``pip install 'unillm-sdk[mcp]'``) is imported only when a server opens. A
server the loop opened is closed when the loop ends (answer, error or cancellation); one the caller
opened stays open until its ``async with`` ends. A tool's error (the server's ``isError``) goes back
to the model as a tool error and the loop goes on; a server that dies, closes the connection or does
not answer within ``timeout`` stops the loop with :class:`~unillm.errors.ToolServerError`
(:class:`~unillm.errors.ToolServerTimeout`).
"""

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import AsyncIterator, Iterable, Iterator, Mapping, Sequence
from contextlib import AsyncExitStack, asynccontextmanager, contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

import anyio

from unillm.errors import InvalidOptions, ToolServerError, ToolServerTimeout, UnillmError
from unillm.redact import display_url, masked_argv
from unillm.schema_refs import check_refs
from unillm.tools import Tool

if sys.version_info < (3, 11):
    from exceptiongroup import BaseExceptionGroup

__all__ = ["MCPServer", "with_server_tools"]

_CONNECTION_CLOSED = -32000  # JSON-RPC codes the mcp SDK raises (mcp_types.CONNECTION_CLOSED)
_REQUEST_TIMEOUT = -32001  # (mcp_types.REQUEST_TIMEOUT)
_MAX_PAGES = 1000  # tools/list pages read before giving up on a server that never stops paging


@dataclass(frozen=True, slots=True)
class _Stdio:
    command: tuple[str, ...]
    env: Mapping[str, str] | None
    cwd: str | None


@dataclass(frozen=True, slots=True)
class _Http:
    url: str
    headers: Mapping[str, str]


class MCPServer:
    """An MCP tool server: pass it in ``tools=[...]`` of ``run_tools`` / ``stream_tools``.

    Create it with :meth:`stdio` (a command unillm starts) or :meth:`http` (a streamable HTTP
    endpoint). ``async with server:`` opens one session for several loops; otherwise each loop
    opens and closes its own.
    """

    def __init__(
        self,
        transport: _Stdio | _Http,
        *,
        timeout: float = 60.0,
        prefix: str = "",
        tools: Sequence[str] | None = None,
    ) -> None:
        """Use :meth:`stdio` or :meth:`http`.

        Args:
            transport: How to reach the server.
            timeout: Seconds for starting, listing the tools and each call.
            prefix: Put before each tool's name as the model sees it.
            tools: Offer only these of the server's tools.

        Raises:
            InvalidOptions: A bad option.
        """
        self._transport = transport
        self.timeout = _seconds(timeout, "timeout")
        if not isinstance(prefix, str):
            raise InvalidOptions(f"prefix must be a string (e.g. 'weather_'), got {prefix!r}")
        self.prefix = prefix
        if tools is not None and (isinstance(tools, str) or not all(isinstance(t, str) for t in tools)):
            raise InvalidOptions(f"tools= takes a list of the server's tool names, got {tools!r}")
        self.only = None if tools is None else tuple(tools)
        self._client: Any = None
        self._stack: AsyncExitStack | None = None
        self._tools: tuple[Tool, ...] = ()

    @classmethod
    def stdio(
        cls,
        command: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | Path | None = None,
        timeout: float = 60.0,
        prefix: str = "",
        tools: Sequence[str] | None = None,
    ) -> MCPServer:
        """A server unillm starts as a process and talks to over its stdin/stdout.

        Args:
            command: The command line, split (``["python", "server.py"]``).
            env: Environment variables added to the process's (which has only a safe default set).
            cwd: The process's working directory.
            timeout: Seconds for starting, listing the tools and each call.
            prefix: Put before each tool's name as the model sees it (``"weather_"``), against clashes.
            tools: Offer only these of the server's tools (its names, without ``prefix``).

        Raises:
            InvalidOptions: An empty command, or a bad option.
        """
        if (
            isinstance(command, str)
            or not isinstance(command, Sequence)
            or not command
            or not all(isinstance(w, str) and w for w in command)
        ):
            raise InvalidOptions(
                f"command must be a non-empty list of words, e.g. ['python', 'server.py'], got {command!r}"
            )
        if env is not None and not all(isinstance(k, str) and isinstance(v, str) for k, v in env.items()):
            raise InvalidOptions("env must map names to string values")
        where = None if cwd is None else str(cwd)
        return cls(_Stdio(tuple(command), env, where), timeout=timeout, prefix=prefix, tools=tools)

    @classmethod
    def http(
        cls,
        url: str,
        *,
        headers: Mapping[str, str] | None = None,
        timeout: float = 60.0,
        prefix: str = "",
        tools: Sequence[str] | None = None,
    ) -> MCPServer:
        """A server reached over streamable HTTP (``http://host:port/mcp``).

        Args:
            url: The endpoint.
            headers: Sent with every request (e.g. ``{"Authorization": "Bearer ..."}``; never shown).
            timeout: Seconds for connecting, listing the tools and each call.
            prefix: Put before each tool's name as the model sees it (``"weather_"``), against clashes.
            tools: Offer only these of the server's tools (its names, without ``prefix``).

        Raises:
            InvalidOptions: A URL that is not http(s), or a bad option.
        """
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise InvalidOptions(f"url must be an http:// or https:// URL, got {url!r}")
        if headers is not None and not all(
            isinstance(k, str) and isinstance(v, str) for k, v in headers.items()
        ):
            raise InvalidOptions("headers must map names to string values")
        return cls(_Http(url, dict(headers or {})), timeout=timeout, prefix=prefix, tools=tools)

    def __repr__(self) -> str:
        if isinstance(self._transport, _Stdio):
            return f"MCPServer.stdio({masked_argv(self._transport.command)!r})"
        return f"MCPServer.http({display_url(self._transport.url)!r})"

    @property
    def is_open(self) -> bool:
        """True while a session is open."""
        return self._client is not None

    @property
    def tools(self) -> tuple[Tool, ...]:
        """The tools the open session offers, as the model sees them (names with ``prefix``)."""
        return self._tools

    async def __aenter__(self) -> MCPServer:
        await self.open()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool:
        return await self._close(exc)

    async def open(self) -> None:
        """Start (or connect to) the server, open a session and list its tools.

        Raises:
            InvalidOptions: Already open; a tool whose name or schema unillm cannot send (a
                remote ``$ref``, a name of other characters than letters, digits, ``_``, ``-``);
                a name in ``tools=`` the server does not have.
            ToolServerError: The server could not be started or reached.
            ToolServerTimeout: It did not answer within ``timeout``.
            UnsupportedFeature: The ``mcp`` package is not installed.
        """
        if self._client is not None:
            raise InvalidOptions(f"{self!r} is already open; open a server once (or use another one)")
        mcp = _import_mcp()
        stack = AsyncExitStack()
        try:
            with self._translated("starting"):
                client = mcp.Client(await self._target(stack), read_timeout_seconds=self.timeout, cache=None)
                await stack.enter_async_context(client)  # its requests time out after self.timeout
                with anyio.fail_after(self.timeout):
                    remote = await _list(client)
            self._tools = self._offered(remote)
        except BaseException as e:
            with suppress(Exception):  # the session's own failure while failing to start: e says it
                await _exit(stack, e)
            raise
        self._client, self._stack = client, stack

    async def close(self) -> None:
        """Close the session (a stdio server's process is stopped); nothing when not open.

        Raises:
            ToolServerError: The session had broken off (e.g. an HTTP server that went away).
        """
        await self._close(None)

    async def _close(self, exc: BaseException | None) -> bool:
        """Close the session, with the error that ends it: the SDK's task groups must see it (a
        transport that failed cancels the task that opened the session, and reports it here)."""
        stack, self._client, self._stack, self._tools = self._stack, None, None, ()
        if stack is None:
            return False
        try:
            return await _exit(stack, exc)
        except Exception as e:
            error = _single(e)  # the SDK's task groups give back the body's error in a group
            if error is exc:
                return False  # the body's own error goes on as it was
            if isinstance(error, UnillmError):
                raise error from None
            raise ToolServerError(
                f"{self!r} broke off: {type(error).__name__}: {error} (did the server stop?)"
            ) from None

    async def call_remote(self, name: str, arguments: Mapping[str, Any]) -> tuple[str, bool]:
        """Run one of the server's tools.

        Args:
            name: The tool's name on the server (without ``prefix``).
            arguments: Its arguments.

        Returns:
            The result as message text, and True when the tool reported an error.

        Raises:
            ToolServerError: Not open, or the server broke off (its process exited, the connection closed).
            ToolServerTimeout: No answer within ``timeout`` (the call is cancelled on the server).
        """
        if self._client is None:
            raise ToolServerError(f"{self!r} is not open: pass it in tools=[...] or open it with async with")
        from mcp.shared.exceptions import MCPError

        with self._translated(f"calling {name!r}"), anyio.fail_after(self.timeout + 1):
            try:
                result = await self._client.call_tool(
                    name, dict(arguments), read_timeout_seconds=self.timeout
                )
            except MCPError as e:
                if e.code in (_CONNECTION_CLOSED, _REQUEST_TIMEOUT):
                    raise
                return e.message, True  # the server refused this call (unknown tool, bad arguments)
        return result_text(result), bool(result.is_error)

    async def _target(self, stack: AsyncExitStack) -> Any:
        """What ``mcp.Client`` connects to: stdio parameters, or a transport with our headers."""
        if isinstance(self._transport, _Stdio):
            from mcp.client.stdio import StdioServerParameters

            command = self._transport.command
            return StdioServerParameters(
                command=command[0],
                args=list(command[1:]),
                env=dict(self._transport.env) if self._transport.env is not None else None,
                cwd=self._transport.cwd,
            )
        from mcp.client.streamable_http import streamable_http_client
        from mcp.shared._httpx_utils import create_mcp_http_client

        http = await stack.enter_async_context(create_mcp_http_client(headers=dict(self._transport.headers)))
        return streamable_http_client(self._transport.url, http_client=http)

    def _offered(self, remote: Sequence[Any]) -> tuple[Tool, ...]:
        """The server's tools as unillm tools (filtered by ``tools=``, named with ``prefix``)."""
        names = {t.name for t in remote}
        missing = sorted(set(self.only or ()) - names)
        if missing:
            raise InvalidOptions(
                f"{self!r} has no tool named {', '.join(map(repr, missing))}; it has "
                f"{', '.join(sorted(names)) or 'none'}"
            )
        return tuple(
            to_tool(t, self, f"{self!r}") for t in remote if self.only is None or t.name in self.only
        )

    @contextmanager
    def _translated(self, doing: str) -> Iterator[None]:
        """The SDK's and the transport's failures as typed errors naming this server."""
        from mcp.shared.exceptions import MCPError

        try:
            yield
        except UnillmError:
            raise
        except Exception as e:
            error = _single(e)
            if isinstance(error, TimeoutError) or (
                isinstance(error, MCPError) and error.code == _REQUEST_TIMEOUT
            ):
                raise ToolServerTimeout(
                    f"{self!r} did not answer within {self.timeout:g} s while {doing}; raise "
                    f"timeout= on the server if its tools are slow"
                ) from error
            if isinstance(error, MCPError) and error.code == _CONNECTION_CLOSED:
                raise ToolServerError(
                    f"{self!r} closed the connection while {doing} (did its process exit? its "
                    f"stderr says why)"
                ) from None
            if isinstance(error, MCPError):
                raise ToolServerError(f"{self!r} refused {doing}: {error.message}") from error
            raise ToolServerError(f"{self!r} failed while {doing}: {type(error).__name__}: {error}") from None


@dataclass(frozen=True, slots=True)
class _RemoteTool:
    """The function behind one MCP tool in the loop: ``call_remote`` runs it on its server."""

    server: MCPServer
    name: str

    @property
    def __name__(self) -> str:
        return self.server.prefix + self.name

    async def call_remote(self, arguments: Mapping[str, Any]) -> tuple[str, bool]:
        return await self.server.call_remote(self.name, arguments)

    async def __call__(self, **arguments: Any) -> tuple[str, bool]:
        return await self.call_remote(arguments)


def to_tool(remote: Any, server: MCPServer, where: str) -> Tool:
    """A unillm tool from an MCP tool listing: its name (with the server's prefix), description and
    input schema (without its title), checked as any tool's (name characters, a valid schema, no
    remote ``$ref``).

    Args:
        remote: The ``mcp`` tool (``name``, ``description``, ``input_schema``).
        server: The server that runs it.
        where: The server, for messages.

    Raises:
        InvalidOptions: A name or schema unillm cannot send.
    """
    name = server.prefix + remote.name
    parameters = remote.input_schema
    if isinstance(parameters, Mapping):  # without its title, as a Python function's schema
        parameters = {k: v for k, v in parameters.items() if k != "title"}
    try:
        tool = Tool.from_spec({"name": name, "description": remote.description, "parameters": parameters})
        check_refs(tool.parameters, f"tool {name!r}")
    except InvalidOptions as e:
        raise InvalidOptions(f"{where}: {e}") from None
    return dataclasses.replace(tool, function=_RemoteTool(server, remote.name))


def result_text(result: Any) -> str:
    """A ``tools/call`` result as the tool message's text: its text blocks (an embedded text
    resource included), else its structured content as JSON; other blocks are named, not sent."""
    parts = []
    for block in result.content:
        kind = getattr(block, "type", "")
        resource = getattr(block, "resource", None)
        embedded = getattr(resource, "text", None)
        if kind == "text":
            parts.append(block.text)
        elif isinstance(embedded, str):
            parts.append(embedded)
        elif kind == "resource_link":
            parts.append(f"[resource {block.uri}]")
        else:
            mime = getattr(block, "mime_type", None) or getattr(resource, "mime_type", None) or ""
            parts.append(f"[{kind} {mime}".rstrip() + " content, not shown]")
    if (
        not any(getattr(b, "type", "") == "text" for b in result.content)
        and result.structured_content is not None
    ):
        return json.dumps(result.structured_content)
    return "\n".join(parts)


@asynccontextmanager
async def with_server_tools(specs: Any) -> AsyncIterator[Any]:
    """``tools=[...]`` with each :class:`MCPServer` replaced by its tools: servers not open are
    opened here and closed on the way out (also on an error or a cancellation).

    Args:
        specs: The loop's ``tools`` (functions, MCP servers, ...); anything but a list as given.

    Yields:
        The tool specs, each server's tools in its place.

    Raises:
        InvalidOptions: Two tools of one name (from any sources), or a server passed twice.
    """
    if isinstance(specs, (str, bytes, Mapping)) or not isinstance(specs, Iterable):
        yield specs  # to_tools says what is wrong
        return
    items = list(specs)
    servers = [s for s in items if isinstance(s, MCPServer)]
    if not servers:
        yield items
        return
    if len({id(s) for s in servers}) < len(servers):
        raise InvalidOptions("an MCPServer is in tools=[...] twice; pass each server once")
    async with AsyncExitStack() as stack:
        out: list[tuple[Any, str]] = []
        for spec in items:
            if not isinstance(spec, MCPServer):
                out.append((spec, "a Python tool"))
                continue
            if not spec.is_open:
                await stack.enter_async_context(spec)
            out += [(t, repr(spec)) for t in spec.tools]
        _refuse_clashes(out)
        yield [t for t, _ in out]


def _refuse_clashes(tools: Sequence[tuple[Any, str]]) -> None:
    """Two tools of one name, wherever they come from, refused before anything is sent."""
    seen: dict[str, str] = {}
    for spec, source in tools:
        name = Tool.from_spec(spec).name
        if name in seen:
            raise InvalidOptions(
                f"two tools are named {name!r}: from {seen[name]} and from {source}; drop one, "
                "or give the server a prefix= (MCPServer.stdio(..., prefix='weather_'))"
            )
        seen[name] = source


def _import_mcp() -> Any:
    try:
        import mcp
    except ImportError:
        from unillm.errors import UnsupportedFeature

        raise UnsupportedFeature(
            "unillm",
            "MCP tool servers",
            why="the mcp package is not installed here",
            alternative="Install the extra: pip install 'unillm-sdk[mcp]'",
        ) from None
    return mcp


async def _list(client: Any) -> list[Any]:
    """Every tool the server lists, page by page."""
    tools: list[Any] = []
    cursor = None
    for _ in range(_MAX_PAGES):
        page = await client.list_tools(cursor=cursor)
        tools += page.tools
        cursor = page.next_cursor
        if not cursor:
            return tools
    raise ToolServerError(f"the server listed more than {_MAX_PAGES} pages of tools")


async def _exit(stack: AsyncExitStack, exc: BaseException | None) -> bool:
    """Exit a session's stack as an ``async with`` would, with the exception that ends it (if any);
    the SDK shields its own shutdown (a stdio process is stopped) from a cancellation."""
    return bool(await stack.__aexit__(type(exc) if exc else None, exc, exc.__traceback__ if exc else None))


def _single(error: BaseException) -> BaseException:
    """The one error inside (nested) exception groups of one error each."""
    while isinstance(error, BaseExceptionGroup) and len(error.exceptions) == 1:
        error = error.exceptions[0]
    return error


def _seconds(value: Any, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise InvalidOptions(f"{name} must be a number of seconds > 0, got {value!r}")
    return float(value)
