"""An engine's Prometheus metrics, parsed with prometheus-client's own text parser.

    m = await llm.metrics()
    m.value("vllm:num_requests_running")          # summed over label sets
    m.value("vllm:num_requests_running", model_name="tiny")
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Sample(BaseModel):
    """One sample: metric name, labels, value."""

    model_config = ConfigDict(frozen=True)

    name: str
    labels: dict[str, str]
    value: float


class EngineMetrics(BaseModel):
    """Every sample an engine exposed at one moment."""

    samples: list[Sample]

    @classmethod
    def parse(cls, text: str) -> EngineMetrics:
        """Parse the Prometheus text exposition format."""
        from prometheus_client.parser import text_string_to_metric_families

        return cls(samples=[
            Sample(name=s.name, labels=dict(s.labels), value=s.value)
            for family in text_string_to_metric_families(text)
            for s in family.samples
        ])

    def names(self) -> list[str]:
        """Distinct sample names."""
        return sorted({s.name for s in self.samples})

    def value(self, name: str, **labels: str) -> float | None:
        """Sum of the samples called ``name`` whose labels include ``labels``; None if absent."""
        hits = [s.value for s in self.samples
                if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())]
        return sum(hits) if hits else None
