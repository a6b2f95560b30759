"""An answer arriving as deltas: ``Stream``, iterated with ``async for``, closed exactly once."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import AbstractAsyncContextManager, AsyncExitStack, contextmanager
from itertools import pairwise
from typing import TYPE_CHECKING, Protocol

import anyio
import httpx

from unillm import observe
from unillm.adapter.base import open_decoder
from unillm.client.closing import AsyncClosing
from unillm.client.deadline import Deadline
from unillm.client.transport import event_stream
from unillm.errors import StreamInterrupted
from unillm.options import Request
from unillm.results import Delta, Timings, ToolCall
from unillm.tools import ToolCallAccumulator

if TYPE_CHECKING:
    from unillm.adapter.base import Adapter, EngineInfo, HttpCall
    from unillm.client.answer import Answer
    from unillm.client.transport import Timeouts, Transport
    from unillm.errors import UnillmError


class StreamSource(Protocol):
    """What a :class:`Stream` needs of the ``LLM`` that sends it (an ``LLM`` is one): written
    here, so that this module does not import the one that creates streams."""

    engine: str
    adapter: Adapter
    _transport: Transport
    _timeouts: Timeouts

    def _observed_as(self) -> observe.Target: ...

    async def _prepare(self, request: Request) -> tuple[EngineInfo, HttpCall]: ...

    def _error(self, response: Answer, request: Request | None) -> UnillmError: ...

    def _slot(self, request: Request) -> AbstractAsyncContextManager[None]: ...


class ClosingStream(AsyncClosing):
    """What every stream shares: ``aclose()`` runs once however many callers ask, and a loop left
    early closes the stream at once (``_close_soon``) instead of whenever the garbage collector
    breaks the stream/generator reference cycle. Subclasses set ``_iter`` when iteration starts.
    """

    _iter: AsyncIterator[Delta] | None = None
    _closing: asyncio.Future[None] | None = None

    @property
    def text(self) -> str:
        """Text received so far for choice 0."""
        raise NotImplementedError

    def __aiter__(self) -> AsyncIterator[Delta]:
        raise NotImplementedError

    async def collect(self) -> str:
        """Consume the whole stream and return choice 0's text."""
        async for _ in self:
            pass
        return self.text

    async def aclose(self) -> None:
        """Stop the stream and close its HTTP response (once, however many callers ask)."""
        if self._iter is None:
            return
        if self._closing is not None:  # already closing (a loop left early): wait for it
            await asyncio.wait([self._closing])
            return
        self._closing = asyncio.get_running_loop().create_future()
        try:
            await self._iter.aclose()  # type: ignore[attr-defined]
        finally:
            self._closing.set_result(None)

    def _close_soon(self) -> None:
        """Close from a loop left early: the generator and this Stream form a reference cycle,
        which the garbage collector would otherwise close at some later, unknown time."""
        if self._iter is None or self._closing is not None:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no running asyncio loop (e.g. interpreter exit): nothing to await on
            return
        self._closing = loop.create_task(self._iter.aclose())  # type: ignore[attr-defined]
        self._closing.add_done_callback(_retrieve)

    def _deltas(self, gen: AsyncIterator[Delta]) -> AsyncIterator[Delta]:
        """What ``async for`` iterates over ``gen`` (set as ``_iter`` first)."""
        return _Deltas(self, gen)


