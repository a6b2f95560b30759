"""Send a workload to a running target under a load and measure every request from its stream.

    async with unillm.connect("vllm", url) as llm:
        result = await run_load(llm, Synthetic(num_prompts=50).requests(), Load(max_concurrency=4))

Each request is streamed; its timings are taken at the client, chunk by chunk, with the
definitions of ``vllm bench serve`` (see :mod:`unillm.bench.stats`). The engine's metrics are
snapshotted before and after (and sampled during the run for peaks). If the target dies
(``alive()`` returns a reason), the requests still pending fail with that reason and the run
ends; the result carries the reason in ``error``.

Workloads are lists of items: a :class:`BenchRequest` is one request; a multi-turn
:class:`~unillm.bench.sessions.Session` is a conversation whose turns go one after the other,
each with the real answers so far in its history (the load then schedules session starts and
``max_concurrency`` bounds the sessions in flight). Requests with ``at`` set (traces) keep their
own schedule. ``cancel_rate`` cancels that share of the requests on purpose, each after a
seeded random number of streamed chunks (the same requests and points on every target).
"""

from __future__ import annotations

import functools
import math
import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import anyio

from unillm.bench.arrivals import Load, send_times
from unillm.bench.engine_stats import EngineStats, Snapshot, snapshot
from unillm.bench.sessions import Session
from unillm.bench.stats import DEFAULT_PERCENTILES, RequestRecord, Slo, summarize
from unillm.bench.workload import BenchRequest
from unillm.errors import InvalidOptions, UnillmError

if TYPE_CHECKING:
    from unillm.bench.result import RunResult, TargetInfo
    from unillm.client.protocol import Client
    from unillm.options import Options
    from unillm.results import Delta, Timings, Usage


@dataclass(frozen=True)
class Progress:
    """A progress report during a run (for live displays)."""

    label: str
    total: int
    done: int
    failed: int
    elapsed_s: float
    output_tokens: int
    phase: str = "running"


ProgressHook = Callable[[Progress], None]
Alive = Callable[[], "str | None"]
Item = BenchRequest | Session


def request_count(items: Sequence[Item]) -> int:
    """How many requests the items send (a session sends one per turn)."""
    return sum(len(i.turns) if isinstance(i, Session) else 1 for i in items)


async def run_load(
    client: Client,
    requests: Sequence[Item],
    load: Load,
    *,
    options: Options | None = None,
    warmup: int = 0,
    slo: Slo | None = None,
    percentiles: Sequence[float] = DEFAULT_PERCENTILES,
    seed: int = 0,
    target: TargetInfo | None = None,
    workload: Mapping[str, Any] | None = None,
    metric_sources: Mapping[str, Client] | None = None,
    sample_every_s: float | None = 1.0,
    alive: Alive | None = None,
    progress: ProgressHook | None = None,
    replica_requests: Callable[[], dict[str, int]] | None = None,
    cancel_rate: float = 0.0,
) -> RunResult:
    """Run ``requests`` against ``client`` under ``load`` and return the measured result.

    ``options`` are sampling options for every request (e.g. ``temperature=0``); ``warmup``
    requests go first and are not measured. ``metric_sources`` are the engines whose metrics
    are compared before and after (default: ``client`` itself); ``replica_requests()``
    (fleets) counts the requests each replica received, diffed over the run.

    Args:
        client: The connected LLM or Fleet to measure.
        requests: The workload's requests (or multi-turn sessions), sent in order.
        load: When requests are sent (rate, burstiness, max concurrency).
        options: Sampling options for every request (e.g. ``{"temperature": 0}``).
        warmup: Requests sent first and not measured.
        slo: Objectives a request must meet to count towards goodput; None: no goodput.
        percentiles: Which percentiles of each latency to report.
        seed: Seeds the arrival times, so runs are repeatable.
        target: What the result says was measured; None: the client's engine.
        workload: How the workload was made, recorded in the result.
        metric_sources: The engines whose metrics are compared, by label; None: ``client``.
        sample_every_s: Seconds between metric samples during the run (for peaks); None: none.
        alive: Returns why the target died (None while it lives); pending requests then fail.
        progress: Called with each request's progress; None is silent.
        replica_requests: Counts the requests each replica received (fleets); None: not counted.
        cancel_rate: The share of requests (0-1) cancelled on purpose at a seeded random point.

    Returns:
        Every request's record, the summary and the engines' metric deltas.

    Raises:
        InvalidOptions: An empty workload or a malformed setting.
    """
    _check_run(requests, cancel_rate)
    info = target or _client_info(client)
    sources = dict(metric_sources) if metric_sources is not None else {info.label: client}
    base: Options = dict(options or {})  # type: ignore[assignment]
    run = _Run(client, requests, load, base, info, sources, seed, alive, sample_every_s, cancel_rate)
    await _warm_up(run, warmup, progress)
    return await _measured_run(run, progress, replica_requests, percentiles, slo, workload)


