"""Engine metrics: the raw Prometheus samples, and one normalized view for every engine.

    m = await llm.metrics()
    m.value("vllm:num_requests_running")           # raw: summed over label sets
    n = m.normalized()                             # the same schema on every engine
    n.waiting, n.kv_cache_usage, n.ttft.p90, n.itl.mean

    before = (await llm.metrics()).normalized()
    ...                                            # run a workload
    delta = (await llm.metrics()).normalized() - before
    delta.generation_tokens, delta.ttft.p50, delta.spec_acceptance_rate

Each adapter declares how its engine's names map onto the schema (:class:`MetricNames`, from
``Adapter.metric_names(version)``); a signal the engine does not expose is ``None``, never 0.
Units: every duration is in **seconds**; token counts are tokens; ``kv_cache_usage`` and the
ratios are fractions in 0-1. Histograms are the engine's own (cumulative buckets, sum, count);
percentiles are estimated from the buckets the way Prometheus' ``histogram_quantile`` does.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr


class Sample(BaseModel):
    """One sample: metric name, labels, value."""

    model_config = ConfigDict(frozen=True)

    name: str
    labels: dict[str, str]
    value: float


class MetricNames(BaseModel):
    """Where an engine exposes each normalized signal: its Prometheus names (None: not exposed).

    Histogram fields (``ttft, itl, tpot, e2e, queue``) name a histogram family (its
    ``_bucket``/``_sum``/``_count`` samples). Every other field names one sample, e.g. a
    counter's ``..._total`` or a histogram's ``..._sum`` (a total of per-request counts). An
    adapter returns one of these from ``metric_names(version)``::

        MetricNames(ttft="vllm:time_to_first_token_seconds", waiting="vllm:num_requests_waiting")
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    ttft: str | None = None
    itl: str | None = None
    tpot: str | None = None
    e2e: str | None = None
    queue: str | None = None
    running: str | None = None
    waiting: str | None = None
    kv_cache_usage: str | None = None
    prefix_cache_hits: str | None = None
    prefix_cache_queries: str | None = None
    prefix_cache_hit_ratio: str | None = None
    spec_drafts: str | None = None
    spec_draft_tokens: str | None = None
    spec_accepted_tokens: str | None = None
    spec_acceptance_rate: str | None = None
    spec_acceptance_length: str | None = None
    prompt_tokens: str | None = None
    generation_tokens: str | None = None


class Histogram(BaseModel):
    """A latency distribution from an engine's Prometheus histogram (summed over label sets).

    ``buckets`` are ``(upper bound, cumulative count)`` pairs in ascending order, without the
    ``+Inf`` bucket (its count is ``count``). ``h.p50``/``h.p90``/``h.p99`` are estimated from
    the buckets (linear inside a bucket, like Prometheus' ``histogram_quantile``); ``h.mean``
    is exact (``sum / count``). ``after - before`` is the distribution of what happened between
    two snapshots; ``a + b`` merges two engines' distributions.
    """

    model_config = ConfigDict(frozen=True)

    buckets: tuple[tuple[float, float], ...] = ()
    sum: float = 0.0
    count: float = 0.0

    @property
    def mean(self) -> float | None:
        """Exact mean of the observations (None when there are none)."""
        return self.sum / self.count if self.count > 0 else None

    @property
    def p50(self) -> float | None:
        """Estimated median."""
        return self.quantile(0.5)

    @property
    def p90(self) -> float | None:
        """Estimated 90th percentile."""
        return self.quantile(0.9)

    @property
    def p99(self) -> float | None:
        """Estimated 99th percentile."""
        return self.quantile(0.99)

    def quantile(self, q: float) -> float | None:
        """Estimate the ``q``-quantile (0-1) from the buckets; None without observations.

        A quantile that falls beyond the last finite bucket is reported as that bucket's
        upper bound (the estimate cannot be larger), as Prometheus does.
        """
        if not 0 <= q <= 1:
            raise ValueError(f"quantile must be within 0..1, got {q}")
        if self.count <= 0:
            return None
        rank = q * self.count
        lower, below = 0.0, 0.0
        for bound, cumulative in self.buckets:
            if cumulative >= rank and cumulative > below:
                if bound <= 0:
                    return bound
                return lower + (bound - lower) * (rank - below) / (cumulative - below)
            lower, below = bound, max(below, cumulative)
        return self.buckets[-1][0] if self.buckets else None

    def __add__(self, other: Histogram) -> Histogram:
        return _combine([self, other])

    def __sub__(self, before: Histogram) -> Histogram:
        if self.count < before.count:  # the engine restarted: everything is new
            return self
        start = dict(before.buckets)
        return Histogram(
            buckets=tuple((b, max(0.0, c - start.get(b, 0.0))) for b, c in self.buckets),
            sum=max(0.0, self.sum - before.sum),
            count=self.count - before.count,
        )


