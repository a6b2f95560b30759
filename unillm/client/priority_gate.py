"""A client-side reserve of engine slots for urgent requests: ``reserve=unillm.Reserve(slots=2)``.

vLLM's priority scheduler (``scheduling="priority"``) puts an urgent request first in its queue,
but preempts a running one only when the KV cache is full, not when every one of its
``max_num_seqs`` slots is taken: under a flood of batch requests an urgent one waits for a batch
request to finish decoding. A :class:`Reserve` keeps ``slots`` of them free by holding
less-urgent requests in the client:

* a request whose ``priority`` is greater than ``above`` (lower is more urgent; no ``priority=``
  counts as 0, vLLM's default) may have at most ``capacity - slots`` of its kind in flight; the
  rest wait in the client, the most urgent first and, at equal priority, in arrival order;
* a request at or below ``above`` never waits (nor counts);
* a stream holds its slot until it closes (finished, failed, cancelled or left early); a waiter
  cancelled (its deadline, a task group) leaves the queue and takes no slot with it.

:class:`SlotQueue` is the bookkeeping (no awaiting, no I/O); :class:`PriorityGate` awaits it.
The gate counts one client's requests: a clone, or another process, has its own.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace

import anyio

from unillm.errors import InvalidOptions

_EXAMPLE = "e.g. unillm.Reserve(slots=2, above=0, capacity=8)"


@dataclass(frozen=True, slots=True)
class Reserve:
    """Engine slots kept free for urgent requests by holding less-urgent ones in the client:
    ``unillm.connect(..., reserve=unillm.Reserve(slots=2, capacity=64))``.

    Requests with ``priority`` greater than ``above`` may have at most ``capacity - slots`` in
    flight; more wait in the client (most urgent first, then in arrival order) for one to end.
    Those at or below ``above`` are sent at once. ``capacity`` is the engine's ``max_num_seqs``:
    :func:`unillm.launch` fills it from the launch's ``max_num_seqs`` when it is None.

    Args:
        slots: How many of the engine's running slots to keep for urgent requests (>= 1).
        above: Requests with a ``priority`` greater than this are held back (vLLM: lower is more
            urgent; a request without ``priority=`` counts as 0).
        capacity: The engine's running slots (its ``max_num_seqs``); None: taken from the launch.

    Raises:
        InvalidOptions: ``slots`` or ``capacity`` not a positive integer, ``above`` not an
            integer, or ``slots`` not below ``capacity``.
    """

    slots: int = 1
    above: int = 0
    capacity: int | None = None

    def __post_init__(self) -> None:
        for name in ("slots", "above", "capacity"):
            value = getattr(self, name)
            if value is None and name == "capacity":
                continue
            if not isinstance(value, int) or isinstance(value, bool):
                raise InvalidOptions(f"Reserve.{name} must be an integer, got {value!r} ({_EXAMPLE})")
            if name != "above" and value < 1:
                raise InvalidOptions(f"Reserve.{name} must be at least 1, got {value!r} ({_EXAMPLE})")
        if self.capacity is not None and self.slots >= self.capacity:
            raise InvalidOptions(
                f"Reserve(slots={self.slots}) keeps every one of the engine's {self.capacity} slots: "
                f"less-urgent requests could never run; keep fewer slots than capacity ({_EXAMPLE})"
            )

    def for_engine(self, max_num_seqs: int | None) -> Reserve:
        """This reserve with ``capacity`` taken from a launch's ``max_num_seqs`` when unset.

        Args:
            max_num_seqs: The launched engine's ``max_num_seqs`` (None: not set by the launch).

        Returns:
            A reserve with the same settings and a capacity (when either one is known).

        Raises:
            InvalidOptions: ``slots`` is not below the engine's ``max_num_seqs``.
        """
        if self.capacity is not None or max_num_seqs is None:
            return self
        return replace(self, capacity=max_num_seqs)


def reserve_gate(reserve: Reserve | None, engine: str) -> PriorityGate | None:
    """The gate a client with ``reserve`` sends through (None: no reserve).

    Args:
        reserve: The client's reserve, or None.
        engine: The engine's name, for the message.

    Returns:
        A new gate, or None without a reserve.

    Raises:
        InvalidOptions: ``reserve`` is not a Reserve, or its capacity is unknown.
    """
    if reserve is None:
        return None
    if not isinstance(reserve, Reserve):
        raise InvalidOptions(f"reserve must be a unillm.Reserve(...), got {reserve!r} ({_EXAMPLE})")
    if reserve.capacity is None:
        raise InvalidOptions(
            f"Reserve(slots={reserve.slots}) needs the {engine} engine's capacity, its running slots: "
            f"pass unillm.Reserve(slots={reserve.slots}, capacity=N) with N its max_num_seqs "
            f"(vLLM: --max-num-seqs), or launch it with unillm.launch(..., max_num_seqs=N)"
        )
    return PriorityGate(reserve)


@dataclass(eq=False)
class Ticket:
    """One held-back request in a :class:`SlotQueue`: its priority, arrival and whether it got a
    slot."""

    priority: int
    order: int
    granted: bool = False
    event: anyio.Event | None = field(default=None, repr=False)


class SlotQueue:
    """The reserve's bookkeeping, without any awaiting: slots taken by less-urgent requests and
    the queue of those waiting (the most urgent first, then by arrival).

    Args:
        limit: How many less-urgent requests may be in flight (``capacity - slots``).
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.in_flight = 0
        self._queue: list[tuple[int, int, Ticket]] = []
        self._orders = itertools.count()

    @property
    def waiting(self) -> int:
        """How many requests wait for a slot."""
        return len(self._queue)

    def arrive(self, priority: int) -> Ticket:
        """A request arrives: it takes a free slot (``granted``) unless the slots are full or
        others wait, else it joins the queue.

        Args:
            priority: The request's priority (lower first).

        Returns:
            Its ticket; ``granted`` says whether it holds a slot already.
        """
        ticket = Ticket(priority, next(self._orders))
        if self.in_flight < self.limit and not self._queue:
            self.in_flight += 1
            ticket.granted = True
        else:
            heapq.heappush(self._queue, (priority, ticket.order, ticket))
        return ticket

    def release(self) -> list[Ticket]:
        """A request holding a slot ended: its slot goes to the next waiters.

        Returns:
            The tickets granted a slot now (to wake).
        """
        assert self.in_flight > 0, "a slot released that was never taken"
        self.in_flight -= 1
        return self._grant()

    def leave(self, ticket: Ticket) -> list[Ticket]:
        """A waiting request gave up (cancelled): it leaves the queue, or, when a slot reached it
        meanwhile, hands that slot on.

        Args:
            ticket: The request's ticket.

        Returns:
            The tickets granted a slot now (to wake).
        """
        if ticket.granted:
            return self.release()
        self._queue = [entry for entry in self._queue if entry[2] is not ticket]
        heapq.heapify(self._queue)
        return []

    def _grant(self) -> list[Ticket]:
        granted = []
        while self._queue and self.in_flight < self.limit:
            ticket = heapq.heappop(self._queue)[2]
            ticket.granted = True
            self.in_flight += 1
            granted.append(ticket)
        return granted


