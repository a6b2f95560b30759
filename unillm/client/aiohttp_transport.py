"""The default wire: HTTP/1.1 to an engine through aiohttp (its C parser costs a fraction of
httpx's pure-Python stack per streamed chunk: ``benchmarks/client_overhead.py``).

The transport's promises hold here as on httpx's wire, and its failures are raised as the
httpx exceptions the transport already maps to unillm's errors (one mapping for both wires):

* stall timeout: aiohttp's ``sock_read`` until the first bytes of a body, then a
  :class:`StallWatch` (``ReadTimeout``); the connect timeout is ``sock_connect``
  (``ConnectTimeout``);
* pool limit: at most ``max_connections`` answers open at once, more wait up to ``pool_wait``
  seconds for a free slot and then raise ``PoolTimeout`` having sent nothing;
* keep-alive: an answer read to its end returns its connection to the pool, kept
  ``keepalive_expiry`` seconds; one closed early (a cancelled stream) closes its connection;
* redirects are not followed; the body is decoded from its Content-Encoding;
* a body whose connection closes before its end fails at once (``RemoteProtocolError``), even
  where aiohttp's C parser leaves the reader waiting (a bad chunk header mid-body).

aiohttp keeps every idle connection until it expires (it has no count of idle ones to keep,
unlike ``Pool.max_keepalive`` on httpx's wire). It runs on asyncio only: under another event
loop the transport picks httpx's wire.
"""

from __future__ import annotations

import asyncio
import functools
import weakref
from collections.abc import AsyncGenerator, Callable

import aiohttp
import anyio
import httpx
from aiohttp.http_exceptions import HttpProcessingError

from unillm.client.answer import Answer
from unillm.errors import clip_message


class AiohttpWire:
    """Opens answers over one aiohttp session (made on first use, on the running loop).

    Args:
        base_url: The engine's root, without any user:password (sent in ``headers`` instead).
        headers: Sent with every request (authorization).
        connect: Seconds to open a connection.
        read: Seconds to wait for the next bytes of an answer, unless a call says otherwise.
        max_connections: Answers open at once.
        pool_wait: Seconds to wait for a free connection; None: the call's read timeout.
        keepalive_expiry: Seconds an idle connection is kept.
    """

    def __init__(
        self,
        base_url: str,
        headers: dict[str, str],
        *,
        connect: float,
        read: float,
        max_connections: int,
        pool_wait: float | None,
        keepalive_expiry: float,
    ) -> None:
        self._base = base_url.rstrip("/")
        self._headers, self._connect, self._read = headers, connect, read
        self._max, self._pool_wait, self._expiry = max_connections, pool_wait, keepalive_expiry
        self._session: aiohttp.ClientSession | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._slots = asyncio.Semaphore(max_connections)
        self._timeouts: dict[float, aiohttp.ClientTimeout] = {}

    def _session_here(self) -> aiohttp.ClientSession:
        loop = asyncio.get_running_loop()
        if self._session is not None and self._loop is loop:
            return self._session
        if self._session is not None:  # made on another loop, now gone: its sockets die with it
            self._session.detach()
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0, keepalive_timeout=self._expiry),
            headers=self._headers,
        )
        self._loop, self._slots = loop, asyncio.Semaphore(self._max)
        return self._session

    def _timeout(self, read: float) -> aiohttp.ClientTimeout:
        timeout = self._timeouts.get(read)
        if timeout is None:
            timeout = aiohttp.ClientTimeout(total=None, sock_connect=self._connect, sock_read=read)
            self._timeouts[read] = timeout
        return timeout

    async def open(self, method: str, path: str, body: bytes | None, read: float | None) -> Answer:
        """Send a request and return its answer once the headers arrived; the body streams.

        Raises:
            httpx.PoolTimeout: No connection became free in time (nothing was sent).
            httpx.TransportError: What aiohttp raised, as httpx names it (see the module).
        """
        session = self._session_here()
        slots, read = self._slots, self._read if read is None else read
        if slots.locked():
            wait = read if self._pool_wait is None else self._pool_wait
            try:
                with anyio.fail_after(wait):
                    await slots.acquire()
            except TimeoutError:
                raise httpx.PoolTimeout("no connection became free") from None
        else:
            await slots.acquire()  # free: taken at once
        try:
            response = await _request(
                session,
                method,
                self._base + path,
                data=body,
                headers=_JSON if body is not None else None,
                timeout=self._timeout(read),
            )
        except BaseException:
            slots.release()
            raise

        chunks = _body(response, read)

        async def close() -> None:
            try:
                await chunks.aclose()  # stops its StallWatch
            finally:
                response.release()
                slots.release()

        return Answer(response.status, response.headers, chunks=chunks, close=close)

    async def aclose(self) -> None:
        """Close every pooled connection."""
        if self._session is not None:
            session, self._session = self._session, None
            await session.close()


_JSON = {"Content-Type": "application/json"}
FAILURES = (aiohttp.ClientError, asyncio.TimeoutError)


async def _request(
    session: aiohttp.ClientSession,
    method: str,
    url: str,
    data: bytes | None,
    headers: dict[str, str] | None,
    timeout: aiohttp.ClientTimeout,
) -> aiohttp.ClientResponse:
    try:
        return await session.request(
            method, url, data=data, headers=headers, timeout=timeout, allow_redirects=False
        )
    except FAILURES as e:
        raise as_httpx_error(e) from e