def _check_run(requests: Sequence[Item], cancel_rate: float) -> None:
    """Refuse an empty workload or a cancel rate that is not a share."""
    if not requests:
        raise InvalidOptions("the workload has no requests; give num_prompts >= 1 or a non-empty dataset")
    if not 0 <= cancel_rate <= 1:
        raise InvalidOptions(f"cancel_rate is a share of the requests, 0 to 1; got {cancel_rate}")


def _client_info(client: Client) -> TargetInfo:
    """What a run against a bare client says was measured: the client's engine."""
    from unillm.bench.result import TargetInfo

    return TargetInfo(label=getattr(client, "engine", "target"), engine=getattr(client, "engine", "?"))


@dataclass(frozen=True)
class _Run:
    """One run's fixed settings: the client and items, how they are sent, what is watched."""

    client: Client
    requests: Sequence[Item]
    load: Load
    options: Options
    info: TargetInfo
    sources: Mapping[str, Client]
    seed: int = 0
    alive: Alive | None = None
    sample_every_s: float | None = None
    cancel_rate: float = 0.0

    @property
    def label(self) -> str:
        """The run's name in progress reports: target, then load."""
        return f"{self.info.label} | {self.load.label()}"

    def cancel_at(self, i: int, turn: int, max_tokens: int) -> int | None:
        """The chunk after which item ``i``'s ``turn`` is cancelled (seeded), or None."""
        if self.cancel_rate <= 0:
            return None
        rng = random.Random(f"cancel:{self.seed}:{i}:{turn}")
        point = rng.randint(1, max(1, max_tokens - 1))
        return point if rng.random() < self.cancel_rate else None


async def _warm_up(run: _Run, warmup: int, progress: ProgressHook | None) -> None:
    """Send ``warmup`` unmeasured requests first, at the run's concurrency, unscheduled, unwatched."""
    if not warmup:
        return
    if progress:
        progress(Progress(run.label, warmup, 0, 0, 0.0, 0, phase="warm-up"))
    warm = [_unscheduled(run.requests[i % len(run.requests)]) for i in range(warmup)]
    load = Load(max_concurrency=run.load.max_concurrency)
    await _run_all(replace(run, requests=warm, load=load, seed=0, alive=None, sources={}, cancel_rate=0.0))


async def _measured_run(
    run: _Run,
    progress: ProgressHook | None,
    replica_requests: Callable[[], dict[str, int]] | None,
    percentiles: Sequence[float],
    slo: Slo | None,
    workload: Mapping[str, Any] | None,
) -> RunResult:
    """The measured part: the engines' metrics before and after, every request, the summary."""
    from unillm.bench.result import RunResult

    before = await snapshot(run.sources)
    sent_before = replica_requests() if replica_requests else {}
    samples: list[Snapshot] = []
    started = time.perf_counter()
    reporter = _Reporter(run.label, request_count(run.requests), started, progress)
    records, dead = await _run_all(run, reporter, samples)
    duration = time.perf_counter() - started
    after = await snapshot(run.sources) if dead is None else {}
    summary = summarize(records, duration, percentiles=percentiles, slo=slo)
    if replica_requests is not None:
        sent = replica_requests()
        summary.replica_counts = {k: v - sent_before.get(k, 0) for k, v in sent.items()}
    return RunResult.from_records(
        records,
        summary,
        target=run.info,
        load=run.load,
        workload=dict(workload or {}),
        slo=slo,
        num_prompts=len(records),
        engine=EngineStats.between(before, after, samples),
        error=dead,
    )


class _Reporter:
    def __init__(self, label: str, total: int, started: float, hook: ProgressHook | None) -> None:
        self.label, self.total, self.started, self.hook = label, total, started, hook
        self.done = self.failed = self.tokens = 0

    def record(self, r: RequestRecord) -> None:
        self.done += 1
        self.failed += not r.success
        self.tokens += r.output_tokens
        self.report()

    def report(self) -> None:
        if self.hook is not None:
            self.hook(
                Progress(
                    self.label,
                    self.total,
                    self.done,
                    self.failed,
                    time.perf_counter() - self.started,
                    self.tokens,
                )
            )


