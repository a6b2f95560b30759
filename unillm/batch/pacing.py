"""How many requests a batch keeps in flight: adapted to the engine, never above the cap (pure).

The engine's own waiting queue (from its metrics) is the signal where it has one: the goal is a
queue that never runs dry, so the engine never idles between two requests, yet not a long one
(a queued request only waits, and it is resent after a crash). A queue longer than
``queue_target`` (half the limit) shrinks the limit by a quarter; a shorter one grows it, by
doubling until the first shrink and by an eighth after. The run starts at the cap. Without a
queue gauge, latency decides: a request much slower than the fastest recent ones means the
engine is saturated (its queue is inside the latency).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field


@dataclass
class Pacer:
    """The concurrency limit of one batch run, between 1 and ``max_concurrency``.

    Args:
        max_concurrency: The cap (``--max-concurrency``).
        start: The first limit; None is the cap.
        queue_target: Waiting requests at the engine that count as enough; None: half the
            limit, at least 4.
        slow_factor: In latency mode, a mean latency this many times the best one shrinks the limit.
    """

    max_concurrency: int
    start: int | None = None
    queue_target: float | None = None
    slow_factor: float = 2.0
    limit: int = field(init=False)
    _slow_start: bool = field(default=True, init=False)
    _best: float = field(default=math.inf, init=False)
    _latencies: list[float] = field(default_factory=list, init=False)

    def __post_init__(self) -> None:
        first = self.start if self.start is not None else self.max_concurrency
        self.limit = self._bounded(first)

    def _bounded(self, value: float) -> int:
        return max(1, min(self.max_concurrency, int(value)))

    def _grow(self) -> None:
        self.limit = self._bounded(
            self.limit * 2 if self._slow_start else self.limit + max(1, self.limit // 8)
        )

    def _shrink(self) -> None:
        self._slow_start = False
        self.limit = self._bounded(math.ceil(self.limit * 0.75) if self.limit > 1 else 1)

    def latency(self, seconds: float) -> None:
        """Record one finished request's latency (used when the engine shows no queue).

        Args:
            seconds: The request's end-to-end time.
        """
        self._latencies.append(seconds)

    def tick(self, waiting: float | None, in_flight: int) -> int:
        """Adjust the limit once per interval and return it.

        Args:
            waiting: The engine's waiting-queue gauge now; None when it exposes none.
            in_flight: Requests this run has in flight now (the limit grows only when used).

        Returns:
            The new limit.
        """
        latencies, self._latencies = self._latencies, []
        busy = in_flight >= self.limit
        if waiting is not None:
            target = self.queue_target if self.queue_target is not None else max(4.0, self.limit / 2)
            if waiting > target:
                self._shrink()
            elif busy:
                self._grow()
            return self.limit
        if not latencies:
            if busy:
                self._grow()
            return self.limit
        mean = sum(latencies) / len(latencies)
        self._best = min(self._best * 1.05, min(latencies))  # forget a best that is long past
        if mean > self._best * self.slow_factor:
            self._shrink()
        elif busy:
            self._grow()
        return self.limit
