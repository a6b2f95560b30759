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
"""

from __future__ import annotations

import math
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
    goodput = None
    if slo is not None and slo.is_set():
        goodput = sum(is_good(r, slo) for r in done) / duration
    replicas: dict[str, int] = {}
    for r in done:
        if r.replica is not None:
            replicas[r.replica] = replicas.get(r.replica, 0) + 1
    return Summary(
        duration=duration,
        completed=len(done),
        failed=len(records) - len(done),
        total_input_tokens=total_in,
        total_output_tokens=total_out,
        request_throughput=len(done) / duration,
        request_goodput=goodput,
        output_throughput=total_out / duration,
        total_token_throughput=(total_in + total_out) / duration,
        metrics=metrics,
        replica_counts=replicas,
    )
