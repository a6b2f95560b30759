"""Run a planned batch against a client: adaptive concurrency, group-committed results, clean stops.

Each request holds its concurrency slot until its result line is fsynced (see
:mod:`unillm.batch.journal`), so a crash at any moment leaves at most ``max_concurrency``
requests to redo. Retries are the client's own: an ``LLM`` retries refused connections and
429/503 answers by its :class:`~unillm.RetryPolicy`, a ``Fleet`` fails over between replicas;
a request that still fails is written with its typed error. A stop (first Ctrl-C) sends
nothing more and lets the requests in flight finish and be written; an abandon (second
Ctrl-C) drops the ones in flight, unwritten. A write that has begun always ends whole.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import anyio
from anyio.abc import TaskGroup

from unillm.batch.journal import Journal, Resume
from unillm.batch.lines import BatchItem
from unillm.batch.pacing import Pacer
from unillm.batch.render import encode, failure_line, success_line
from unillm.client.protocol import Client
from unillm.errors import InvalidOptions, NotFound, UnillmError, UnsupportedFeature, clip_message
from unillm.results import Completion, Embeddings

if sys.version_info < (3, 11):
    from exceptiongroup import BaseExceptionGroup  # pragma: no cover


#: Longest message of an unforeseen error kept in its result line.
_MESSAGE = 1000


class UnexpectedError(UnillmError):
    """One request failed in a way unillm did not foresee (its message names the original
    error); the request's result line records it and the batch goes on."""


@dataclass
class Summary:
    """What a batch run did. ``requests_per_s`` and ``tokens_per_s`` count this run's requests only."""

    total: int  # requests in the input
    skipped: int = 0  # already in the output when the run started
    succeeded: int = 0
    failed: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    seconds: float = 0.0
    cpu_seconds: float = 0.0  # this process's CPU time (every thread) during the run: the client's cost
    torn_bytes: int = 0  # a torn last line cut off at the start (redone)
    redone_failed: int = 0  # failed results removed to rerun (retry_failed)
    failed_before: int = 0  # failed results kept from an earlier run (rerun with retry_failed)
    interrupted: bool = False
    concurrency: int = 0  # the limit at the end
    errors: dict[str, int] = field(default_factory=dict)  # failures by error type

    @property
    def done(self) -> int:
        """Requests written by this run."""
        return self.succeeded + self.failed

    @property
    def remaining(self) -> int:
        """Requests still without a result."""
        return self.total - self.skipped - self.done

    @property
    def requests_per_s(self) -> float:
        """Requests written per second of this run."""
        return self.done / self.seconds if self.seconds else 0.0

    @property
    def tokens_per_s(self) -> float:
        """Generated tokens per second of this run."""
        return self.completion_tokens / self.seconds if self.seconds else 0.0

    def as_dict(self) -> dict[str, Any]:
        """The summary as JSON-ready values (properties included)."""
        keys = ("done", "remaining", "requests_per_s", "tokens_per_s")
        return {**self.__dict__, **{k: getattr(self, k) for k in keys}}

    def line(self) -> str:
        """One human line: counts, tokens, time and throughput."""
        state = "interrupted" if self.interrupted else "done"
        left = f", {self.remaining} left (rerun to resume)" if self.remaining else ""
        if self.failed_before:
            left += f", {self.failed_before} failed before (--retry-failed reruns them)"
        return (
            f"unillm batch {state}: {self.succeeded} succeeded, {self.failed} failed, "
            f"{self.skipped} already done{left}; {self.prompt_tokens} prompt + "
            f"{self.completion_tokens} generated tokens in {self.seconds:.1f} s "
            f"({self.requests_per_s:.2f} req/s, {self.tokens_per_s:.1f} tok/s)"
        )


ProgressHook = Callable[[Summary], None]


@dataclass
class _Result:
    data: bytes
    ok: bool
    prompt_tokens: int = 0
    completion_tokens: int = 0
    error: str | None = None


