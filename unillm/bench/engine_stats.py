"""The engine's own view of a benchmark run: metric deltas between two snapshots, and peaks.

    before = await snapshot(sources)          # {"replica label": NormalizedMetrics | None}
    ... run ...
    after = await snapshot(sources)
    EngineStats.between(before, after, peaks)

Uses the normalized metrics (``EngineMetrics.normalized()``), so the figures mean the same on
every engine; a signal an engine does not expose stays ``None``. Engines without a metrics
endpoint (mlx-lm's server, in-process engines) give ``None`` for everything. Requests the
engine aborted (vLLM's ``request_success_total{finished_reason="abort"}``, what it did with
cancellations) and the requests still running after the run are read from its raw counters.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import anyio
from pydantic import BaseModel

from unillm.errors import UnillmError
from unillm.metrics import NormalizedMetrics

if TYPE_CHECKING:
    from unillm.client.protocol import Client

Snapshot = dict[str, Any]  # replica label -> NormalizedMetrics | None

#: Counters of requests the engine aborted, by engine family (sample name, labels).
ABORT_COUNTERS: tuple[tuple[str, dict[str, str]], ...] = (
    ("vllm:request_success_total", {"finished_reason": "abort"}),
    ("sglang:num_aborted_requests_total", {}),
)


class EngineSnapshot(NormalizedMetrics):
    """Normalized metrics plus the engine's count of aborted requests (None: not exposed)."""

    aborted: float | None = None


class EngineStats(BaseModel):
    """What the engine reported over the run (None: not exposed or not measured)."""

    prompt_tokens: float | None = None
    generation_tokens: float | None = None
    prefix_cache_hits: float | None = None
    prefix_cache_queries: float | None = None
    prefix_cache_hit_ratio: float | None = None
    spec_acceptance_rate: float | None = None
    spec_acceptance_length: float | None = None
    spec_draft_tokens: float | None = None
    spec_accepted_tokens: float | None = None
    mean_queue_time_ms: float | None = None
    kv_cache_usage_peak: float | None = None
    waiting_peak: float | None = None
    #: Requests the engine aborted over the run (client cancellations), where it counts them.
    aborted: float | None = None
    #: Requests still running on the engine when the run ended (a cancellation it missed).
    running_after: float | None = None
    #: Generated tokens per replica (fleets: each replica's share of the work).
    replica_generation_tokens: dict[str, float | None] = {}

    @classmethod
    def between(cls, before: Snapshot, after: Snapshot, samples: list[Snapshot]) -> EngineStats:
        """Deltas of the counters from ``before`` to ``after``, peaks of the sampled gauges.

        Args:
            before: The engine's metrics before the run.
            after: Its metrics after the run.
            samples: Snapshots taken during the run (for the gauges' peaks).
        """
        deltas = {
            k: after[k] - before[k] for k in after if after.get(k) is not None and before.get(k) is not None
        }
        if not deltas:
            return cls()
        out: dict[str, Any] = {}
        for key in (
            "prompt_tokens",
            "generation_tokens",
            "prefix_cache_hits",
            "prefix_cache_queries",
            "spec_draft_tokens",
            "spec_accepted_tokens",
        ):
            out[key] = _sum(getattr(d, key) for d in deltas.values())
        hits, queries = out["prefix_cache_hits"], out["prefix_cache_queries"]
        out["prefix_cache_hit_ratio"] = (
            hits / queries
            if hits is not None and queries
            else _mean(d.prefix_cache_hit_ratio for d in deltas.values())
        )
        drafted, accepted = out["spec_draft_tokens"], out["spec_accepted_tokens"]
        out["spec_acceptance_rate"] = (
            accepted / drafted
            if accepted is not None and drafted
            else _mean(d.spec_acceptance_rate for d in deltas.values())
        )
        out["spec_acceptance_length"] = _mean(d.spec_acceptance_length for d in deltas.values())
        queue = [d.queue for d in deltas.values() if d.queue is not None and d.queue.count > 0]
        if queue:
            out["mean_queue_time_ms"] = 1000 * sum(h.sum for h in queue) / sum(h.count for h in queue)
        gauges = [m for s in (*samples, after) for m in s.values() if m is not None]
        out["kv_cache_usage_peak"] = _max(m.kv_cache_usage for m in gauges)
        out["waiting_peak"] = _max(m.waiting for m in gauges)
        out["replica_generation_tokens"] = {k: d.generation_tokens for k, d in deltas.items()}
        out["aborted"] = _sum(
            a - b
            for k in deltas
            if (a := getattr(after[k], "aborted", None)) is not None
            and (b := getattr(before[k], "aborted", None)) is not None
        )
        out["running_after"] = _sum(getattr(m, "running", None) for m in after.values() if m is not None)
        return cls(**out)


async def snapshot(sources: Mapping[str, Client]) -> Snapshot:
    """Normalized metrics of every source now (None for a source without usable metrics)."""
    out: Snapshot = {}

    async def one(label: str, llm: Client) -> None:
        out[label] = await _normalized(llm)

    async with anyio.create_task_group() as tg:
        for label, llm in sources.items():
            tg.start_soon(one, label, llm)
    return out


async def _normalized(llm: Client) -> Any:
    try:
        with anyio.fail_after(5):
            metrics = await llm.metrics()
        normalize = getattr(metrics, "normalized", None)
        if normalize is None:
            return None
        normalized = normalize()
        value = getattr(metrics, "value", None)
        aborted = None
        for name, labels in ABORT_COUNTERS:
            aborted = value(name, **labels) if value is not None else None
            if aborted is not None:
                break
        return EngineSnapshot(**normalized.model_dump(), aborted=aborted)
    except (UnillmError, ValueError, TimeoutError):
        return None


def _present(values: Any) -> list[float]:
    return [float(v) for v in values if v is not None]


def _sum(values: Any) -> float | None:
    have = _present(values)
    return sum(have) if have else None


def _mean(values: Any) -> float | None:
    have = _present(values)
    return sum(have) / len(have) if have else None


def _max(values: Any) -> float | None:
    have = _present(values)
    return max(have) if have else None
