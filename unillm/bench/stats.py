"""Benchmark statistics with exactly the definitions of ``vllm bench serve`` (pure, no I/O).

    records = [RequestRecord(start=0.0, ttft=0.05, itl=[0.01, 0.01], latency=0.07,
                             input_tokens=32, output_tokens=3)]
    stats = summarize(records, duration=1.0, percentiles=(50, 90, 99), slo=Slo(ttft_ms=100))
    stats.metrics["median_ttft_ms"], stats.output_throughput

Definitions (vllm/benchmarks/serve.py ``calculate_metrics``):

* **TTFT**: time from sending the request to the first streamed chunk.
* **TPOT** (per request): ``(latency - ttft) / (output_tokens - 1)``, only for requests with
  more than one output token, so the first token is excluded.
* **ITL**: every gap between consecutive streamed chunks, pooled over all requests.
* **E2EL**: request latency, sending to the last streamed chunk.
* mean, median, population std (numpy's default) and linear-interpolated percentiles
  (numpy's default) of each, in milliseconds.
* throughputs: completed requests, output tokens and input + output tokens per second of the
  benchmark's duration; goodput: requests meeting every SLO per second (a request with at most
  one output token counts as TPOT 0 there, as in vLLM).

Beyond vLLM: requests the benchmark cancelled on purpose are counted apart (neither completed
nor failed); multi-turn runs add session goodput (sessions whose every answered turn meets the
SLOs, per second); :func:`mean_ci` gives a mean and its 95% confidence half-width over repeated
runs (Student's t); :func:`pareto_front` picks the sweep points no other point beats.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from pydantic import BaseModel, ConfigDict, Field

#: The latency series reported per metric (vLLM's names).
METRICS = ("ttft", "tpot", "itl", "e2el")
DEFAULT_PERCENTILES: tuple[float, ...] = (50.0, 90.0, 99.0)


class Slo(BaseModel):
    """Service-level objectives for goodput, in milliseconds: ``Slo(ttft_ms=500, tpot_ms=50)``.

    A request is *good* when it meets every objective that is set (vLLM's ``--goodput``).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    ttft_ms: float | None = Field(None, gt=0)
    tpot_ms: float | None = Field(None, gt=0)
    e2el_ms: float | None = Field(None, gt=0)

    def is_set(self) -> bool:
        """True when at least one objective is given."""
        return any(v is not None for v in (self.ttft_ms, self.tpot_ms, self.e2el_ms))


@dataclass
class RequestRecord:
    """What one benchmark request measured (seconds, relative to the benchmark's start).

    ``latency`` ends at the last streamed chunk (not at the stream's end marker), as in vLLM.
    ``output_tokens`` comes from the engine's usage report (else the number of chunks).
    """

    start: float
    success: bool = True
    ttft: float | None = None
    itl: list[float] = field(default_factory=list)
    latency: float | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    error: str | None = None
    replica: str | None = None
    #: Multi-turn workloads: the session's id and the turn's index in it.
    session: str | None = None
    turn: int | None = None
    #: The benchmark cancelled this request on purpose (``cancel_rate``) after this many chunks.
    cancelled_after: int | None = None
    #: The answer's text and reasoning (kept for multi-turn histories only).
    text: str = field(default="", repr=False)
    reasoning: str = field(default="", repr=False)

    @property
    def cancelled(self) -> bool:
        """True when the benchmark cancelled this request on purpose."""
        return self.cancelled_after is not None

    @property
    def tpot(self) -> float | None:
        """``(latency - ttft) / (output_tokens - 1)``, None for one output token or less."""
        if not self.success or self.output_tokens <= 1 or self.latency is None or self.ttft is None:
            return None
        return (self.latency - self.ttft) / (self.output_tokens - 1)


class Summary(BaseModel):
    """The aggregate of one run: vLLM's counters, throughputs and latency statistics."""

    duration: float
    completed: int
    failed: int
    total_input_tokens: int
    total_output_tokens: int
    request_throughput: float
    request_goodput: float | None
    output_throughput: float
    total_token_throughput: float
    #: ``mean_/median_/std_/p{N}_{ttft,tpot,itl,e2el}_ms``; None when a series is empty.
    metrics: dict[str, float | None]
    #: Requests per replica (fleets), when the target reports it.
    replica_counts: dict[str, int] = {}
    #: Requests the benchmark cancelled on purpose (not in ``completed`` nor ``failed``).
    cancelled: int = 0
    #: Multi-turn: sessions run, and sessions whose every answered turn met the SLOs per second.
    sessions: int | None = None
    session_goodput: float | None = None


def percentile(values: Sequence[float], p: float) -> float:
    """The ``p``-th percentile with linear interpolation between closest ranks (numpy's default).

    percentile([1, 2, 3, 4], 50) == 2.5
    """
    if not values:
        raise ValueError("percentile of an empty sequence")
    if not 0 <= p <= 100:
        raise ValueError(f"percentile must be in [0, 100], got {p}")
    ordered = sorted(values)
    rank = (len(ordered) - 1) * p / 100.0
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def percentile_key(p: float) -> str:
    """vLLM's key word for a percentile: 99 -> "99", 99.9 -> "99.9"."""
    return str(int(p)) if float(p).is_integer() else str(p)


def describe(
    name: str, values_s: Sequence[float], percentiles: Iterable[float] = DEFAULT_PERCENTILES
) -> dict[str, float | None]:
    """``mean_/median_/std_/p{N}_{name}_ms`` of a series given in seconds (None when empty)."""
    ms = [v * 1000.0 for v in values_s]
    out: dict[str, float | None] = {}
    if ms:
        mean = math.fsum(ms) / len(ms)
        out[f"mean_{name}_ms"] = mean
        out[f"median_{name}_ms"] = percentile(ms, 50)
        out[f"std_{name}_ms"] = math.sqrt(math.fsum((v - mean) ** 2 for v in ms) / len(ms))
    else:
        out[f"mean_{name}_ms"] = out[f"median_{name}_ms"] = out[f"std_{name}_ms"] = None
    for p in percentiles:
        out[f"p{percentile_key(p)}_{name}_ms"] = percentile(ms, p) if ms else None
    return out


def is_good(record: RequestRecord, slo: Slo) -> bool:
    """Whether a successful request meets every objective in ``slo`` (vLLM's goodput rule)."""
    if not record.success:
        return False
    checks = []
    if slo.ttft_ms is not None:
        checks.append((record.ttft or 0.0) * 1000.0 <= slo.ttft_ms)
    if slo.tpot_ms is not None:
        checks.append((record.tpot or 0.0) * 1000.0 <= slo.tpot_ms)
    if slo.e2el_ms is not None:
        checks.append((record.latency or 0.0) * 1000.0 <= slo.e2el_ms)
    return all(checks)


def summarize(
    records: Sequence[RequestRecord],
    duration: float,
    *,
    percentiles: Iterable[float] = DEFAULT_PERCENTILES,
    slo: Slo | None = None,
) -> Summary:
    """Aggregate per-request records over a run of ``duration`` seconds, as vLLM does.

    Args:
        records: One record per request, failed ones included.
        duration: The run's length in seconds (the throughputs' denominator).
        percentiles: Which percentiles of each latency to report.
        slo: Objectives for goodput; None: no goodput.
    """
    if duration <= 0:
        raise ValueError(f"duration must be positive, got {duration}")
    done = [r for r in records if r.success]
    cancelled = sum(r.cancelled for r in records)
    pcts = tuple(percentiles)
    ttfts = [r.ttft for r in done if r.ttft is not None]
    tpots = [t for r in done if (t := r.tpot) is not None]
    itls = [gap for r in done for gap in r.itl]
    e2els = [r.latency for r in done if r.latency is not None]
    total_in = sum(r.input_tokens for r in done)
    total_out = sum(r.output_tokens for r in done)
    metrics: dict[str, float | None] = {}
    for name, series in zip(METRICS, (ttfts, tpots, itls, e2els), strict=True):
        metrics.update(describe(name, series, pcts))
    goodput = session_goodput = None
    if slo is not None and slo.is_set():
        goodput = sum(is_good(r, slo) for r in done) / duration
    by_session: dict[str, list[RequestRecord]] = {}
    for r in records:
        if r.session is not None:
            by_session.setdefault(r.session, []).append(r)
    if by_session and goodput is not None and slo is not None:
        good = sum(all(r.cancelled or is_good(r, slo) for r in turns) for turns in by_session.values())
        session_goodput = good / duration
    replicas: dict[str, int] = {}
    for r in done:
        if r.replica is not None:
            replicas[r.replica] = replicas.get(r.replica, 0) + 1
    return Summary(
        duration=duration,
        completed=len(done),
        failed=len(records) - len(done) - cancelled,
        total_input_tokens=total_in,
        total_output_tokens=total_out,
        request_throughput=len(done) / duration,
        request_goodput=goodput,
        output_throughput=total_out / duration,
        total_token_throughput=(total_in + total_out) / duration,
        metrics=metrics,
        replica_counts=replicas,
        cancelled=cancelled,
        sessions=len(by_session) if by_session else None,
        session_goodput=session_goodput,
    )


#: Student's t, two-sided 95% (the 0.975 quantile), by degrees of freedom 1..30.
_T975 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
    2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)  # fmt: skip