async def execute(
    client: Client,
    items: list[BatchItem],
    journal: Journal,
    summary: Summary,
    *,
    max_concurrency: int = 64,
    progress: ProgressHook | None = None,
    handle_sigint: bool = False,
    metrics_interval: float = 1.0,
    pacer: Pacer | None = None,
) -> Summary:
    """Send ``items`` through ``client`` and append each result to ``journal``; fill ``summary``.

    Args:
        client: An LLM, a Fleet, or anything with their ``generate``/``embed``/``metrics``.
        items: The requests still to run (the plan's, ordered).
        journal: The output, open and scanned.
        summary: Counts so far (skipped, torn); this run's counts are added to it.
        max_concurrency: The most requests in flight (and awaiting their fsync).
        progress: Called with the summary after each group of results is durable.
        handle_sigint: Stop on the first SIGINT, abandon in-flight requests on the second
            (main thread only; the CLI sets it).
        metrics_interval: Seconds between looks at the engine's waiting queue.
        pacer: The concurrency controller; None: a :class:`Pacer` capped at ``max_concurrency``.

    Returns:
        ``summary``, filled in.
    """
    if isinstance(max_concurrency, bool) or not isinstance(max_concurrency, int) or max_concurrency < 1:
        raise InvalidOptions(f"max_concurrency must be a positive integer, got {max_concurrency!r}")
    run = _Run(client, journal, summary, pacer or Pacer(max_concurrency), progress)
    started, cpu = time.perf_counter(), time.process_time()
    try:
        async with first_error():
            await run.go(items, handle_sigint, metrics_interval)
    finally:
        summary.seconds = time.perf_counter() - started
        summary.cpu_seconds = time.process_time() - cpu
        summary.concurrency = run.pacer.limit
    return summary


class _Run:
    def __init__(
        self, client: Client, journal: Journal, summary: Summary, pacer: Pacer, progress: ProgressHook | None
    ) -> None:
        self.client, self.journal, self.summary, self.pacer = client, journal, summary, pacer
        self.progress = progress
        self.in_flight = 0
        self.changed = anyio.Condition()
        self.stopping = False
        self.send, self.receive = anyio.create_memory_object_stream[_Result](max_buffer_size=1 << 20)

    async def go(self, items: list[BatchItem], handle_sigint: bool, interval: float) -> None:
        async with anyio.create_task_group() as outer:
            outer.start_soon(self._writer)
            outer.start_soon(self._pace, interval)
            async with anyio.create_task_group() as requests:
                if handle_sigint:
                    outer.start_soon(self._signals, requests)
                await self._produce(items, requests)
            await self.send.aclose()  # the writer drains what is queued, then ends
            async with self.changed:
                while self.in_flight:
                    await self.changed.wait()
            outer.cancel_scope.cancel()

    async def _produce(self, items: list[BatchItem], requests: TaskGroup) -> None:
        for item in items:
            async with self.changed:
                while self.in_flight >= self.pacer.limit and not self.stopping:
                    await self.changed.wait()
                if self.stopping:
                    self.summary.interrupted = True
                    return
                self.in_flight += 1
            requests.start_soon(self._one, item)

    async def _one(self, item: BatchItem) -> None:
        try:
            result = await self._result(item)
        except BaseException:  # cancelled: the slot is free again, nothing is written
            await self._release(1)
            raise
        await self.send.send(result)

    async def _result(self, item: BatchItem) -> _Result:
        """The request's result line; any failure of this one request is its own failed line."""
        started = time.perf_counter()
        try:
            answer = await _send(self.client, item)
            usage = answer.usage
            result = _Result(
                encode(success_line(item, answer)), True, usage.prompt_tokens, usage.completion_tokens
            )
        except UnillmError as e:
            error = e
        except Exception as e:  # a poison request fails alone, typed; the batch goes on
            error = UnexpectedError(f"{type(e).__name__}: {clip_message(str(e), _MESSAGE)}")
        else:
            self.pacer.latency(time.perf_counter() - started)
            return result
        return _Result(encode(failure_line(item, error)), ok=False, error=type(error).__name__)

    async def _writer(self) -> None:
        async with self.receive:
            async for first in self.receive:
                group = [first]
                with contextlib.suppress(anyio.WouldBlock, anyio.EndOfStream):
                    while True:
                        group.append(self.receive.receive_nowait())
                with anyio.CancelScope(shield=True):  # a write that has begun ends whole
                    await anyio.to_thread.run_sync(self.journal.append, [r.data for r in group])
                for r in group:
                    self._count(r)
                if self.progress is not None:
                    self.progress(self.summary)
                await self._release(len(group))

    def _count(self, r: _Result) -> None:
        s = self.summary
        if r.ok:
            s.succeeded += 1
        else:
            s.failed += 1
            if r.error:
                s.errors[r.error] = s.errors.get(r.error, 0) + 1
        s.prompt_tokens += r.prompt_tokens
        s.completion_tokens += r.completion_tokens

    async def _release(self, n: int) -> None:
        with anyio.CancelScope(shield=True):
            async with self.changed:
                self.in_flight -= n
                self.changed.notify_all()

    async def _pace(self, interval: float) -> None:
        queue = True
        while True:
            await anyio.sleep(interval)
            waiting = await _waiting(self.client) if queue else None
            queue = waiting is not None
            before = self.pacer.limit
            if self.pacer.tick(waiting, self.in_flight) > before:
                async with self.changed:
                    self.changed.notify_all()

    async def _signals(self, requests: TaskGroup) -> None:
        with anyio.open_signal_receiver(signal.SIGINT) as received:
            async for _ in received:
                if not self.stopping:
                    print(
                        f"\nunillm batch: stopping; {self.in_flight} request(s) in flight finish and are "
                        "written (Ctrl-C again drops them)",
                        file=sys.stderr,
                    )
                    async with self.changed:
                        self.stopping = True
                        self.changed.notify_all()
                else:
                    print("\nunillm batch: dropping the requests in flight", file=sys.stderr)
                    self.summary.interrupted = True
                    requests.cancel_scope.cancel()
                    return