class PriorityGate:
    """Awaits a :class:`SlotQueue` for one client: ``async with gate.slot(priority): send``.

    Args:
        reserve: The reserve, with its capacity known.
    """

    def __init__(self, reserve: Reserve) -> None:
        assert reserve.capacity is not None
        self.reserve = reserve
        self.queue = SlotQueue(reserve.capacity - reserve.slots)

    def urgent(self, priority: int | None) -> bool:
        """Whether a request of ``priority`` skips the gate (None counts as 0, vLLM's default).

        Args:
            priority: The request's ``priority=`` (None: not given).

        Returns:
            True when it is at or below the reserve's ``above``.
        """
        return (priority or 0) <= self.reserve.above

    @asynccontextmanager
    async def slot(self, priority: int | None) -> AsyncIterator[None]:
        """Hold a slot for one request while the block runs (an urgent request holds none).

        Args:
            priority: The request's ``priority=`` (None: not given).

        Yields:
            Once the request may be sent.
        """
        if self.urgent(priority):
            yield
            return
        ticket = self.queue.arrive(priority or 0)
        if not ticket.granted:
            ticket.event = anyio.Event()
            try:
                await ticket.event.wait()
            except BaseException:  # cancelled while waiting: leave, passing on a slot granted meanwhile
                _wake(self.queue.leave(ticket))
                raise
        try:
            yield
        finally:
            _wake(self.queue.release())


def _wake(tickets: list[Ticket]) -> None:
    for ticket in tickets:
        assert ticket.event is not None
        ticket.event.set()


__all__ = ["PriorityGate", "Reserve", "SlotQueue", "Ticket", "reserve_gate"]
