"""HTTP to an engine: one pooled httpx client, timeouts, and retries only where they are safe.

Retries happen for a refused/failed connection and for 429/503 answers received before any
byte of a body was read, honouring ``Retry-After``; never once a stream has started.

``Retry-After`` is trusted up to :data:`MAX_RETRY_AFTER` seconds (an ``Overloaded.retry_after``
never says more; a retry waits at most ``RetryPolicy.max_wait``, a fleet replica cools down at
most ``Fleet(max_retry_after=...)``). A value that is not a finite, non-negative number of
seconds or an HTTP date in the future counts as absent.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from typing import Any, TypeVar

import anyio
import httpx

from unillm.adapter.base import HttpCall
from unillm.errors import EngineTimeout, EngineUnavailable, InvalidOptions, MalformedResponse, PoolTimeout
from unillm.redact import display_url

R = TypeVar("R")
E = TypeVar("E", bound=Exception)
RETRY_STATUSES = frozenset({429, 503})
#: The longest ``Retry-After`` believed, in seconds (5 minutes): one engine answering
#: ``Retry-After: 999999`` must not stop its callers for days.
MAX_RETRY_AFTER = 300.0
MiB = 1024 * 1024
ANSWER_BYTES, EVENT_BYTES = 32 * MiB, 8 * MiB  # Pool's defaults (its docstring says why)


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How often and how long to retry safe failures. ``RetryPolicy(attempts=1)`` disables it.

    Args:
        attempts: Tries in all, the first included (1 turns retries off).
        initial_wait: Seconds before the first retry (a ``Retry-After`` header wins).
        max_wait: The longest wait in seconds between two tries, ``Retry-After`` included.
        max_total: Seconds after which no further retry starts.
    """

    attempts: int = 4
    initial_wait: float = 0.25
    max_wait: float = 10.0
    max_total: float = 60.0

    def __post_init__(self) -> None:
        attempts = self.attempts
        if (
            not isinstance(attempts, (int, float))
            or isinstance(attempts, bool)
            or not math.isfinite(attempts)
            or attempts != int(attempts)
            or attempts < 1
        ):
            raise InvalidOptions(
                f"RetryPolicy.attempts counts the first try too: a whole number, "
                f"1 or more (1 turns retries off), got {attempts!r}"
            )
        object.__setattr__(self, "attempts", int(attempts))  # config tables may give 1.0
        _positive_seconds(self, "initial_wait", "max_wait", "max_total")


@dataclass(frozen=True, slots=True)
class Timeouts:
    """Seconds to connect, and to wait for the next bytes of an answer (a stall).

    ``read`` is not a limit on the whole call: pass ``deadline=`` to a call for that.

    Args:
        connect: Seconds to open a connection.
        read: Seconds to wait for the next bytes of an answer before EngineTimeout.
    """

    connect: float = 10.0
    read: float = 600.0

    def __post_init__(self) -> None:
        _positive_seconds(self, "connect", "read")