def t_quantile_975(df: int) -> float:
    """The 0.975 quantile of Student's t with ``df`` degrees of freedom (scipy's when installed).

    Args:
        df: Degrees of freedom (runs - 1), at least 1.
    """
    if df < 1:
        raise ValueError(f"degrees of freedom must be >= 1, got {df}")
    try:
        from scipy.stats import t  # type: ignore[import-untyped]

        return float(t.ppf(0.975, df))
    except ImportError:
        pass
    if df <= len(_T975):
        return _T975[df - 1]
    # beyond 30: Cornish-Fisher expansion around the normal quantile (error < 1e-4)
    z = 1.959964
    return z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)


def mean_ci(values: Sequence[float]) -> tuple[float, float | None]:
    """The mean of repeated runs' values and its 95% confidence half-width (t-distribution).

    mean_ci([10, 12, 11]) == (11.0, 2.484...)   # 11 +/- 2.48

    Args:
        values: One value per run.

    Returns:
        The mean, and the half-width (None with fewer than two runs).
    """
    if not values:
        raise ValueError("no values")
    mean = statistics.fmean(values)
    if len(values) < 2:
        return mean, None
    half = t_quantile_975(len(values) - 1) * statistics.stdev(values) / math.sqrt(len(values))
    return mean, half


def pareto_front(points: Sequence[tuple[float, float]]) -> list[int]:
    """Indices of the points (throughput, latency) that no other point beats on both.

    A point is beaten when another has at least its throughput and at most its latency, and is
    strictly better on one. The front is returned by increasing throughput.

    Args:
        points: ``(throughput, latency)`` pairs; NaN entries are never on the front.
    """
    ok = [i for i, (x, y) in enumerate(points) if x == x and y == y]
    front = [
        i
        for i in ok
        if not any(
            points[j][0] >= points[i][0]
            and points[j][1] <= points[i][1]
            and (points[j][0] > points[i][0] or points[j][1] < points[i][1])
            for j in ok
        )
    ]
    return sorted(front, key=lambda i: points[i])
