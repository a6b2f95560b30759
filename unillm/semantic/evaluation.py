"""How well a semantic router routes: accuracy, confusion matrix, thresholds, time per decision.

    samples = load_samples("labelled.jsonl")          # {"text": ..., "route": ...} per line
    report = await evaluate(router, samples)
    print(report.accuracy, report.markdown())

The statistics are pure functions of (label, decision) pairs, so they are tested without an
embedder; :func:`evaluate` only runs the router over the samples.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from unillm.errors import InvalidOptions
from unillm.jsonl import jsonl_objects
from unillm.results import RouteDecision


class Sample(BaseModel):
    """One labelled prompt: ``text`` (or chat ``messages``) and the route it should take."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    text: str | None = None
    messages: list[dict[str, Any]] | None = None
    route: str | None


class RouteStats(BaseModel):
    """Precision and recall of one route, and the threshold that would suit it best."""

    support: int
    precision: float | None
    recall: float | None
    suggested_threshold: float | None


class Miss(BaseModel):
    """A prompt that went to the wrong route."""

    text: str
    expected: str | None
    got: str | None
    score: float | None


class EvalReport(BaseModel):
    """The outcome of routing every labelled sample once."""

    total: int
    correct: int
    accuracy: float
    routes: list[str]
    confusion: dict[str, dict[str, int]]  # expected -> decided -> count
    per_route: dict[str, RouteStats]
    decision_ms_median: float
    decision_ms_p90: float
    misses: list[Miss]
    nearest_neighbour: float | None = None  # accuracy of the nearest example's route, same vectors
    cross_validated: float | None = None  # the head's accuracy on its examples, each held out

    def baselines(self) -> str:
        """One line: nearest-neighbour over the same vectors and the head's cross-validated estimate."""
        parts = []
        if self.nearest_neighbour is not None:
            gap = self.accuracy - self.nearest_neighbour
            parts.append(
                f"nearest-neighbour over the same vectors {self.nearest_neighbour:.1%} "
                f"({gap:+.1%} for the router)"
            )
        if self.cross_validated is not None:
            parts.append(
                f"the head's cross-validated accuracy on the routes' examples {self.cross_validated:.1%}"
            )
        return "; ".join(parts)

    def markdown(self) -> str:
        """The report as a markdown table (rows: expected route; columns: decided route)."""
        names = [
            *self.routes,
            *sorted({d for row in self.confusion.values() for d in row} - set(self.routes)),
        ]
        lines = [
            f"accuracy **{self.accuracy:.1%}** ({self.correct}/{self.total}); decision time "
            f"(the samples embedded in one call) median {self.decision_ms_median:.1f} ms, "
            f"p90 {self.decision_ms_p90:.1f} ms",
            *([self.baselines()] if self.baselines() else []),
            "",
            "| expected \\ routed | " + " | ".join(names) + " | recall | suggested threshold |",
            "|---" * (len(names) + 3) + "|",
        ]
        for name in self.routes:
            row = self.confusion.get(name, {})
            stats = self.per_route[name]
            recall = "-" if stats.recall is None else f"{stats.recall:.0%}"
            threshold = "-" if stats.suggested_threshold is None else f"{stats.suggested_threshold:.2f}"
            lines.append(
                f"| {name} | "
                + " | ".join(str(row.get(n, 0)) for n in names)
                + f" | {recall} | {threshold} |"
            )
        return "\n".join(lines)


def _label(name: str | None) -> str:
    return "(none)" if name is None else name


def report(
    samples: Sequence[Sample], decisions: Sequence[RouteDecision], routes: Sequence[str]
) -> EvalReport:
    """The statistics of ``decisions`` against the samples' labels (pure)."""
    if not samples or len(samples) != len(decisions):
        raise InvalidOptions("evaluation needs one decision per sample, and at least one sample")
    confusion: dict[str, dict[str, int]] = {}
    misses: list[Miss] = []
    for sample, decision in zip(samples, decisions, strict=True):
        row = confusion.setdefault(_label(sample.route), {})
        row[_label(decision.route)] = row.get(_label(decision.route), 0) + 1
        if decision.route != sample.route:
            misses.append(
                Miss(text=_text(sample), expected=sample.route, got=decision.route, score=decision.score)
            )
    per_route = {}
    for name in routes:
        tp = confusion.get(name, {}).get(name, 0)
        support = sum(confusion.get(name, {}).values())
        predicted = sum(row.get(name, 0) for row in confusion.values())
        per_route[name] = RouteStats(
            support=support,
            precision=tp / predicted if predicted else None,
            recall=tp / support if support else None,
            suggested_threshold=suggest_threshold(name, samples, decisions),
        )
    times = sorted(d.seconds * 1000 for d in decisions)
    correct = len(samples) - len(misses)
    return EvalReport(
        total=len(samples),
        correct=correct,
        accuracy=correct / len(samples),
        routes=list(routes),
        confusion=confusion,
        per_route=per_route,
        decision_ms_median=statistics.median(times),
        decision_ms_p90=times[min(len(times) - 1, int(0.9 * len(times)))],
        misses=misses,
    )