def _combine(histograms: Iterable[Histogram]) -> Histogram:
    counts: dict[float, float] = {}
    total = n = 0.0
    for h in histograms:
        for bound, cumulative in h.buckets:
            counts[bound] = counts.get(bound, 0.0) + cumulative
        total += h.sum
        n += h.count
    return Histogram(buckets=tuple(sorted(counts.items())), sum=total, count=n)


_HISTOGRAMS = ("ttft", "itl", "tpot", "e2e", "queue")
_COUNTERS = (
    "prefix_cache_hits",
    "prefix_cache_queries",
    "spec_drafts",
    "spec_draft_tokens",
    "spec_accepted_tokens",
    "prompt_tokens",
    "generation_tokens",
)
_LOAD = ("running", "waiting")  # gauges that add up across engines
_FRACTIONS = ("kv_cache_usage",)  # gauges that average across engines
_RATIOS = ("prefix_cache_hit_ratio", "spec_acceptance_rate", "spec_acceptance_length")


class NormalizedMetrics(BaseModel):
    """One engine's metrics in unillm's schema, the same for every engine (None: not exposed).

    Durations in seconds. Weighting matters: ``itl`` has one observation per generated token
    gap (token-weighted: long answers dominate), ``tpot`` one per request (request-weighted:
    each request's mean time per output token after the first). Counters (tokens, prefix and
    speculative counts) are totals since the engine started, or over the window for a diff.
    """

    engine: str = Field(description="The engine these figures come from (joined with '+' when merged).")
    ttft: Histogram | None = Field(None, description="Time to first token, s; one per request.")
    itl: Histogram | None = Field(
        None, description="Inter-token latency, s; one per output-token gap (token-weighted)."
    )
    tpot: Histogram | None = Field(
        None, description="Time per output token after the first, s; one per request (request-weighted)."
    )
    e2e: Histogram | None = Field(None, description="End-to-end request latency, s; one per request.")
    queue: Histogram | None = Field(
        None, description="Time waiting before being scheduled, s; one per request."
    )
    running: float | None = Field(None, description="Requests being processed now (gauge).")
    waiting: float | None = Field(None, description="Requests queued, not yet scheduled, now (gauge).")
    kv_cache_usage: float | None = Field(None, description="Fraction (0-1) of the KV cache in use now.")
    prefix_cache_hits: float | None = Field(None, description="Prompt tokens served from the prefix cache.")
    prefix_cache_queries: float | None = Field(
        None, description="Prompt tokens looked up in the prefix cache."
    )
    prefix_cache_hit_ratio: float | None = Field(
        None, description="hits / queries (0-1); the engine's own gauge when it exposes no counters."
    )
    spec_drafts: float | None = Field(None, description="Speculative draft proposals (verification steps).")
    spec_draft_tokens: float | None = Field(None, description="Tokens proposed by the drafter.")
    spec_accepted_tokens: float | None = Field(None, description="Draft tokens accepted by the target model.")
    spec_acceptance_rate: float | None = Field(None, description="Accepted / proposed draft tokens (0-1).")
    spec_acceptance_length: float | None = Field(
        None, description="Tokens emitted per verification step: 1 + accepted / drafts."
    )
    prompt_tokens: float | None = Field(None, description="Prompt tokens processed (prefill).")
    generation_tokens: float | None = Field(None, description="Tokens generated.")

    def __sub__(self, before: NormalizedMetrics) -> NormalizedMetrics:
        return diff(before, self)