class Stream(ClosingStream):
    """An answer arriving as :class:`~unillm.results.Delta` s; iterate it with ``async for``.

    ``text`` holds what arrived so far for choice 0. ``async with`` (or ``aclose()``) ends it
    deterministically; breaking out of a bare ``async for`` closes it right after (asyncio).

    Args:
        llm: The client that sends the request (built by :meth:`LLM.stream`).
        request: The validated request.
        deadline: The whole call's deadline, when a caller already started it.
    """

    def __init__(self, llm: StreamSource, request: Request, deadline: Deadline | None = None) -> None:
        self._llm, self._request = llm, request
        self._deadline = deadline  # a caller's (a Fleet's) deadline; None: one per stream
        self._texts: dict[int, list[str]] = {}
        self._thoughts: dict[int, list[str]] = {}
        self._calls: dict[int, ToolCallAccumulator] = {}
        self.started = False  # True once the engine accepted the stream (headers received)

    @property
    def text(self) -> str:
        """Text received so far for choice 0."""
        return "".join(self._texts.get(0, ()))

    @property
    def reasoning(self) -> str:
        """Thinking received so far for choice 0 ("" when the model did not think)."""
        return "".join(self._thoughts.get(0, ()))

    @property
    def tool_calls(self) -> list[ToolCall]:
        """Choice 0's tool calls received so far, joined and validated (as ``generate`` gives)."""
        acc = self._calls.get(0)
        return acc.calls() if acc is not None else []

    def __aiter__(self) -> AsyncIterator[Delta]:
        return self._deltas(self._started_iter())

    def _started_iter(self) -> AsyncIterator[Delta]:
        """The deltas' generator (observed when observers are registered), started once; a caller
        that closes the stream itself (a Fleet's) iterates it without the ``async for`` wrapper."""
        if self._iter is None:
            self._iter = self._observed(self._run()) if observe.OBSERVERS else self._run()
        return self._iter

    def _observed(self, deltas: AsyncIterator[Delta]) -> AsyncIterator[Delta]:
        """``deltas`` as the registered observers see them (unillm.observe)."""
        return observe.stream(self._llm._observed_as(), self._request, self._partial, deltas)

    def _partial(self) -> list[str]:
        """The text delivered so far for each choice, by choice index ("" for one with none yet)."""
        return ["".join(self._texts.get(i, ())) for i in range(max(self._texts, default=-1) + 1)]

    async def _run(self) -> AsyncIterator[Delta]:
        llm, request = self._llm, self._request
        deadline = self._deadline or Deadline(request.deadline, llm.engine, stream=True)
        with deadline.bound():
            info, call = await llm._prepare(request)
        decoder = open_decoder(llm.adapter, request, info, call)
        clock = time.perf_counter
        started = clock()
        stamps: list[float] = []  # arrival of each content chunk of choice 0 (Timings at the end)
        ended: float | None = None
        tokens: int | None = None
        finish: str | None = None
        held: Delta | None = None  # a delta with a finish reason or usage, until the next (_final)
        async with AsyncExitStack() as stack:
            with deadline.bound():
                await stack.enter_async_context(llm._slot(request))  # held until the stream ends
                response = await self._open(stack, call)
            self.started = True
            events = event_stream(response, llm.engine, llm._transport.pool.max_event_bytes)
            limited = deadline.limited
            with self._interruptions():
                while True:
                    if limited:
                        with deadline.bound(self._partial):
                            data = await anext(events, None)
                    else:  # no deadline: no cancel scope per chunk
                        data = await anext(events, None)
                    if data is None:
                        break
                    for delta in decoder.feed(data):
                        if (delta.text or delta.reasoning or delta.tool_calls) and delta.index == 0:
                            stamps.append(clock())
                        if delta.finish_reason is None and delta.usage is None:
                            if held is not None:
                                yield self._delivered(held)
                                held = None
                            yield self._delivered(delta)
                            continue
                        if delta.index == 0 and delta.finish_reason:
                            finish = delta.finish_reason
                        if delta.usage is not None:
                            tokens = delta.usage.completion_tokens
                        if held is not None and _merges(held, delta):
                            held.usage, held.finish_reason = (
                                delta.usage,
                                held.finish_reason or delta.finish_reason,
                            )
                        else:
                            if held is not None:
                                yield self._delivered(held)
                            held = delta
                    if decoder.done:
                        ended = clock()
                        await _drain(response)  # lets the connection go back to the pool
                        break
        final = self._final(decoder.done, held, finish)
        final.timings = _stream_timings(
            started, stamps, ended or clock(), tokens, one_choice=(request.n or 1) == 1
        )
        yield self._delivered(final)

    def _final(self, done: bool, held: Delta | None, finish: str | None) -> Delta:
        """The stream's last delta. A delta carrying a finish reason or usage is held until the
        next one arrives: engines send the finish, then the usage in a chunk of its own; they
        leave as one final delta (``held``), else a bare finish.

        Raises:
            StreamInterrupted: The stream ended before the answer finished.
        """
        if not done and finish is None:
            raise StreamInterrupted(
                f"{self._llm.engine} ended the stream before finishing the answer",
                partial_text=self._partial(),
            )
        return held if held is not None else Delta(finish_reason=finish)

    async def _open(self, stack: AsyncExitStack, call: HttpCall) -> Answer:
        """The streamed response to ``call``, closed with ``stack``; an error status raised typed."""
        llm, request = self._llm, self._request
        response = await stack.enter_async_context(llm._transport.open(call, request.timeout))
        if response.status_code >= 400:
            await response.aread()
            raise llm._error(response, request)
        return response

    @contextmanager
    def _interruptions(self) -> Iterator[None]:
        """Turn a read timeout or a broken connection mid-stream into StreamInterrupted."""
        llm, request = self._llm, self._request
        try:
            yield
        except httpx.TimeoutException as e:
            raise StreamInterrupted(
                f"{llm.engine} stopped sending for longer than the read timeout "
                f"({request.timeout or llm._timeouts.read:g}s) in the middle of the stream",
                partial_text=self._partial(),
            ) from e
        except httpx.TransportError as e:
            raise StreamInterrupted(
                f"the connection to {llm.engine} broke mid-stream ({type(e).__name__})",
                partial_text=self._partial(),
            ) from e

    def _delivered(self, delta: Delta) -> Delta:
        """``delta``, counted as handed to the caller: ``text``, ``tool_calls`` and a
        StreamInterrupted's ``partial_text`` hold exactly what the caller received (a delta held
        back, e.g. the finish awaiting its usage, counts only once it is yielded)."""
        if delta.tool_calls:
            self._calls.setdefault(delta.index, ToolCallAccumulator(self._request.tools or ())).add(
                delta.tool_calls
            )
        if delta.text:
            self._texts.setdefault(delta.index, []).append(delta.text)
        if delta.reasoning:
            self._thoughts.setdefault(delta.index, []).append(delta.reasoning)
        return delta