async def _send(client: Client, item: BatchItem) -> Completion[Any] | Embeddings:
    if item.endpoint == "embeddings":
        assert item.texts is not None
        return await client.embed(item.texts, dimensions=item.dimensions)
    return await client.generate(item.prompt, messages=item.messages, output=item.output, **item.options)


async def _waiting(client: Client) -> float | None:
    """The engine's waiting queue now; None when it exposes none (then latency paces the run)."""
    with anyio.move_on_after(2.0):
        try:
            return (await client.metrics()).normalized().waiting
        except (UnsupportedFeature, NotFound, ValueError):
            return None
        except UnillmError:
            return 0.0  # unreachable for a moment: keep the limit, look again next time
    return 0.0


@contextlib.asynccontextmanager
async def first_error() -> AsyncIterator[None]:
    """Re-raise one exception of a task-group error, the first typed one if any (the caller sees
    one typed error, not a side effect such as a stream closed under another task)."""
    try:
        yield
    except BaseExceptionGroup as group:
        errors = _leaves(group)
        raise next((e for e in errors if isinstance(e, UnillmError)), errors[0]) from None


def _leaves(group: BaseExceptionGroup[BaseException]) -> list[BaseException]:
    out: list[BaseException] = []
    for e in group.exceptions:
        out.extend(_leaves(e) if isinstance(e, BaseExceptionGroup) else [e])
    return out


def resumed(total: int, resume: Resume, retry_failed: bool) -> Summary:
    """The summary a run starts from: what the output already held."""
    skipped = len(resume.succeeded) + (0 if retry_failed else len(resume.failed))
    return Summary(
        total=total,
        skipped=skipped,
        torn_bytes=resume.torn_bytes,
        redone_failed=len(resume.failed) if retry_failed else 0,
        failed_before=0 if retry_failed else len(resume.failed),
    )