async def _body(response: aiohttp.ClientResponse, stall: float) -> AsyncGenerator[bytes, None]:
    """The decoded body as it arrives, failures named as httpx names them.

    The first bytes are awaited under aiohttp's ``sock_read``; a body still arriving after them
    is watched by a :class:`StallWatch` instead (``sock_read`` re-arms a timer per chunk).
    """
    content = response.content
    read = content.readany
    watch: StallWatch | None = None
    unwatch = _fail_when_closed(response)
    try:
        chunk = await read()
        while chunk:
            yield chunk
            if watch is None and not content.at_eof():
                watch = StallWatch(content, stall)
                if response.connection is not None:
                    response.connection.protocol.read_timeout = None  # type: ignore[union-attr]
            if watch is not None:
                watch.waiting = True
                chunk = await read()
                watch.waiting = False
            else:
                chunk = await read()
    except FAILURES as e:
        raise as_httpx_error(e) from e
    finally:
        unwatch()
        if watch is not None:
            watch.stop()


_RETRIEVING: weakref.WeakSet[asyncio.Future[None]] = weakref.WeakSet()


def _fail_when_closed(response: aiohttp.ClientResponse) -> Callable[[], object]:
    """Fail the body's reader when its connection closes before the body ended; returns what
    stops watching.

    aiohttp's C parser drops the body of an answer whose framing breaks mid-body (a bad chunk
    header) without failing its reader, and closes the connection: the reader would wait for a
    stall. The connection's ``closed`` future ends the wait at once, as a ClientPayloadError.
    """
    protocol = response.connection.protocol if response.connection is not None else None
    closed = getattr(protocol, "closed", None)
    if protocol is None or not isinstance(closed, asyncio.Future) or closed.done():
        return _nothing
    if closed not in _RETRIEVING:  # a connection lost with an error is no one's unretrieved error
        _RETRIEVING.add(closed)
        closed.add_done_callback(_retrieve)
    content = response.content

    def lost(_: asyncio.Future[None]) -> None:
        if content.is_eof() or content.exception() is not None:
            return  # the body ended, or its failure is known
        why = protocol.exception()
        detail = f": {clip_message(str(why.message), 200)}" if isinstance(why, HttpProcessingError) else ""
        content.set_exception(
            aiohttp.ClientPayloadError(f"the connection closed before the end of the answer's body{detail}")
        )

    closed.add_done_callback(lost)
    return functools.partial(closed.remove_done_callback, lost)


def _retrieve(future: asyncio.Future[None]) -> None:
    if not future.cancelled():
        future.exception()


def _nothing() -> None:
    return None


class StallWatch:
    """Fails a body whose reader has waited ``stall`` seconds for bytes that never came.

    It looks every ``stall / TICKS`` seconds (so a stall is reported between ``stall`` and
    ``stall * (1 + 1/TICKS)`` seconds after the last byte), where aiohttp's ``sock_read``
    cancels and re-arms a timer on every chunk received: ~3 us a chunk, a third of unillm's
    own work per streamed chunk. A reader busy elsewhere (not waiting) is no stall.

    Args:
        content: The body's stream reader.
        stall: Seconds of waiting without a byte that make a stall.
    """

    TICKS = 8
    __slots__ = ("_content", "_handle", "_loop", "_quiet", "_seen", "_stall", "_tick", "waiting")

    def __init__(self, content: aiohttp.StreamReader, stall: float) -> None:
        self._loop = asyncio.get_running_loop()
        self._content, self._stall, self._tick = content, stall, stall / self.TICKS
        self._seen, self._quiet = content.total_bytes, 0
        self.waiting = False  #: set by the reader around each wait for bytes
        self._handle: asyncio.TimerHandle | None = self._loop.call_later(self._tick, self._check)

    def _check(self) -> None:
        total = self._content.total_bytes
        self._quiet = self._quiet + 1 if self.waiting and total == self._seen else 0
        self._seen = total
        if self._quiet >= self.TICKS:
            self._handle = None
            self._content.set_exception(aiohttp.SocketTimeoutError(f"no bytes arrived for {self._stall:g}s"))
        else:
            self._handle = self._loop.call_later(self._tick, self._check)

    def stop(self) -> None:
        """Stop watching (the body ended or was closed)."""
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None


def as_httpx_error(e: aiohttp.ClientError | asyncio.TimeoutError) -> httpx.RequestError:
    """The httpx exception that says what the aiohttp failure ``e`` says."""
    message = str(e) or type(e).__name__
    if isinstance(e, aiohttp.ConnectionTimeoutError):
        return httpx.ConnectTimeout(message)
    if isinstance(e, asyncio.TimeoutError):  # aiohttp's SocketTimeoutError: a stall
        return httpx.ReadTimeout(message)
    if isinstance(e, aiohttp.ClientConnectorError):
        return httpx.ConnectError(message)
    if isinstance(e, aiohttp.ClientPayloadError):
        if isinstance(e.__cause__, aiohttp.http_exceptions.ContentEncodingError):
            return httpx.DecodingError(message)
        return httpx.RemoteProtocolError(message)
    if isinstance(e, (aiohttp.ServerDisconnectedError, aiohttp.ClientResponseError)):
        return httpx.RemoteProtocolError(message)
    if isinstance(e, aiohttp.ClientOSError):
        return httpx.ReadError(message)
    return httpx.TransportError(message)