def suggest_threshold(
    route: str, samples: Sequence[Sample], decisions: Sequence[RouteDecision]
) -> float | None:
    """The similarity threshold for ``route`` that best separates its samples from the others.

    Taken as the cut that maximises F1 of "similarity >= threshold means this route", placed
    halfway between neighbouring scores. None when the route has no scores or no samples.
    """
    scored = [
        (d.scores[route], s.route == route)
        for s, d in zip(samples, decisions, strict=True)
        if route in d.scores
    ]
    positives = sum(1 for _, is_route in scored if is_route)
    if not scored or not positives:
        return None
    scored.sort(reverse=True)
    best_f1, best_cut, tp = -1.0, None, 0
    for i, (score, is_route) in enumerate(scored):
        tp += is_route
        f1 = 2 * tp / (i + 1 + positives)
        nxt = scored[i + 1][0] if i + 1 < len(scored) else score - 0.05
        if f1 > best_f1 and (i + 1 == len(scored) or nxt < score):
            best_f1, best_cut = f1, (score + nxt) / 2
    return None if best_cut is None else round(best_cut, 3)


def load_samples(path: str | Path) -> list[Sample]:
    """Labelled samples from a JSONL file: ``{"text": "...", "route": "code"}`` per line.

    Args:
        path: The JSONL file, one labelled sample per line.

    Raises:
        InvalidOptions: The file is missing or a line is not a sample (its number named).
    """
    from pydantic import ValidationError

    samples = []
    expected = '{"text": "...", "route": "..."} lines'
    for where, data in jsonl_objects(str(path), "labelled file", expected):
        try:
            sample = Sample.model_validate(data)
        except ValidationError as e:
            raise InvalidOptions(
                f"{where}: expected a JSON object with text (or messages) and route: {e}"
            ) from None
        if (sample.text is None) == (sample.messages is None):
            raise InvalidOptions(f"{where}: give exactly one of text or messages")
        samples.append(sample)
    if not samples:
        raise InvalidOptions(f"{Path(path)} holds no samples")
    return samples


async def evaluate(router: Any, samples: Sequence[Sample]) -> EvalReport:
    """Route every sample once with ``router`` (a SemanticRouter) and report how it went.

    Args:
        router: The SemanticRouter to evaluate (only its routing runs; nothing is generated).
        samples: Labelled samples, e.g. from :func:`load_samples`.

    Returns:
        Accuracy and per-route figures.

    Raises:
        InvalidOptions: A label that is not one of the router's routes.
    """
    known = {r.name for r in router.routes.routes}
    unknown = sorted({s.route for s in samples if s.route is not None and s.route not in known})
    if unknown:
        raise InvalidOptions(f"labels {unknown} are not routes of this router ({sorted(known)})")
    decisions = await router.route_many([s.text for s in samples], messages=[s.messages for s in samples])
    out = report(samples, decisions, [r.name for r in router.routes.routes])
    nearest, held = await baselines(router, samples)
    return out.model_copy(update={"nearest_neighbour": nearest, "cross_validated": held})


async def baselines(router: Any, samples: Sequence[Sample]) -> tuple[float | None, float | None]:
    """Nearest-neighbour's accuracy on the samples (over the router's vectors) and the head's CV estimate.

    Nearest-neighbour sends each sample to the route of its most similar utterance, never to the
    default; the estimate is the probe's accuracy on the routes' examples, each scored by a probe
    fitted without it (None without a probe).

    Args:
        router: The SemanticRouter evaluated.
        samples: The labelled samples.

    Returns:
        (nearest-neighbour accuracy or None without utterances, cross-validated accuracy or None).
    """
    from unillm.semantic.router import embed_cached, routing_text
    from unillm.semantic.vectors import unit_rows

    index = await router.index()
    owners = [r.name for r in router.routes.routes for _ in r.utterances]
    nearest = None
    if owners:
        texts = [routing_text(s.text, s.messages, router.text) for s in samples]
        queries = unit_rows(await embed_cached(router.embedder, texts))
        examples = unit_rows(
            await embed_cached(router.embedder, [u for r in router.routes.routes for u in r.utterances])
        )
        best = (queries @ examples.T).argmax(axis=1)
        nearest = sum(owners[b] == s.route for b, s in zip(best, samples, strict=True)) / len(samples)
    held = None
    if index.probe is not None:
        probabilities, labels = index.held_out()
        held = float((probabilities.argmax(axis=1) == labels).mean())
    return nearest, held


def _text(sample: Sample) -> str:
    if sample.text is not None:
        return sample.text
    return json.dumps(sample.messages)[:200]
