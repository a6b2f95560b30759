"""Run a whole benchmark: every target x every load, one after the other, robust to failures.

    report = await run_suite([Url("vllm", url)], Synthetic(num_prompts=100),
                             [Load(max_concurrency=c) for c in (1, 4, 8)])

Every target is checked first (bad input raises before anything starts). Then each target is
opened (connected or launched), measured under each load, and closed. A target that fails to
start, or dies mid-run, is recorded in the results with its error, and the suite goes on.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from unillm.bench.arrivals import Load
from unillm.bench.result import RunResult, TargetInfo
from unillm.bench.runner import ProgressHook, request_count, run_load
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
    described = workload.model_dump()
    results: list[RunResult] = []

    def keep(result: RunResult) -> None:
        results.append(result)
        if on_result is not None:
            on_result(result)

    for target in targets:
        failed_info = TargetInfo(label=target.label, engine=getattr(target, "engine", "?"))
        before = len(results)
        try:
            async with target.open() as opened:
                failed_info = opened.info
                dead: str | None = None
                for load, repeat in ((load, k) for load in loads for k in range(runs)):
                    if dead is not None:
                        keep(
                            RunResult(
                                target=opened.info,
                                load=load,
                                workload=described,
                                slo=slo,
                                num_prompts=request_count(requests),
                                error=f"not run: {dead}",
                                repeat=repeat,
                            )
                        )
                        continue
                    result = await run_load(
                        opened.client,
                        requests,
                        load,
                        options=options,
                        warmup=warmup,
                        slo=slo,
                        percentiles=percentiles,
                        seed=seed,
                        target=opened.info,
                        workload=described,
                        metric_sources=opened.sources,
                        sample_every_s=sample_every_s,
                        alive=opened.alive,
                        progress=progress,
                        replica_requests=opened.replica_requests,
                        cancel_rate=cancel_rate,
                    )
                    result.repeat = repeat
                    dead = result.error
                    keep(result)
        except UnillmError as e:  # could not start, or failed while stopping: record, go on
            error = f"{type(e).__name__}: {e}"
            for load in [x for x in loads for _ in range(runs)][len(results) - before :]:
                keep(
                    RunResult(
                        target=failed_info,
                        load=load,
                        workload=described,
                        slo=slo,
                        num_prompts=request_count(requests),
                        error=error,
                    )
                )
    return BenchReport(runs=results)
