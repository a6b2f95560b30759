"""Events from the worker thread to the event loop that asked for them, in order.

The worker hands each event over without waiting (on asyncio; through ``anyio.from_thread`` on
other backends), so decoding goes on while the loop sends bytes. When the reader goes away, the
request's ``cancelled`` flag is set and the worker's next :meth:`Channel.emit` raises
:class:`Cancelled`.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import threading
from collections.abc import Callable
from typing import Any

import anyio
import anyio.from_thread
import anyio.lowlevel

from unillm_mlx.inprocess.events import Event

__all__ = ["Cancelled", "Channel"]


class Cancelled(Exception):
    """The request's reader went away (or the event loop ended): the worker stops it."""


class Channel:
    """One request's events; made on the event loop, fed and closed by the worker thread.

    Args:
        cancelled: The request's flag: set here when the reader has gone, read before each event.
    """

    def __init__(self, cancelled: threading.Event) -> None:
        self._send, self.receive = anyio.create_memory_object_stream[Event](math.inf)
        self._cancelled = cancelled
        self._token = anyio.lowlevel.current_token()
        self._loop = _asyncio_loop()

    def emit(self, event: Event) -> None:
        """Hand ``event`` to the loop (worker thread).

        Raises:
            Cancelled: The request was cancelled, or the event loop has ended.
        """
        if self._cancelled.is_set():
            raise Cancelled
        try:
            self._on_loop(self._deliver, event)
        except RuntimeError:
            self._cancelled.set()  # the event loop has ended
            raise Cancelled from None

    def close(self) -> None:
        """End the events (worker thread): memory streams are not thread-safe, so on the loop."""
        with contextlib.suppress(RuntimeError):  # RuntimeError: the event loop has ended
            self._on_loop(self._send.close)

    def _deliver(self, event: Event) -> None:  # on the event loop
        try:
            self._send.send_nowait(event)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            self._cancelled.set()  # the reader went away

    def _on_loop(self, fn: Callable[..., None], *args: Any) -> None:
        if self._loop is not None:  # asyncio: hand over without waiting, so decoding goes on
            self._loop.call_soon_threadsafe(fn, *args)
        else:
            anyio.from_thread.run_sync(fn, *args, token=self._token)


def _asyncio_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:  # another backend (trio): events go through anyio.from_thread
        return None
