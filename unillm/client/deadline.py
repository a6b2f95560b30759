"""A whole-call time limit, ``deadline=``: queueing, retries and generation all count.

``timeout=`` bounds each wait for the next bytes (a stall); a deadline bounds the call:

    r = await llm.generate("Hi", max_tokens=64, deadline=5)    # DeadlineExceeded after 5 s

Inside unillm every wait of one call runs under the same absolute end time:

    deadline = Deadline(request.deadline, engine)
    with deadline.bound():
        response = await transport.send(call)
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

import anyio

from unillm.errors import DeadlineExceeded


class Deadline:
    """The absolute end of one call (no limit when ``seconds`` is None)."""

    def __init__(self, seconds: float | None, engine: str, *, stream: bool = False) -> None:
        self.seconds, self.engine, self.stream = seconds, engine, stream
        self._at = None if seconds is None else anyio.current_time() + seconds

    @property
    def limited(self) -> bool:
        """True when there is a deadline (``bound()`` then opens a cancel scope)."""
        return self._at is not None

    @contextmanager
    def bound(self, partial: Callable[[], list[str]] | None = None) -> Iterator[None]:
        """Cancel what runs inside when the deadline passes and raise DeadlineExceeded instead."""
        if self._at is None or self.seconds is None:
            yield
            return
        with anyio.CancelScope(deadline=self._at) as scope:
            yield
        if scope.cancelled_caught:
            what = "the stream did not finish" if self.stream else "no complete answer"
            raise DeadlineExceeded(
                f"{self.engine}: {what} within deadline={self.seconds:g}s (waiting for a "
                "connection, retries and generation all count); raise deadline=, lower "
                "max_tokens, or send fewer requests at once",
                deadline=self.seconds,
                partial_text=partial() if partial else (),
            )
