"""One benchmark run's result, and its JSON in ``vllm bench serve``'s layout.

result.summary.median_ttft_ms                 # see Summary
result.to_vllm_json()                         # the keys vLLM's tooling reads, plus unillm_*
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from pydantic import BaseModel, Field

from unillm.bench.arrivals import Load
from unillm.bench.engine_stats import EngineStats
from unillm.bench.stats import RequestRecord, Slo, Summary


class TargetInfo(BaseModel):
    """What was measured: engine, where, and (for launched engines) the exact masked command."""

    label: str
    engine: str
    urls: list[str] = []
    model: str | None = None
    engine_version: str | None = None
    command: str | None = None
    settings: dict[str, Any] = {}
    #: The HTTP client that measured ("aiohttp", "httpx", "in-process"); see unillm.bench.http.
    client_http: str = "httpx"


class RunResult(BaseModel):
    """One (target, load) point of a benchmark: aggregates, per-request series and engine deltas.

    ``error`` is set when the target failed (could not start, or crashed mid-run); the counts
    still cover what was measured before it did.
    """

    target: TargetInfo
    load: Load
    workload: dict[str, Any]
    slo: Slo | None = None
    date: str = Field(default_factory=lambda: dt.datetime.now(dt.timezone.utc).strftime("%Y%m%d-%H%M%S"))
    num_prompts: int
    summary: Summary | None = None
    input_lens: list[int] = []
    output_lens: list[int] = []
    ttfts: list[float | None] = []
    itls: list[list[float]] = []
    latencies: list[float | None] = []
    errors: list[str] = []
    engine: EngineStats = EngineStats()
    error: str | None = None
    #: Which repeat of its (target, load) point this run is (``runs=N``: 0..N-1).
    repeat: int = 0
    #: Multi-turn: each request's session id and turn index (None for single requests).
    sessions: list[str | None] = []
    turns: list[int | None] = []
    cancelled: list[bool] = []

    @classmethod
    def from_records(cls, records: list[RequestRecord], summary: Summary, **fields: Any) -> RunResult:
        """Fill the per-request series (vLLM's order: one entry per request, failed ones too).

        Args:
            records: Every request's record, in workload order.
            summary: The aggregate of those records.
            **fields: The result's other fields (target, load, engine stats, ...).
        """
        return cls(
            summary=summary,
            input_lens=[r.input_tokens for r in records],
            output_lens=[r.output_tokens if r.success else 0 for r in records],
            ttfts=[r.ttft if r.success else 0.0 for r in records],
            itls=[r.itl if r.success else [] for r in records],
            latencies=[r.latency if r.success else 0.0 for r in records],
            errors=[r.error or "" for r in records],
            sessions=[r.session for r in records] if any(r.session for r in records) else [],
            turns=[r.turn for r in records] if any(r.session for r in records) else [],
            cancelled=[r.cancelled for r in records] if any(r.cancelled for r in records) else [],
            **fields,
        )

    def metric(self, key: str) -> float | None:
        """A vLLM statistic by its key, e.g. ``"median_ttft_ms"`` or ``"output_throughput"``.

        Args:
            key: The statistic's key in ``vllm bench serve``'s JSON.

        Returns:
            Its value; None when the run has no such statistic.
        """
        if self.summary is None:
            return None
        if key in self.summary.metrics:
            return self.summary.metrics[key]
        value = getattr(self.summary, key, None)
        return float(value) if isinstance(value, (int, float)) else None

    def to_vllm_json(self) -> dict[str, Any]:
        """The result as ``vllm bench serve --save-result`` writes it, plus ``unillm_*`` keys."""
        s = self.summary
        out: dict[str, Any] = {
            "date": self.date,
            "backend": "unillm",
            "endpoint_type": self.target.engine,
            "label": self.target.label,
            "model_id": self.target.model,
            "num_prompts": self.num_prompts,
            "request_rate": self.load.rate if self.load.rate != float("inf") else "inf",
            "burstiness": self.load.burstiness,
            "max_concurrency": self.load.max_concurrency,
        }
        if s is not None:
            out.update(
                {
                    "duration": s.duration,
                    "completed": s.completed,
                    "failed": s.failed,
                    "total_input_tokens": s.total_input_tokens,
                    "total_output_tokens": s.total_output_tokens,
                    "request_throughput": s.request_throughput,
                    "request_goodput": s.request_goodput,
                    "output_throughput": s.output_throughput,
                    "total_token_throughput": s.total_token_throughput,
                }
            )
        out.update(
            {
                "input_lens": self.input_lens,
                "output_lens": self.output_lens,
                "ttfts": self.ttfts,
                "itls": self.itls,
                "latencies": self.latencies,
                "errors": self.errors,
            }
        )
        if s is not None:
            out.update(s.metrics)
        if self.engine.spec_acceptance_rate is not None:
            out["spec_decode_acceptance_rate"] = self.engine.spec_acceptance_rate * 100
            out["spec_decode_acceptance_length"] = self.engine.spec_acceptance_length
        out["unillm_target"] = self.target.model_dump()
        out["unillm_load"] = self.load.model_dump()
        out["unillm_workload"] = self.workload
        out["unillm_slo"] = self.slo.model_dump() if self.slo else None
        out["unillm_engine"] = self.engine.model_dump()
        out["unillm_replica_counts"] = s.replica_counts if s else {}
        out["unillm_error"] = self.error
        out["unillm_repeat"] = self.repeat
        out["unillm_cancelled"] = s.cancelled if s else 0
        if s is not None and s.sessions is not None:
            out["unillm_sessions"] = s.sessions
            out["unillm_session_goodput"] = s.session_goodput
            out["unillm_session_ids"] = self.sessions
            out["unillm_turns"] = self.turns
        return out
