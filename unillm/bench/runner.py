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

import math
import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
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
    from unillm.bench.result import RunResult, TargetInfo

    if not requests:
        raise InvalidOptions("the workload has no requests; give num_prompts >= 1 or a non-empty dataset")
    if not 0 <= cancel_rate <= 1:
        raise InvalidOptions(f"cancel_rate is a share of the requests, 0 to 1; got {cancel_rate}")
    info = target or TargetInfo(
        label=getattr(client, "engine", "target"), engine=getattr(client, "engine", "?")
    )
    sources = dict(metric_sources) if metric_sources is not None else {info.label: client}
    base: Options = dict(options or {})  # type: ignore[assignment]
    label = f"{info.label} | {load.label()}"
    if warmup:
        if progress:
            progress(Progress(label, warmup, 0, 0, 0.0, 0, phase="warm-up"))
        warm = [_unscheduled(requests[i % len(requests)]) for i in range(warmup)]
        await _run_all(client, warm, Load(max_concurrency=load.max_concurrency), base, 0, None, None)
    before = await snapshot(sources)
    sent_before = replica_requests() if replica_requests else {}
    samples: list[Snapshot] = []
    started = time.perf_counter()
    records, dead = await _run_all(
        client,
        requests,
        load,
        base,
        seed,
        alive,
        _Reporter(label, request_count(requests), started, progress),
        sources,
        samples,
        sample_every_s,
        cancel_rate,
    )
    duration = time.perf_counter() - started
    after = await snapshot(sources) if dead is None else {}
    summary = summarize(records, duration, percentiles=percentiles, slo=slo)
    if replica_requests is not None:
        sent = replica_requests()
        summary.replica_counts = {k: v - sent_before.get(k, 0) for k, v in sent.items()}
    return RunResult.from_records(
        records,
        summary,
        target=info,
        load=load,
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
    client: Client,
    requests: Sequence[Item],
    load: Load,
    options: Options,
    seed: int,
    alive: Alive | None,
    reporter: _Reporter | None,
    sources: Mapping[str, Client] | None = None,
    samples: list[Snapshot] | None = None,
    sample_every_s: float | None = None,
    cancel_rate: float = 0.0,
) -> tuple[list[RequestRecord], str | None]:
    """Every request's record (in workload order) and the reason the target died, if it did."""
    scheduled = [getattr(r, "at", None) for r in requests]
    if all(at is not None for at in scheduled):
        times = [float(at) for at in scheduled if at is not None]  # a trace: its own schedule
    else:
        times = send_times(load, len(requests), seed=seed)
    limit = anyio.Semaphore(load.max_concurrency) if load.max_concurrency else None
    records: list[list[RequestRecord] | None] = [None] * len(requests)
    dead: str | None = None
    t0 = time.perf_counter()

    def cancel_at(i: int, turn: int, max_tokens: int) -> int | None:
        if cancel_rate <= 0:
            return None
        rng = random.Random(f"cancel:{seed}:{i}:{turn}")
        point = rng.randint(1, max(1, max_tokens - 1))
        return point if rng.random() < cancel_rate else None

    async def run_item(i: int) -> list[RequestRecord]:
        item = requests[i]
        if isinstance(item, Session):
            return await run_session(client, item, options, t0, lambda t, n: cancel_at(i, t, n), reporter)
        record = await measure(client, item, options, t0, cancel_after=cancel_at(i, 0, item.max_tokens))
        if reporter is not None:
            reporter.record(record)
        return [record]

    async def one(i: int) -> None:
        if limit is None:
            records[i] = await run_item(i)
        else:
            async with limit:
                records[i] = await run_item(i)

    async def dispatch(tg: anyio.abc.TaskGroup) -> None:
        for i, at in enumerate(times):
            delay = t0 + at - time.perf_counter()
            if delay > 0:
                await anyio.sleep(delay)
            tg.start_soon(one, i)

    async def watch(scope: anyio.CancelScope) -> None:
        nonlocal dead
        while alive is not None:
            reason = alive()
            if reason is not None:
                dead = reason
                scope.cancel()
                return
            await anyio.sleep(0.25)

    async def sample() -> None:
        while sources and samples is not None and sample_every_s:
            await anyio.sleep(sample_every_s)
            samples.append(await snapshot(sources))

    async with anyio.create_task_group() as outer:
        if alive is not None:
            outer.start_soon(watch, outer.cancel_scope)
        if sources and samples is not None and sample_every_s:
            outer.start_soon(sample)
        async with anyio.create_task_group() as tg:
            await dispatch(tg)
        outer.cancel_scope.cancel()
    now = time.perf_counter() - t0
    out: list[RequestRecord] = []
    for item, done in zip(requests, records, strict=True):
        if done is not None:
            out += done
            continue
        reason = f"not completed: {dead or 'cancelled'}"
        out += [RequestRecord(start=now, success=False, error=reason)] * request_count([item])
    return out, dead


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
    sent = time.perf_counter()
    first: float | None = None
    last = sent
    gaps: list[float] = []
    chunks = 0
    usage = timings = replica = None
    texts: list[str] = []
    thoughts: list[str] = []
    try:
        async with client.stream(request.prompt, messages=request.messages, **kwargs) as stream:
            async for delta in stream:
                if delta.reasoning:
                    thoughts.append(delta.reasoning)
                if delta.text:
                    texts.append(delta.text)
                    chunks += 1
                    now = time.perf_counter()
                    if first is None:
                        first = now - sent
                    else:
                        gaps.append(now - last)
                    last = now
                    if cancel_after is not None and chunks >= cancel_after:
                        break  # closing the stream drops the connection: the engine aborts
                if delta.usage is not None or delta.timings is not None:
                    usage = delta.usage or usage
                    timings = delta.timings or timings
                    replica = getattr(delta, "replica", None) or replica  # fleets name the replica
    except UnillmError as e:
        record.success = False
        record.error = f"{type(e).__name__}: {e}"
        return record
    record.text, record.reasoning = "".join(texts), "".join(thoughts)
    if cancel_after is not None and chunks >= cancel_after:
        record.success, record.cancelled_after = False, chunks
        record.ttft, record.itl, record.output_tokens = first, gaps, chunks
        record.error = f"cancelled by the benchmark after {chunks} chunks"
        return record
    stream_gaps = getattr(timings, "itl_s", None)  # the stream's own chunk clock, when it has one
    if stream_gaps is not None and len(stream_gaps) == len(gaps) and timings is not None:
        first, gaps = getattr(timings, "ttft_s", None) or first, list(stream_gaps)
    if chunks == 0 or first is None:
        record.success = False
        record.error = "the stream ended without any text (no time to first token)"
        return record
    record.ttft, record.itl = first, gaps
    record.latency = first + math.fsum(gaps)
    record.replica = replica
    if usage is not None and usage.completion_tokens:
        record.output_tokens = usage.completion_tokens
    else:
        record.output_tokens = chunks  # engines without usage in streams: one token per chunk
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
