"""One in-flight run of an async operation, shared by every caller that asks meanwhile.

Discovery uses it: 20 concurrent first calls on a stalled engine wait for *one* discovery and
share its result or its failure, instead of failing one after another behind a lock::

    flight: SingleFlight[EngineInfo] = SingleFlight()
    info = await flight.run(discover, wait_limit=5.0)

A failure is shared by the callers waiting at that moment; the next call runs the operation
again. When the caller running it is cancelled (its own deadline, say), the waiters do not
inherit that: one of them runs it again.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

import anyio

R = TypeVar("R")


class _Flight(Generic[R]):
    __slots__ = ("abandoned", "done", "error", "result")

    def __init__(self) -> None:
        self.done = anyio.Event()
        self.result: R | None = None
        self.error: Exception | None = None
        self.abandoned = False  # its runner was cancelled: no outcome to share


class SingleFlight(Generic[R]):
    """At most one run of an operation at a time; callers arriving meanwhile share its outcome."""

    __slots__ = ("_flight",)

    def __init__(self) -> None:
        self._flight: _Flight[R] | None = None

    async def run(self, operation: Callable[[], Awaitable[R]], *, wait_limit: float | None = None) -> R:
        """``operation()``, or the outcome of the run already in flight.

        Args:
            operation: what to run when nothing is in flight.
            wait_limit: the longest a caller *waiting* on another's run waits (None: no limit).

        Raises:
            TimeoutError: a waiting caller waited ``wait_limit`` seconds (the run goes on).
            Exception: whatever the shared run raised.
        """
        while (flight := self._flight) is not None:
            with anyio.fail_after(wait_limit):
                await flight.done.wait()
            if flight.abandoned:  # its runner was cancelled: run it again (perhaps here)
                continue
            if flight.error is not None:
                raise flight.error
            return flight.result  # type: ignore[return-value]
        flight = self._flight = _Flight()
        try:
            flight.result = result = await operation()
        except Exception as e:
            flight.error = e
            raise
        except BaseException:  # cancelled (or interrupted): nothing to share
            flight.abandoned = True
            raise
        finally:
            self._flight = None
            flight.done.set()
        return result


__all__ = ["SingleFlight"]
