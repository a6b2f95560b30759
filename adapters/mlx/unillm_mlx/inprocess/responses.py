"""HTTP responses for a generation request: one JSON body, or an SSE stream as tokens come.

A read timeout (httpx's ``timeout.read``) applies to each wait for the worker, as it would to a
network read; closing a stream, or leaving early, cancels the generation.
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator
from typing import Any

import anyio
import httpx
from anyio.streams.memory import MemoryObjectReceiveStream

from unillm_mlx import DEFAULT_MODEL
from unillm_mlx.inprocess.answer import Answer, sse
from unillm_mlx.inprocess.events import Done, Event, Failure, Start
from unillm_mlx.inprocess.parsing import Job

__all__ = ["Deadline", "EventStream", "json_response", "respond"]


def json_response(status: int, payload: Any) -> httpx.Response:
    """A JSON response."""
    return httpx.Response(status, json=payload)


async def respond(
    request: httpx.Request, job: Job, events: MemoryObjectReceiveStream[Event]
) -> httpx.Response:
    """The response to a generation request whose worker events arrive on ``events``.

    Args:
        request: The HTTP request (its read timeout applies to each wait).
        job: The parsed request.
        events: The worker's events for it.

    Returns:
        The whole answer, a stream of it, or the error the worker reported first.

    Raises:
        httpx.ReadTimeout: The worker sent nothing for the read timeout.
    """
    read_timeout = (request.extensions.get("timeout") or {}).get("read")
    try:
        with Deadline(read_timeout, request):
            first = await events.receive()
    except BaseException:
        job.cancelled.set()
        events.close()
        raise
    if isinstance(first, Failure):
        events.close()
        return json_response(first.status, {"error": first.message})
    assert isinstance(first, Start)  # the worker starts with Start or Failure
    answer = Answer(job, prompt_tokens=first.prompt_tokens, model=str(job.body.get("model") or DEFAULT_MODEL))
    if job.stream:
        return httpx.Response(
            200,
            headers={"content-type": "text/event-stream"},
            stream=EventStream(answer, events, read_timeout, request),
        )
    try:
        with Deadline(read_timeout, request):
            async for event in events:
                if isinstance(event, Failure):
                    return json_response(event.status, {"error": event.message})
                answer.feed(event)
    finally:
        job.cancelled.set()
        events.close()
    return json_response(200, answer.body())


class Deadline:
    """Raise httpx.ReadTimeout when the engine sends nothing for ``seconds`` (like a network stall)."""

    def __init__(self, seconds: float | None, request: httpx.Request) -> None:
        self._scope = anyio.move_on_after(seconds if seconds is not None else math.inf)
        self._request, self._seconds = request, seconds

    def __enter__(self) -> None:
        self._scope.__enter__()

    def __exit__(self, *exc: Any) -> bool:
        suppressed = self._scope.__exit__(*exc)
        if self._scope.cancelled_caught:
            raise httpx.ReadTimeout(
                f"in-process MLX sent nothing for {self._seconds}s", request=self._request
            )
        return bool(suppressed)


class EventStream(httpx.AsyncByteStream):
    """The SSE body of a streamed answer; closing it stops the generation."""

    def __init__(
        self,
        answer: Answer,
        events: MemoryObjectReceiveStream[Event],
        read_timeout: float | None,
        request: httpx.Request,
    ) -> None:
        self._answer, self._events = answer, events
        self._read_timeout, self._request = read_timeout, request

    async def __aiter__(self) -> AsyncIterator[bytes]:
        while True:
            with Deadline(self._read_timeout, self._request):
                try:
                    event = await self._events.receive()
                except anyio.EndOfStream:
                    return
            if isinstance(event, Failure):  # mid-stream failure: an error event, as engines send
                yield sse({"error": {"message": event.message, "code": event.status}})
                return
            for chunk in self._answer.chunks(event):
                yield sse(chunk)
            if isinstance(event, Done):
                yield b"data: [DONE]\n\n"
                return

    async def aclose(self) -> None:
        self._answer.job.cancelled.set()
        self._events.close()