class EngineMetrics(BaseModel):
    """Every sample an engine exposed at one moment; ``.normalized()`` maps them onto the schema."""

    engine: str | None = None
    mapping: MetricNames | None = None
    samples: list[Sample]
    _index: dict[str, list[Sample]] | None = PrivateAttr(default=None)

    @classmethod
    def parse(
        cls,
        text: str,
        *,
        engine: str | None = None,
        mapping: MetricNames | None = None,
    ) -> EngineMetrics:
        """Parse the Prometheus text exposition format (``mapping`` enables ``.normalized()``).

        Raises MalformedResponse for text that is not in that format.

        Args:
            text: The Prometheus text exposition.
            engine: The engine's name, kept on the result.
            mapping: The engine's metric names (see :meth:`Adapter.metric_names`).
        """
        from prometheus_client.parser import text_string_to_metric_families

        from unillm.errors import SHAPE_ERRORS, malformed

        try:
            samples = [
                Sample(name=s.name, labels=dict(s.labels), value=s.value)
                for family in text_string_to_metric_families(text)
                for s in family.samples
            ]
        except SHAPE_ERRORS as e:
            raise malformed(engine or "engine", "metrics text", e) from e
        return cls(engine=engine, mapping=mapping, samples=samples)

    def _by_name(self) -> dict[str, list[Sample]]:
        if self._index is None:
            index: dict[str, list[Sample]] = {}
            for s in self.samples:
                index.setdefault(s.name, []).append(s)
            self._index = index
        return self._index

    def names(self) -> list[str]:
        """Distinct sample names."""
        return sorted(self._by_name())

    def value(self, name: str, **labels: str) -> float | None:
        """Sum of the samples called ``name`` whose labels include ``labels``; None if absent.

        Args:
            name: The sample name, as the engine exposes it.
            **labels: Label values the samples must carry (e.g. ``model_name="tiny"``).
        """
        hits = [
            s.value
            for s in self._by_name().get(name, ())
            if all(s.labels.get(k) == v for k, v in labels.items())
        ]
        return sum(hits) if hits else None

    def mean(self, name: str) -> float | None:
        """Mean of the samples called ``name`` over label sets (for fractions); None if absent.

        Args:
            name: The sample name, as the engine exposes it.
        """
        hits = [s.value for s in self._by_name().get(name, ())]
        return sum(hits) / len(hits) if hits else None

    def histogram(self, family: str) -> Histogram | None:
        """The histogram ``family`` summed over label sets; None if the engine does not expose it.

        Args:
            family: The histogram's metric name, without ``_bucket``/``_sum``/``_count``.
        """
        index = self._by_name()
        count = self.value(f"{family}_count")
        if count is None:
            return None
        per_bound: dict[float, float] = {}
        for s in index.get(f"{family}_bucket", ()):
            bound = float(s.labels.get("le", "+Inf"))
            if bound != float("inf"):
                per_bound[bound] = per_bound.get(bound, 0.0) + s.value
        return Histogram(
            buckets=tuple(sorted(per_bound.items())), sum=self.value(f"{family}_sum") or 0.0, count=count
        )

    def normalized(self, mapping: MetricNames | None = None) -> NormalizedMetrics:
        """These samples in unillm's schema, using the engine's declared names.

        n = (await llm.metrics()).normalized()
        print(n.waiting, n.kv_cache_usage, n.ttft.p90 if n.ttft else None)

        Args:
            mapping: The engine's metric names; None uses the one given to :meth:`parse`.
        """
        names = mapping or self.mapping
        if names is None:
            raise ValueError(
                "these metrics carry no name mapping: pass mapping=MetricNames(...) "
                "(llm.metrics() attaches the adapter's)"
            )
        fields: dict[str, Any] = {"engine": self.engine or "unknown"}
        for key in _HISTOGRAMS:
            family = getattr(names, key)
            fields[key] = self.histogram(family) if family else None
        for key in (*_COUNTERS, *_LOAD):
            name = getattr(names, key)
            fields[key] = self.value(name) if name else None
        for key in (*_FRACTIONS, *_RATIOS):
            name = getattr(names, key)
            fields[key] = self.mean(name) if name else None
        return NormalizedMetrics(**_with_ratios(fields, gauges=fields))


class CombinedMetrics(EngineMetrics):
    """Several engines' metrics (a fleet's replicas): raw samples labelled ``replica=<url>``.

        m = await fleet.metrics()
        m.value("vllm:num_requests_running", replica="http://a:8000")   # raw, one replica
        m.normalized()                  # merged: counters and histograms summed (see merge())
        m.per_replica()["http://a:8000"].waiting

    ``replicas`` holds the metrics of the replicas that answered.
    """

    replicas: dict[str, EngineMetrics] = {}

    def normalized(self, mapping: MetricNames | None = None) -> NormalizedMetrics:
        """All replicas in one view (``merge`` of ``per_replica()``)."""
        if mapping is not None or not self.replicas:
            return super().normalized(mapping)
        return merge(self.per_replica().values())

    def per_replica(self) -> dict[str, NormalizedMetrics]:
        """Each replica's normalized view, by URL."""
        return {url: m.normalized() for url, m in self.replicas.items()}