async def _run_all(
    run: _Run, reporter: _Reporter | None = None, samples: list[Snapshot] | None = None
) -> tuple[list[RequestRecord], str | None]:
    """Every request's record (in workload order) and the reason the target died, if it did."""
    times = _schedule(run.requests, run.load, run.seed)
    limit = anyio.Semaphore(run.load.max_concurrency) if run.load.max_concurrency else None
    records: list[list[RequestRecord] | None] = [None] * len(run.requests)
    dead: str | None = None
    t0 = time.perf_counter()

    async def one(i: int) -> None:
        if limit is None:
            records[i] = await _run_item(run, i, t0, reporter)
        else:
            async with limit:
                records[i] = await _run_item(run, i, t0, reporter)

    async def dispatch(tg: anyio.abc.TaskGroup) -> None:
        for i, at in enumerate(times):
            delay = t0 + at - time.perf_counter()
            if delay > 0:
                await anyio.sleep(delay)
            tg.start_soon(one, i)

    async def watch(alive: Alive, scope: anyio.CancelScope) -> None:
        nonlocal dead
        while True:
            reason = alive()
            if reason is not None:
                dead = reason
                scope.cancel()
                return
            await anyio.sleep(0.25)

    async with anyio.create_task_group() as outer:
        if run.alive is not None:
            outer.start_soon(watch, run.alive, outer.cancel_scope)
        if run.sources and samples is not None and run.sample_every_s:
            outer.start_soon(_sample, run.sources, samples, run.sample_every_s)
        async with anyio.create_task_group() as tg:
            await dispatch(tg)
        outer.cancel_scope.cancel()
    return _with_unfinished(run.requests, records, dead, time.perf_counter() - t0), dead


def _schedule(requests: Sequence[Item], load: Load, seed: int) -> list[float]:
    """When each item is sent (seconds from the start): a trace's own times, else the load's."""
    scheduled = [getattr(r, "at", None) for r in requests]
    if all(at is not None for at in scheduled):
        return [float(at) for at in scheduled if at is not None]
    return send_times(load, len(requests), seed=seed)


async def _run_item(run: _Run, i: int, t0: float, reporter: _Reporter | None) -> list[RequestRecord]:
    """Send item ``i`` of the run (one request, or a session's turns) and return its records."""
    item = run.requests[i]
    if isinstance(item, Session):
        cancel_at = functools.partial(run.cancel_at, i)
        return await run_session(run.client, item, run.options, t0, cancel_at, reporter)
    record = await measure(
        run.client, item, run.options, t0, cancel_after=run.cancel_at(i, 0, item.max_tokens)
    )
    if reporter is not None:
        reporter.record(record)
    return [record]


async def _sample(sources: Mapping[str, Client], samples: list[Snapshot], every_s: float) -> None:
    """Append a snapshot of the engines' metrics to ``samples`` every ``every_s`` s, until cancelled."""
    while True:
        await anyio.sleep(every_s)
        samples.append(await snapshot(sources))


def _with_unfinished(
    requests: Sequence[Item], records: Sequence[list[RequestRecord] | None], dead: str | None, now: float
) -> list[RequestRecord]:
    """Every record in workload order, a failed one for each request that never finished."""
    out: list[RequestRecord] = []
    for item, done in zip(requests, records, strict=True):
        if done is not None:
            out += done
            continue
        reason = f"not completed: {dead or 'cancelled'}"
        out += [RequestRecord(start=now, success=False, error=reason)] * request_count([item])
    return out


async def run_session(
    client: Client,
    session: Session,
    options: Options,
    t0: float,
    cancel_at: Callable[[int, int], int | None] = lambda turn, max_tokens: None,
    reporter: _Reporter | None = None,
) -> list[RequestRecord]:
    """Replay one multi-turn session: each turn after the previous answer, with the real history.

    A failed turn ends the session (its later turns are recorded as failed, not sent); a
    cancelled turn's partial answer stays in the history, as when a user interrupts.

    Args:
        client: The connected LLM or Fleet.
        session: The session's turns, system prompt and reasoning policy.
        options: Sampling options for every turn.
        t0: The benchmark's start (``time.perf_counter()``).
        cancel_at: ``(turn, max_tokens)`` -> the chunk after which to cancel that turn, or None.
        reporter: Progress, per finished turn.

    Returns:
        One record per turn, in turn order.
    """
    history: list[Mapping[str, str]] = []
    if session.system is not None:
        history.append({"role": "system", "content": session.system})
    extra: Options = {**options, "session": session.id} if session.session_key else options
    out: list[RequestRecord] = []
    for t, turn in enumerate(session.turns):
        if out and not (out[-1].success or out[-1].cancelled):
            error = f"not sent: turn {t - 1} of session {session.id} failed"
            record = RequestRecord(start=time.perf_counter() - t0, success=False, error=error)
        else:
            if t and turn.think_s:
                await anyio.sleep(turn.think_s)
            history.append({"role": "user", "content": turn.user})
            request = BenchRequest(max_tokens=turn.max_tokens, messages=tuple(history))
            record = await measure(client, request, extra, t0, cancel_after=cancel_at(t, turn.max_tokens))
            history.append(session.history_message(record.text, record.reasoning))
        record.session, record.turn = session.id, t
        out.append(record)
        if reporter is not None:
            reporter.record(record)
    return out