@dataclass(frozen=True, slots=True)
class Pool:
    """The connections kept to one engine, and how large one answer may be:
    ``unillm.connect(..., pool=unillm.Pool(64, wait=5))`` (or a ``[pool]`` config table).

    At most ``max_connections`` requests are in flight at once; more wait up to ``wait`` seconds
    (None: as long as the read timeout) for a free connection, then raise ``PoolTimeout``
    having sent nothing. ``max_keepalive`` idle connections are kept ``keepalive_expiry`` s.

    Size limits, in bytes after any Content-Encoding is undone; past them the answer is dropped
    unread and the call raises ``MalformedResponse``, so a broken or hostile server cannot fill
    the client's memory:

    * ``max_answer_bytes`` (32 MiB): a whole non-streamed answer. The largest real ones are
      embedding batches (64 vectors of 8192 floats: about 12 MiB of JSON) and answers with
      ``top_logprobs`` (a few KiB per token).
    * ``max_event_bytes`` (8 MiB): one server-sent event of a stream. Events carry a few tokens,
      except SGLang's native stream, whose events repeat the whole text (and logprobs) so far.

    Args:
        max_connections: Requests in flight at once.
        wait: Seconds to wait for a free connection before PoolTimeout; None: the read timeout.
        max_keepalive: Idle connections kept open.
        keepalive_expiry: Seconds an idle connection is kept.
        max_answer_bytes: The largest non-streamed answer, in bytes.
        max_event_bytes: The largest server-sent event of a stream, in bytes.
    """

    max_connections: int = 256
    wait: float | None = None
    max_keepalive: int = 64
    keepalive_expiry: float = 4.0  # below uvicorn's 5 s (vLLM, SGLang): never reuse a closing one
    max_answer_bytes: int = ANSWER_BYTES
    max_event_bytes: int = EVENT_BYTES

    def __post_init__(self) -> None:
        for name in ("max_connections", "max_keepalive", "max_answer_bytes", "max_event_bytes"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise InvalidOptions(f"Pool.{name} must be a positive integer, got {value!r}")
        _positive_seconds(self, "keepalive_expiry", *(["wait"] if self.wait is not None else []))

    def limits(self) -> httpx.Limits:
        """The same limits as httpx's."""
        return httpx.Limits(
            max_connections=self.max_connections,
            max_keepalive_connections=self.max_keepalive,
            keepalive_expiry=self.keepalive_expiry,
        )


def _positive_seconds(owner: object, *names: str) -> None:
    for name in names:
        value = getattr(owner, name)
        if (
            not isinstance(value, (int, float))
            or isinstance(value, bool)
            or not math.isfinite(value)
            or value <= 0
        ):
            raise InvalidOptions(
                f"{type(owner).__name__}.{name} must be a positive, finite number of seconds, got {value!r}"
            )


class _Retryable(Exception):
    def __init__(
        self,
        cause: BaseException | None,
        response: httpx.Response | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(str(cause or response))
        self.cause, self.response, self.retry_after = cause, response, retry_after


def retry_after_seconds(value: str | None, cap: float = MAX_RETRY_AFTER) -> float | None:
    """Parse a Retry-After header (seconds or an HTTP date), at most ``cap`` seconds.

    Returns:
        The seconds to wait, or None when the header is absent or not a finite, non-negative
        number of seconds or an HTTP date in the future (garbage counts as absent).
    """
    if not value:
        return None
    seconds: float | None
    try:
        seconds = float(value)
    except ValueError:
        seconds = _seconds_until(value)
    if seconds is None or not math.isfinite(seconds) or seconds < 0:
        return None
    return min(seconds, cap)


def _seconds_until(date: str) -> float | None:
    """Seconds from now until an HTTP date; None for garbage or a date in the past."""
    import datetime as dt

    try:
        when = parsedate_to_datetime(date)
        seconds = (when - dt.datetime.now(when.tzinfo)).total_seconds()
    except (TypeError, ValueError, OverflowError):
        return None
    return seconds if seconds > 0 else None


class Transport:
    """Sends :class:`HttpCall` s to one engine over a shared connection pool.

    ``http_transport`` replaces the network with any ``httpx.AsyncBaseTransport`` (e.g. an
    engine running inside this process).
    """

    def __init__(
        self,
        base_url: str,
        *,
        api_key: str | None = None,
        timeouts: Timeouts = Timeouts(),
        retry: RetryPolicy = RetryPolicy(),
        engine: str = "engine",
        http_transport: httpx.AsyncBaseTransport | None = None,
        pool: Pool = Pool(),
    ) -> None:
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.base_url = display_url(base_url)  # what errors print: a password in it masked
        self.retry, self.timeouts, self.engine = retry, timeouts, engine
        self.pool = pool
        #: Set by :func:`unillm.launch`: what is known to have gone wrong with the engine it
        #: started (a death by signal, a dead worker), added to the errors that it explains.
        self.diagnose: Callable[[], str | None] | None = None
        url = httpx.URL(base_url)  # a user:password in it goes as basic auth, kept out of httpx's logs
        auth = httpx.BasicAuth(url.username, url.password) if url.userinfo else None
        self._client = httpx.AsyncClient(
            base_url=url.copy_with(userinfo=b"") if auth else url,
            auth=auth,
            headers=headers,
            timeout=self._timeout(None),
            limits=pool.limits(),
            transport=http_transport,
        )

    def _timeout(self, read: float | None) -> httpx.Timeout:
        read = self.timeouts.read if read is None else read
        wait = read if self.pool.wait is None else self.pool.wait
        return httpx.Timeout(read, connect=self.timeouts.connect, pool=wait)

    def explained(self, error: E) -> E:
        """``error`` with what :attr:`diagnose` knows of the engine's trouble appended."""
        note = self.diagnose() if self.diagnose is not None else None
        if note:
            error.args = (f"{error}. {note}", *error.args[1:])
        return error

    async def aclose(self) -> None:
        """Close every pooled connection."""
        await self._client.aclose()

    def _request(self, call: HttpCall, timeout: float | None) -> httpx.Request:
        content = None if call.json is None else _standard_json(call.json, self.engine)
        headers = {"Content-Type": "application/json"} if content is not None else None
        ext = None if timeout is None else {"timeout": self._timeout(timeout).as_dict()}
        return self._client.build_request(
            call.method, call.path, content=content, headers=headers, extensions=ext
        )

    async def send(self, call: HttpCall, timeout: float | None = None) -> httpx.Response:
        """Send and read the whole answer (at most ``Pool.max_answer_bytes``); raise
        EngineUnavailable if it cannot be reached, MalformedResponse if it is too large."""

        async def attempt() -> httpx.Response:
            response = await self._client.send(self._request(call, timeout), stream=True)
            return self._check_retry(await self.read(response))

        return await self._retrying(attempt)

    @asynccontextmanager
    async def open(self, call: HttpCall, timeout: float | None = None) -> AsyncIterator[httpx.Response]:
        """Open a streamed answer; retries happen only before its body is read. An error answer
        (status 400 or more) comes read whole, as :meth:`send` reads it."""

        async def attempt() -> httpx.Response:
            response = await self._client.send(self._request(call, timeout), stream=True)
            if response.status_code >= 400:
                response = await self.read(response)
            return self._check_retry(response)

        response = await self._retrying(attempt)
        try:
            yield response
        finally:
            with anyio.CancelScope(shield=True):
                await response.aclose()

    async def read(self, response: httpx.Response) -> httpx.Response:
        """``response`` (opened with ``stream=True``) read whole and closed, its content decoded.

        Raises MalformedResponse, without reading the rest, past ``Pool.max_answer_bytes``.
        """
        limit = self.pool.max_answer_bytes
        chunks: list[bytes] = []
        size = 0
        try:
            declared = response.headers.get("content-length", "")
            if declared.isdigit() and int(declared) > limit:
                raise self._too_large(f" (it declares {int(declared)} bytes)")
            async for chunk in response.aiter_bytes():
                size += len(chunk)
                if size > limit:
                    raise self._too_large("")
                chunks.append(chunk)
        finally:
            await response.aclose()
        headers = [(k, v) for k, v in response.headers.multi_items() if k.lower() != "content-encoding"]
        return httpx.Response(
            response.status_code, headers=headers, content=b"".join(chunks), request=response.request
        )

    def _too_large(self, declared: str) -> MalformedResponse:
        return MalformedResponse(
            f"{self.engine} at {self.base_url}: the answer is larger than this client's limit of "
            f"{self.pool.max_answer_bytes} bytes{declared}; the rest was not read. Raise "
            "unillm.Pool(max_answer_bytes=...) if answers this large are expected"
        )

    def _check_retry(self, response: httpx.Response) -> httpx.Response:
        if response.status_code in RETRY_STATUSES and self.retry.attempts > 1:
            raise _Retryable(None, response, retry_after_seconds(response.headers.get("retry-after")))
        return response

    async def _once(self, attempt: Callable[[], Awaitable[R]]) -> R:
        try:
            return await attempt()
        except (httpx.ConnectError, httpx.ConnectTimeout) as e:
            raise _Retryable(e) from e
        except httpx.PoolTimeout as e:
            wait = self.pool.wait
            raise PoolTimeout(
                f"no connection to {self.engine} at {self.base_url} became free"
                f"{f' within {wait:g}s' if wait else ''}: all {self.pool.max_connections} pooled "
                "connections were busy, and nothing was sent. Send fewer requests at once, or "
                "raise unillm.Pool(max_connections=..., wait=...)"
            ) from e
        except httpx.TimeoutException as e:
            raise EngineTimeout(
                f"{self.engine} at {self.base_url} did not answer in time ({type(e).__name__}); "
                "raise timeout= or check the engine's load"
            ) from e
        except httpx.DecodingError as e:
            raise MalformedResponse(
                f"{self.engine} at {self.base_url}: the answer does not decode as its headers say "
                f"(Content-Encoding or charset): {e}"
            ) from e
        except httpx.TransportError as e:
            raise self.explained(EngineUnavailable(f"{self.engine} at {self.base_url}: {e!r}")) from e

    async def _retrying(self, attempt: Callable[[], Awaitable[httpx.Response]]) -> httpx.Response:
        try:
            return await self._once(attempt)
        except _Retryable as first:
            if self.retry.attempts <= 1:
                return self._give_up(first)
            last = first
        import stamina  # only paid for when a retry is needed

        _quiet_unconfigured_stamina_logging()

        def backoff(exc: Exception) -> bool | float:
            if not isinstance(exc, _Retryable):
                return False
            return min(exc.retry_after, self.retry.max_wait) if exc.retry_after is not None else True

        await anyio.sleep(min(last.retry_after or self.retry.initial_wait, self.retry.max_wait))
        try:
            async for trial in stamina.retry_context(
                on=backoff,
                attempts=self.retry.attempts - 1,
                timeout=self.retry.max_total,
                wait_initial=self.retry.initial_wait,
                wait_max=self.retry.max_wait,
                wait_jitter=self.retry.initial_wait,
            ):
                with trial:
                    return await self._once(attempt)
        except _Retryable as e:
            last = e
        return self._give_up(last)

    def _give_up(self, failure: _Retryable) -> httpx.Response:
        if failure.response is not None:
            return failure.response
        raise self.explained(
            EngineUnavailable(
                f"cannot reach {self.engine} at {self.base_url} ({failure.cause!r}) after "
                f"{self.retry.attempts} attempt(s); is the engine running and listening there?"
            )
        ) from failure.cause


def _quiet_unconfigured_stamina_logging() -> None:
    """Keep stamina's retry records off stderr unless the program configured logging.

    stamina logs each scheduled retry on its ``stamina`` logger; with no handler anywhere,
    Python's last-resort handler printed a bare ``stamina.retry_scheduled`` line. A NullHandler
    (what libraries do) stops that, while records still propagate to handlers the program sets
    up (``logging.basicConfig()`` shows them again).
    """
    logger = logging.getLogger("stamina")
    if not any(isinstance(h, logging.NullHandler) for h in logger.handlers):
        logger.addHandler(logging.NullHandler())


def _standard_json(value: Any, engine: str) -> bytes:
    """Encode a request body as standard JSON: NaN and Infinity are refused, never sent."""
    try:
        return json.dumps(value, allow_nan=False).encode()
    except (TypeError, ValueError) as e:
        raise InvalidOptions(
            f"the request for {engine} is not standard JSON ({e}); pass finite "
            "numbers and JSON types only. Nothing was sent"
        ) from None


NDJSON_TYPES = ("application/x-ndjson", "application/jsonl", "application/json-seq")


async def event_stream(
    response: httpx.Response, engine: str, max_event_bytes: int = EVENT_BYTES
) -> AsyncIterator[str]:
    """The ``data`` of each server-sent event in ``response``, parsed by httpx-sse.

        async for data in event_stream(response, "vllm"):
            chunk = json.loads(data)

    A newline-delimited JSON body (``application/x-ndjson``, Ollama's streams) yields each
    non-empty line as one event's data. A body that is neither (nor ``text/event-stream``), a
    broken stream, a body that does not decode as its Content-Encoding says, or more than
    ``max_event_bytes`` bytes without an event (checked as they arrive: the rest is not read)
    raise MalformedResponse naming the engine. Events that
    carry no data (a bare ``event:`` or ``id:``) are skipped.
    """
    from httpx_sse import EventSource, SSEError

    pending = 0  # bytes received since the last event was dispatched

    async def capped() -> AsyncIterator[bytes]:
        nonlocal pending
        async for chunk in response.aiter_bytes():  # decoded: the size that lands in memory
            pending += len(chunk)
            if pending > max_event_bytes:
                raise MalformedResponse(
                    f"{engine}: a stream event is larger than this client's limit of "
                    f"{max_event_bytes} bytes; the stream was dropped. Raise "
                    "unillm.Pool(max_event_bytes=...) if events this large are expected"
                )
            yield chunk

    # httpx-sse reads the headers and the text of this stand-in, whose bytes are already decoded
    content_type = response.headers.get("content-type", "")
    source = httpx.Response(response.status_code, headers={"content-type": content_type}, content=capped())
    if content_type.split(";")[0].strip().lower() in NDJSON_TYPES:  # Ollama: one JSON object a line
        try:
            async for line in source.aiter_lines():
                pending = 0
                if line.strip():
                    yield line
        except httpx.DecodingError as e:
            raise MalformedResponse(
                f"{engine}: the stream does not decode as its headers say (Content-Encoding or charset): {e}"
            ) from None
        return
    try:
        async for event in EventSource(source).aiter_sse():
            pending = 0
            if event.data:
                yield event.data
    except SSEError as e:
        raise MalformedResponse(f"{engine}: malformed event stream: {e}") from None
    except httpx.DecodingError as e:
        raise MalformedResponse(
            f"{engine}: the stream does not decode as its headers say (Content-Encoding or charset): {e}"
        ) from None


def json_body(response: httpx.Response, engine: str) -> Any:
    """The decoded JSON of an answer, or a MalformedResponse naming the engine."""
    try:
        return json.loads(response.content)
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError):
        raise MalformedResponse(
            f"{engine} answered {response.status_code} with non-JSON: {response.text[:200]!r}"
        ) from None