def _merges(held: Delta, delta: Delta) -> bool:
    """True when ``delta`` only adds the usage to the held finish delta."""
    return (
        held.usage is None
        and delta.usage is not None
        and not delta.text
        and not delta.reasoning
        and not delta.logprobs
        and not delta.tool_calls
    )


def _stream_timings(
    started: float,
    stamps: list[float],
    ended: float,
    tokens: int | None,
    *,
    one_choice: bool,
) -> Timings:
    """:class:`Timings` from the arrival times of choice 0's content chunks (vllm bench serve's way)."""
    total = ended - started
    ttft = stamps[0] - started if stamps else None
    gaps = tuple(b - a for a, b in pairwise(stamps))
    tpot = (
        (total - ttft) / (tokens - 1)
        if one_choice and ttft is not None and tokens is not None and tokens > 1
        else None
    )
    return Timings(
        total_s=total,
        ttft_s=ttft,
        itl_s=gaps,
        tpot_s=tpot,
        tokens_per_s=tokens / total if tokens and total > 0 else None,
    )


class _Deltas:
    """What ``async for`` iterates: when a loop is left early it is dropped, closing the stream."""

    __slots__ = ("_gen", "_over", "_stream")

    def __init__(self, stream: ClosingStream, gen: AsyncIterator[Delta]) -> None:
        self._stream, self._gen, self._over = stream, gen, False

    def __aiter__(self) -> _Deltas:
        return self

    async def __anext__(self) -> Delta:
        try:
            return await self._gen.__anext__()
        except BaseException:
            self._over = True  # finished, failed or cancelled: the generator has closed itself
            raise

    async def aclose(self) -> None:
        await self._stream.aclose()

    def __del__(self) -> None:
        if not self._over:
            self._stream._close_soon()


def _retrieve(task: asyncio.Future[None]) -> None:
    if not task.cancelled():
        task.exception()  # a failure while closing is not the caller's error; do not warn


async def _drain(response: Answer) -> None:
    with anyio.move_on_after(1.0):
        try:
            async for _ in response.aiter_bytes():  # goes on where the event stream stopped
                pass
        except httpx.HTTPError:
            pass