def _unscheduled(item: Item) -> Item:
    if isinstance(item, BenchRequest) and item.at is not None:
        return BenchRequest(item.max_tokens, item.prompt, item.messages, item.input_len)
    return item


async def measure(
    client: Client,
    request: BenchRequest,
    options: Options,
    t0: float,
    *,
    cancel_after: int | None = None,
) -> RequestRecord:
    """Stream one request and time it chunk by chunk (vLLM's TTFT, ITL and latency).

    Each text delta is timed here; the stream's own chunk clock (``Timings.ttft_s``/``itl_s`` on
    its final delta, taken as each chunk is decoded) replaces it when it saw the same chunks.
    Latency ends at the last content chunk, as in vLLM: ``ttft + sum(itl)``. With
    ``cancel_after``, the stream is closed after that many text chunks (the connection is
    dropped, which is how engines learn of a cancellation) and the record is marked cancelled.
    The answer's text and reasoning are kept on the record (multi-turn histories need them).
    """
    kwargs: dict[str, Any] = {**options, "max_tokens": request.max_tokens}
    record = RequestRecord(start=time.perf_counter() - t0, input_tokens=request.input_len or 0)
    seen = _Chunks(sent=time.perf_counter())
    try:
        async with client.stream(request.prompt, messages=request.messages, **kwargs) as stream:
            async for delta in stream:
                seen.add(delta)
                if cancel_after is not None and seen.count >= cancel_after:
                    break  # closing the stream drops the connection: the engine aborts
    except UnillmError as e:
        record.success = False
        record.error = f"{type(e).__name__}: {e}"
        return record
    record.text, record.reasoning = "".join(seen.texts), "".join(seen.thoughts)
    if cancel_after is not None and seen.count >= cancel_after:
        record.success, record.cancelled_after = False, seen.count
        record.ttft, record.itl, record.output_tokens = seen.first, seen.gaps, seen.count
        record.error = f"cancelled by the benchmark after {seen.count} chunks"
        return record
    return _completed(record, seen)


@dataclass
class _Chunks:
    """What a stream gave as it came: its text and reasoning, content chunk times, final usage."""

    sent: float
    first: float | None = None
    last: float = 0.0
    gaps: list[float] = field(default_factory=list)
    count: int = 0
    texts: list[str] = field(default_factory=list)
    thoughts: list[str] = field(default_factory=list)
    usage: Usage | None = None
    timings: Timings | None = None
    replica: Any = None

    def __post_init__(self) -> None:
        """The clock starts when the request is sent."""
        self.last = self.sent

    def add(self, delta: Delta) -> None:
        """Take one delta: time its text chunk, keep its pieces, usage, timings and replica."""
        if delta.reasoning:
            self.thoughts.append(delta.reasoning)
        if delta.text:
            self.texts.append(delta.text)
            self.count += 1
            now = time.perf_counter()
            if self.first is None:
                self.first = now - self.sent
            else:
                self.gaps.append(now - self.last)
            self.last = now
        if delta.usage is not None or delta.timings is not None:
            self.usage = delta.usage or self.usage
            self.timings = delta.timings or self.timings
            self.replica = getattr(delta, "replica", None) or self.replica  # fleets name the replica


def _completed(record: RequestRecord, seen: _Chunks) -> RequestRecord:
    """Fill a finished stream's record: timings (the stream's own clock when it has one), tokens."""
    first, gaps = seen.first, seen.gaps
    stream_gaps = getattr(seen.timings, "itl_s", None)  # the stream's own chunk clock, when it has one
    if stream_gaps is not None and len(stream_gaps) == len(gaps) and seen.timings is not None:
        first, gaps = getattr(seen.timings, "ttft_s", None) or first, list(stream_gaps)
    if seen.count == 0 or first is None:
        record.success = False
        record.error = "the stream ended without any text (no time to first token)"
        return record
    record.ttft, record.itl = first, gaps
    record.latency = first + math.fsum(gaps)
    record.replica = seen.replica
    usage = seen.usage
    if usage is not None and usage.completion_tokens:
        record.output_tokens = usage.completion_tokens
    else:
        record.output_tokens = seen.count  # engines without usage in streams: one token per chunk
    if usage is not None and usage.prompt_tokens:
        record.input_tokens = usage.prompt_tokens
    return record


def as_load_list(
    rates: Sequence[float] | None, concurrencies: Sequence[int] | None, **common: Any
) -> list[Load]:
    """A sweep: one Load per rate, or per concurrency, or their product when both vary."""
    rate_values = list(rates or [math.inf])
    conc_values: list[int | None] = list(concurrencies) if concurrencies else [None]
    return [Load(rate=r, max_concurrency=c, **common) for c in conc_values for r in rate_values]