def _ratio(num: float | None, den: float | None) -> float | None:
    return num / den if num is not None and den else None


def _with_ratios(fields: dict[str, Any], *, gauges: Mapping[str, Any]) -> dict[str, Any]:
    """Ratios from the counters when the engine exposes them, else its own gauges.

    Exposed counters with nothing to divide (no lookups, no drafts: speculation off, or an
    idle window) give None, not 0; so does an acceptance-length gauge of 0 (nothing speculated).
    """
    out = dict(fields)
    hits, queries = fields["prefix_cache_hits"], fields["prefix_cache_queries"]
    if hits is not None and queries is not None:
        out["prefix_cache_hit_ratio"] = _ratio(hits, queries)
    else:
        out["prefix_cache_hit_ratio"] = gauges.get("prefix_cache_hit_ratio")
    drafts, proposed = fields["spec_drafts"], fields["spec_draft_tokens"]
    accepted = fields["spec_accepted_tokens"]
    if drafts == 0 or proposed == 0:
        out["spec_acceptance_rate"] = out["spec_acceptance_length"] = None
        return out
    if accepted is not None and proposed is not None:
        out["spec_acceptance_rate"] = _ratio(accepted, proposed)
    else:
        out["spec_acceptance_rate"] = gauges.get("spec_acceptance_rate")
    if accepted is not None and drafts is not None:
        per_draft = _ratio(accepted, drafts)
        out["spec_acceptance_length"] = None if per_draft is None else 1 + per_draft
    else:
        out["spec_acceptance_length"] = gauges.get("spec_acceptance_length")
        if out["spec_acceptance_length"] == 0:  # at least 1 whenever anything was speculated:
            out["spec_acceptance_rate"] = out["spec_acceptance_length"] = None  # (SGLang, spec off)
    return out


def diff(before: NormalizedMetrics, after: NormalizedMetrics) -> NormalizedMetrics:
    """What happened between two snapshots of one engine (also ``after - before``).

    Counters and histograms become deltas (a counter that went down means the engine
    restarted: the delta is then ``after``'s value); gauges (running, waiting, KV usage) are
    ``after``'s; ratios are recomputed from the deltas, or ``after``'s gauge when the engine
    exposes no counters for them.
    """
    fields: dict[str, Any] = {"engine": after.engine}
    for key in _HISTOGRAMS:
        a, b = getattr(after, key), getattr(before, key)
        fields[key] = a - b if a is not None and b is not None else a
    for key in _COUNTERS:
        a, b = getattr(after, key), getattr(before, key)
        fields[key] = (a - b if a >= b else a) if a is not None and b is not None else a
    for key in (*_LOAD, *_FRACTIONS, *_RATIOS):
        fields[key] = getattr(after, key)
    return NormalizedMetrics(**_with_ratios(fields, gauges=fields))


def merge(views: Iterable[NormalizedMetrics]) -> NormalizedMetrics:
    """One view of several engines (e.g. a fleet's replicas): counters and histograms summed.

        merged = unillm.metrics.merge([(await r.metrics()).normalized() for r in replicas])

    Running and waiting requests add up; KV-cache usage is the mean over replicas; ratios are
    recomputed from the summed counters (or averaged when only gauges exist). A signal is
    None unless **every** replica exposes it, so a partial sum never passes for a total.
    """
    items = list(views)
    if not items:
        raise ValueError("merge() needs at least one NormalizedMetrics")
    fields: dict[str, Any] = {"engine": "+".join(dict.fromkeys(v.engine for v in items))}
    for key in _HISTOGRAMS:
        hs = [getattr(v, key) for v in items]
        fields[key] = _combine(hs) if all(h is not None for h in hs) else None
    for key in (*_COUNTERS, *_LOAD):
        xs = [getattr(v, key) for v in items]
        fields[key] = sum(xs) if all(x is not None for x in xs) else None
    gauges: dict[str, Any] = {}
    for key in (*_FRACTIONS, *_RATIOS):
        xs = [getattr(v, key) for v in items]
        gauges[key] = sum(xs) / len(xs) if all(x is not None for x in xs) else None
    fields.update((key, gauges[key]) for key in _FRACTIONS)
    return NormalizedMetrics(**_with_ratios(fields, gauges=gauges))


__all__ = [
    "CombinedMetrics",
    "EngineMetrics",
    "Histogram",
    "MetricNames",
    "NormalizedMetrics",
    "Sample",
    "diff",
    "merge",
]
