"""Run a whole benchmark: every target x every load, one after the other, robust to failures.

    report = await run_suite([Url("vllm", url)], Synthetic(num_prompts=100),
                             [Load(max_concurrency=c) for c in (1, 4, 8)])

Every target is checked first (bad input raises before anything starts). Then each target is
opened (connected or launched), measured under each load, and closed. A target that fails to
start, or dies mid-run, is recorded in the results with its error, and the suite goes on.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from unillm.bench.arrivals import Load
from unillm.bench.result import RunResult, TargetInfo
from unillm.bench.runner import Item, ProgressHook, request_count, run_load
from unillm.bench.sessions import MultiTurn
from unillm.bench.stats import DEFAULT_PERCENTILES, Slo
from unillm.bench.targets import Target
from unillm.bench.trace import MooncakeTrace
from unillm.bench.workload import JsonlPrompts, Synthetic
from unillm.errors import InvalidOptions, UnillmError

if TYPE_CHECKING:
    from unillm.options import Options


AnyWorkload = Synthetic | JsonlPrompts | MultiTurn | MooncakeTrace


class BenchReport(BaseModel):
    """All runs of a benchmark, in the order they ran (``repeat`` numbers a point's repeats)."""

    runs: list[RunResult]


async def run_suite(
    targets: Sequence[Target],
    workload: AnyWorkload,
    loads: Sequence[Load],
    *,
    options: Options | None = None,
    warmup: int = 0,
    slo: Slo | None = None,
    percentiles: Sequence[float] = DEFAULT_PERCENTILES,
    seed: int = 0,
    sample_every_s: float | None = 1.0,
    progress: ProgressHook | None = None,
    on_result: Any = None,
    runs: int = 1,
    cancel_rate: float = 0.0,
) -> BenchReport:
    """Measure every target under every load; see the module docstring.

    ``on_result(result)`` is called after each run (e.g. to save partial results).

    Args:
        targets: What to measure (Url, Fleet, Launched, Config); each is opened in turn.
        workload: The prompts: synthetic, or from a JSONL dataset.
        loads: The loads to run on every target.
        options: Sampling options for every request (e.g. ``{"temperature": 0}``).
        warmup: Requests sent first and not measured.
        slo: Objectives a request must meet to count towards goodput; None: no goodput.
        percentiles: Which percentiles of each latency to report.
        seed: Seeds the arrival times, so runs are repeatable.
        sample_every_s: Seconds between metric samples during the run (for peaks); None: none.
        progress: Called with each request's progress; None is silent.
        on_result: Called with each run's result as it finishes; None: not called.
        runs: How many times each (target, load) point is measured (for confidence intervals).
        cancel_rate: The share of requests cancelled on purpose at a seeded random point.

    Returns:
        Every run's result, target by load.
    """
    requests = await _checked_requests(targets, workload, loads, runs)
    points = [(load, k) for load in loads for k in range(runs)]
    plan = _Plan(requests, points, workload.model_dump(), slo, on_result)
    run_point = functools.partial(
        run_load,
        workload=plan.workload,
        options=options,
        warmup=warmup,
        slo=slo,
        percentiles=percentiles,
        seed=seed,
        sample_every_s=sample_every_s,
        progress=progress,
        cancel_rate=cancel_rate,
    )
    for target in targets:
        await _measure_target(target, plan, run_point)
    return BenchReport(runs=plan.results)


async def _checked_requests(
    targets: Sequence[Target], workload: AnyWorkload, loads: Sequence[Load], runs: int
) -> Sequence[Item]:
    """The workload's requests, once the settings and every target are checked (nothing started)."""
    if not targets:
        raise InvalidOptions("nothing to measure: give a URL, a config, or engines to launch")
    if not loads:
        raise InvalidOptions("no load given: a request rate or a maximum concurrency")
    if runs < 1:
        raise InvalidOptions(f"runs must be at least 1, got {runs}")
    requests = workload.requests()  # reads and validates the dataset before anything starts
    if not requests:
        raise InvalidOptions("the workload has no requests")
    for target in targets:
        await target.check()
    return requests


@dataclass(frozen=True)
class _Plan:
    """What every target runs: the requests, each (load, repeat) point in order; the results so far."""

    requests: Sequence[Item]
    points: list[tuple[Load, int]]
    workload: dict[str, Any]
    slo: Slo | None
    on_result: Callable[[RunResult], None] | None = None
    results: list[RunResult] = field(default_factory=list)

    def keep(self, result: RunResult) -> None:
        """Keep a run's result, and hand it to ``on_result``."""
        self.results.append(result)
        if self.on_result is not None:
            self.on_result(result)

    def unrun(self, target: TargetInfo, load: Load, error: str, repeat: int = 0) -> RunResult:
        """The result of a point that did not run, with why."""
        return RunResult(
            target=target,
            load=load,
            workload=self.workload,
            slo=self.slo,
            num_prompts=request_count(self.requests),
            error=error,
            repeat=repeat,
        )


async def _measure_target(
    target: Target, plan: _Plan, run_point: Callable[..., Awaitable[RunResult]]
) -> None:
    """Open one target and run every point on it; once it dies, or if it fails, the rest record why."""
    info = TargetInfo(label=target.label, engine=getattr(target, "engine", "?"))
    kept = 0
    try:
        async with target.open() as opened:
            info = opened.info
            dead: str | None = None
            for load, repeat in plan.points:
                if dead is not None:
                    result = plan.unrun(opened.info, load, f"not run: {dead}", repeat)
                else:
                    result = await run_point(
                        opened.client,
                        plan.requests,
                        load,
                        target=opened.info,
                        metric_sources=opened.sources,
                        alive=opened.alive,
                        replica_requests=opened.replica_requests,
                    )
                    result.repeat = repeat
                    dead = result.error
                kept += 1
                plan.keep(result)
    except UnillmError as e:  # could not start, or failed while stopping: record, go on
        error = f"{type(e).__name__}: {e}"
        for load, _ in plan.points[kept:]:
            plan.keep(plan.unrun(info, load, error))
