"""Fit a router's scoring weights and thresholds to labelled prompts: ``router.calibrate(samples)``.

    report = await router.calibrate(load_samples("labelled.jsonl"))
    print(report.before, "->", report.after, report.scoring, report.threshold)

Every sample is embedded once; each :class:`Scoring` of a small grid is then tried on the same
vectors, with the threshold (shared by the routes declared without one) that routes the most
samples right. Samples labelled with the default route teach it what belongs to no route.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict

from unillm.errors import InvalidOptions
from unillm.semantic.decide import SignalIndex, decide
from unillm.semantic.scoring import Scoring, best_accuracy_cut
from unillm.semantic.vectors import numpy_module

BLENDS = (0.3, 0.5, 0.7, 1.0)
PRIORS: tuple[float | None, ...] = (None, 0.0, 0.1, 0.3, 0.5)


class Calibration(BaseModel):
    """What :meth:`SemanticRouter.calibrate` chose, and the samples' accuracy before and after."""

    model_config = ConfigDict(frozen=True)

    samples: int
    before: float
    after: float
    scoring: Scoring
    threshold: float | None  # shared by the routes declared without one; None: there are none
    thresholds: dict[str, float]  # every embedding signal's threshold now in use


def check_labels(router: Any, samples: Sequence[Any]) -> None:
    """Refuse no samples, or labels that are not routes of ``router``."""
    if not samples:
        raise InvalidOptions("calibration needs labelled samples")
    known = {r.name for r in router.routes.routes}
    unknown = sorted({s.route for s in samples if s.route is not None and s.route not in known})
    if unknown:
        raise InvalidOptions(f"labels {unknown} are not routes of this router ({sorted(known)})")


async def calibrate(
    router: Any,
    samples: Sequence[Any],
    texts: list[str],
    queries: list[list[float]],
    vectors: list[list[float]],
) -> Calibration:
    """Fit ``router`` (a SemanticRouter) to labelled samples; see :meth:`SemanticRouter.calibrate`.

    Args:
        router: The router to fit.
        samples: The labelled samples (checked with :func:`check_labels`).
        texts: Each sample's routing text.
        queries: Each routing text's vector.
        vectors: The vectors of the router's ``index_texts``.
    """
    labels = [s.route if s.route is not None else router.routes.default for s in samples]
    before = _accuracy(router, await router.index(), texts, labels, queries)
    signals = router.routes.embedding_signals()
    unset = [s.name for s in signals if s.threshold is None]
    best: tuple[float, Scoring, float | None] | None = None
    center, reject = router.scoring.center, router.scoring.reject
    grid = [Scoring(head="probe", center=center, reject=reject)] if router.scoring.head != "blend" else []
    grid += [
        Scoring(head="blend", blend=blend, prior=prior, center=center, reject=reject)
        for blend in BLENDS
        for prior in PRIORS
    ]
    for scoring in grid:
        index = SignalIndex.build(signals, vectors, scoring, thresholds={})
        if scoring.head == "probe" and index.probe is None:
            continue
        accuracy, cut = _best_threshold(router, index, texts, labels, queries, unset)
        if best is None or accuracy > best[0]:
            best = (accuracy, scoring, cut)
    assert best is not None
    after, scoring, cut = best
    if after <= before:  # keep what the router had: the grid found nothing better
        return Calibration(
            samples=len(samples),
            before=before,
            after=before,
            scoring=router.scoring,
            threshold=None,
            thresholds=await router.thresholds(),
        )
    router.rescore(scoring, dict.fromkeys(unset, cut) if cut is not None else {})
    return Calibration(
        samples=len(samples),
        before=before,
        after=after,
        scoring=scoring,
        threshold=cut,
        thresholds=await router.thresholds(),
    )


def _accuracy(
    router: Any, index: SignalIndex, texts: list[str], labels: list[str | None], queries: list[list[float]]
) -> float:
    right = sum(
        decide(router.routes, t, index.scores(q), thresholds=index.thresholds).route == label
        for t, label, q in zip(texts, labels, queries, strict=True)
    )
    return right / len(texts)


def _best_threshold(
    router: Any,
    index: SignalIndex,
    texts: list[str],
    labels: list[str | None],
    queries: list[list[float]],
    unset: list[str],
) -> tuple[float, float | None]:
    """The accuracy of the best shared threshold for the ``unset`` signals, and that threshold.

    With the threshold at -1 every unset signal fires; at 2 none does. A sample whose winning
    score reaches the cut keeps the first decision, below it gets the second (a lower-scoring
    route cannot pass a cut the winner missed), so one pass over the sorted scores tries every cut.
    """
    np = numpy_module()
    if not unset:
        return _accuracy(router, index, texts, labels, queries), None
    scores, kept, refused = [], [], []
    for text, label, query in zip(texts, labels, queries, strict=True):
        similarities = index.scores(query)
        loose = decide(router.routes, text, similarities, thresholds=dict.fromkeys(unset, -1.0))
        strict = decide(router.routes, text, similarities, thresholds=dict.fromkeys(unset, 2.0))
        changes = loose.route != strict.route and loose.score is not None
        scores.append(loose.score if changes and loose.score is not None else -1.0)
        kept.append(loose.route == label)
        refused.append(strict.route == label)
    cut, accuracy = best_accuracy_cut(np.asarray(scores), np.asarray(kept), np.asarray(refused))
    return accuracy, round(cut, 4)
