"""One base for the look-alike HTTP servers: raw asyncio on 127.0.0.1 in a background thread.

A subclass answers each connection in :meth:`BackgroundServer._serve`; the base binds the port
(0: a free one, kept across ``stop()`` and ``start()``), tracks the connections so ``stop()``
cancels them, and records a bug inside the server in ``errors`` for the test to see.
:func:`read_request`, :func:`response_head` and :func:`send` speak the HTTP/1.1 wire for it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from http import HTTPStatus
from types import TracebackType
from typing import Any

from typing_extensions import Self


class BackgroundServer:
    """Start/stop, port and thread of a look-alike server (``with Server() as s: s.url``).

    Args:
        host: The address to bind.
        port: The port to bind; 0 picks a free one (kept across ``stop()`` and ``start()``).
    """

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self.host, self.port = host, port
        self.errors: list[str] = []  # unexpected exceptions inside the server (a test bug)
        self._ready = threading.Event()
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping: asyncio.Event | None = None
        self._conns: set[asyncio.Task[None]] = set()
        self._start_error: BaseException | None = None

    @property
    def url(self) -> str:
        """``http://host:port``."""
        return f"http://{self.host}:{self.port}"

    @property
    def _name(self) -> str:
        return type(self).__name__

    def start(self) -> Self:
        """Start serving in a background thread; returns once the port is bound.

        Raises:
            RuntimeError: Started already, or the port could not be bound within 5 s.
        """
        if self._thread is not None:
            raise RuntimeError(f"{self._name} already started")
        self._ready.clear()
        self._thread = threading.Thread(
            target=asyncio.run, args=(self._main(),), name=self._name, daemon=True
        )
        self._thread.start()
        if not self._ready.wait(5):
            raise RuntimeError(f"{self._name} did not start within 5 s")
        if self._start_error is not None:
            raise RuntimeError(f"{self._name} failed to start: {self._start_error!r}")
        return self

    def stop(self) -> None:
        """Close every connection and the listening socket, and join the thread.

        Raises:
            RuntimeError: The thread did not stop within 5 s.
        """
        thread, loop, stopping = self._thread, self._loop, self._stopping
        if thread is None:
            return
        if loop is not None and stopping is not None and thread.is_alive():
            with contextlib.suppress(RuntimeError):  # loop already closed
                loop.call_soon_threadsafe(stopping.set)
        thread.join(5)
        if thread.is_alive():
            raise RuntimeError(f"{self._name} thread did not stop within 5 s")
        self._thread = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Answer one connection's requests (the subclass's protocol)."""
        raise NotImplementedError

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stopping = asyncio.Event()
        try:
            server = await asyncio.start_server(self._connection, self.host, self.port)
        except BaseException as e:
            self._start_error = e
            self._ready.set()
            raise
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        try:
            await self._stopping.wait()
        finally:
            server.close()
            for task in list(self._conns):
                task.cancel()
            await asyncio.gather(*self._conns, return_exceptions=True)
            await server.wait_closed()

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._conns.add(task)
        try:
            await self._serve(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        except asyncio.CancelledError:  # stop(): end quietly (asyncio logs a cancelled handler)
            pass
        except Exception as e:  # a bug in this server: make the test see it
            self.errors.append(f"server error: {e!r}")
        finally:
            self._conns.discard(task)
            writer.close()


@dataclass
class HttpRequest:
    """One request read off the wire: ``path`` without its query, header names lower-cased,
    ``json`` the decoded body (None when there is none or it is not JSON)."""

    method: str
    path: str
    headers: dict[str, str]
    raw: bytes
    json: Any = None


async def read_request(reader: asyncio.StreamReader) -> HttpRequest | None:
    """One HTTP/1.1 request (Content-Length bodies only), or None at a clean EOF.

    Args:
        reader: The connection's reader.
    """
    line = await reader.readline()
    if not line:
        return None
    method, target, _version = line.decode("latin-1").rstrip("\r\n").split(" ", 2)
    headers: dict[str, str] = {}
    while True:
        raw = await reader.readline()
        if raw in (b"\r\n", b"\n", b""):
            break
        name, _, value = raw.decode("latin-1").partition(":")
        headers[name.strip().lower()] = value.strip()
    size = int(headers.get("content-length", "0"))
    data = await reader.readexactly(size) if size else b""
    parsed: Any = None
    if data:
        with contextlib.suppress(ValueError):
            parsed = json.loads(data)
    return HttpRequest(method, target.split("?", 1)[0], headers, data, parsed)


def response_head(status: int, headers: Mapping[str, str]) -> bytes:
    """The status line and headers of an answer, up to its body.

    Args:
        status: The HTTP status.
        headers: The headers, in order.
    """
    lines = [f"HTTP/1.1 {status} {HTTPStatus(status).phrase}", *(f"{k}: {v}" for k, v in headers.items())]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


async def send(
    writer: asyncio.StreamWriter,
    status: int,
    body: bytes,
    content_type: str = "application/json",
    headers: Mapping[str, str] | None = None,
) -> bool:
    """Write a whole answer with its Content-Length; True (the connection stays open).

    Args:
        writer: The connection's writer.
        status: The HTTP status.
        body: The body, whole.
        content_type: Its Content-Type.
        headers: More headers (after Content-Type and Content-Length).
    """
    head = {"content-type": content_type, "content-length": str(len(body)), **(headers or {})}
    writer.write(response_head(status, head) + body)
    await writer.drain()
    return True


__all__ = ["BackgroundServer", "HttpRequest", "read_request", "response_head", "send"]
