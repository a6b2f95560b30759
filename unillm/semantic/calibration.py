"""Fit a router's scoring weights and thresholds to labelled prompts: ``router.calibrate(samples)``.

    report = await router.calibrate(load_samples("labelled.jsonl"))
    print(report.before, "->", report.after, report.scoring, report.threshold)

Every sample is embedded once; each :class:`Scoring` of a small grid is then tried on the same
vectors, with the threshold (shared by the routes declared without one) that routes the most
samples right. Samples labelled with the default route teach it what belongs to no route.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

from pydantic import BaseModel, ConfigDict

from unillm.errors import InvalidOptions
from unillm.semantic.decide import SignalIndex, decide, index_texts
from unillm.semantic.scoring import Scoring, balanced_weights, best_accuracy_cut
from unillm.semantic.vectors import numpy_module

BLENDS = (0.3, 0.5, 0.7, 1.0)
PRIORS: tuple[float | None, ...] = (None, 0.0, 0.1, 0.3, 0.5)


class Calibration(BaseModel):
    """What :meth:`SemanticRouter.calibrate` chose, and the samples' accuracy before and after.

    With samples both in and out of scope (labelled with the default route), ``before`` and
    ``after`` are balanced (``balanced`` True): the mean of the in-scope samples' accuracy and the
    out-of-scope ones' recall, so the cut does not lean towards whichever kind was labelled more.
    """

    model_config = ConfigDict(frozen=True)

    samples: int
    before: float
    after: float
    balanced: bool = False
    scoring: Scoring
    threshold: float | None  # shared by the routes declared without one; None: there are none
    thresholds: dict[str, float]  # every embedding signal's threshold now in use


class _Labelled(NamedTuple):
    """The samples as calibration reads them: each one's routing text, label and text's vector."""

    texts: list[str]
    labels: list[str | None]
    queries: list[list[float]]


def check_labels(router: Any, samples: Sequence[Any]) -> None:
    """Refuse no samples, or labels that are not routes of ``router``."""
    if not samples:
        raise InvalidOptions("calibration needs labelled samples")
    known = {r.name for r in router.routes.routes}
    unknown = sorted({s.route for s in samples if s.route is not None and s.route not in known})
    if unknown:
        raise InvalidOptions(f"labels {unknown} are not routes of this router ({sorted(known)})")


def check_recall(router: Any, samples: Sequence[Any], recall: float | None) -> None:
    """Refuse a recall outside (0, 1], or one asked of samples none of which is out of scope."""
    if recall is None:
        return
    if isinstance(recall, bool) or not isinstance(recall, (int, float)) or not 0 < recall <= 1:
        raise InvalidOptions(f"out_of_scope_recall must be a share in (0, 1], got {recall!r}")
    if not any(s.route is None or s.route == router.routes.default for s in samples):
        raise InvalidOptions(
            "out_of_scope_recall needs out-of-scope samples: label some with the default route "
            f"({router.routes.default!r}) or None"
        )


async def calibrate(
    router: Any,
    samples: Sequence[Any],
    texts: list[str],
    queries: list[list[float]],
    vectors: list[list[float]],
    *,
    recall: float | None = None,
) -> Calibration:
    """Fit ``router`` (a SemanticRouter) to labelled samples; see :meth:`SemanticRouter.calibrate`.

    Args:
        router: The router to fit.
        samples: The labelled samples (checked with :func:`check_labels`).
        texts: Each sample's routing text.
        queries: Each routing text's vector.
        vectors: The vectors of the router's ``index_texts``.
        recall: The least share of the out-of-scope samples the cut must refuse (None: the cut
            with the best balanced accuracy; given, the router takes that cut even where it
            routes fewer samples right than before).
    """
    np = numpy_module()
    labels = [s.route if s.route is not None else router.routes.default for s in samples]
    outside = np.asarray([label is None or label == router.routes.default for label in labels])
    weights = balanced_weights(outside)
    balanced = bool(outside.any() and not outside.all())
    labelled = _Labelled(texts, labels, queries)
    before = _accuracy(router, await router.index(), labelled, weights)
    bar = before if recall is None else -1.0  # a recall asked for is taken whatever it costs
    if router.scoring.head != "blend":
        learned = await _learn(router, labelled, bar, recall)
        if learned is not None:
            return learned.model_copy(update={"balanced": balanced, "before": before})
    after, scoring, cut = _blend_grid(router, labelled, vectors, weights, recall)
    unset = [s.name for s in router.routes.embedding_signals() if s.threshold is None]
    if after <= bar:  # keep what the router had: the grid found nothing better
        scoring, cut, after = router.scoring, None, before
    else:
        router.rescore(scoring, dict.fromkeys(unset, cut) if cut is not None else {})
    return Calibration(
        samples=len(samples),
        before=before,
        after=after,
        balanced=balanced,
        scoring=scoring,
        threshold=cut,
        thresholds=await router.thresholds(),
    )


def _blend_grid(
    router: Any, labelled: _Labelled, vectors: list[list[float]], weights: Any, recall: float | None
) -> tuple[float, Scoring, float | None]:
    """The blend weights of the grid, and shared cut, that route the (weighted) most samples right."""
    signals = router.routes.embedding_signals()
    unset = [s.name for s in signals if s.threshold is None]
    best: tuple[float, Scoring, float | None] | None = None
    center, reject = router.scoring.center, router.scoring.reject
    for scoring in (
        Scoring(head="blend", blend=blend, prior=prior, center=center, reject=reject)
        for blend in BLENDS
        for prior in PRIORS
    ):
        index = SignalIndex.build(signals, vectors, scoring, thresholds={})
        accuracy, cut = _best_threshold(router, index, labelled, unset, weights, recall)
        if best is None or accuracy > best[0]:
            best = (accuracy, scoring, cut)
    assert best is not None
    return best


async def _learn(router: Any, labelled: _Labelled, before: float, recall: float | None) -> Calibration | None:
    """The probe taught by the samples too: each becomes an example of its route, and the shared
    cut is the one with the most right answers on the cross-validated examples (and on samples
    that belong to no route).

    Samples of a default route declared without examples belong to no route: they teach the cut,
    not the probe. (Taught as a class of their own, out-of-scope prompts, which are alike only in
    fitting no route, made a probe whose cut held on its folds but not on new prompts: on
    CLINC150 at 5 examples per route, one seed of 5 then refused 18% of new out-of-scope
    prompts and another routed 43% of new in-scope ones right; this way every seed routes 66-74%
    right and refuses 69-81%: ``benchmarks/routing_accuracy.py``.)

    None when the probe cannot be used (too few examples) or does no better than ``before``.
    """
    np = numpy_module()
    texts, labels, queries = labelled
    labels = _outside_as_none(router, labels)
    routes = _taught(router, texts, labels)
    new = router.routes.model_copy(update={"routes": routes})
    signals = new.embedding_signals()
    vectors = await router.embed_texts(index_texts(signals))
    scoring = Scoring(head="probe", center=router.scoring.center, reject=router.scoring.reject)
    index = SignalIndex.build(signals, vectors, scoring, thresholds={})
    if index.probe is None:
        return None
    held, classes = index.held_out()
    names = [index.spans[i][0].name for i in index.heads]
    default = f"{new.default}#utterances" if new.default is not None else None
    refused_right = np.asarray([names[c] == default for c in classes])
    top, kept = held.max(axis=1), held.argmax(axis=1) == classes
    nowhere = [q for q, label in zip(queries, labels, strict=True) if label is None]
    if nowhere:
        outside = index.probe.probabilities(_centred(index, nowhere)).max(axis=1)
        top = np.concatenate([top, outside])
        kept = np.concatenate([kept, np.zeros(len(outside), dtype=bool)])
        refused_right = np.concatenate([refused_right, np.ones(len(outside), dtype=bool)])
    cut, after = best_accuracy_cut(
        top, kept, refused_right, balanced_weights(refused_right), min_refused=recall
    )
    if after <= before:
        return None
    unset = [s.name for s in signals if s.threshold is None]
    router.routes = new
    router.rescore(scoring, dict.fromkeys(unset, round(cut, 4)))
    return Calibration(
        samples=len(texts),
        before=before,
        after=after,
        scoring=scoring,
        threshold=round(cut, 4) if unset else None,
        thresholds=await router.thresholds(),
    )


def _outside_as_none(router: Any, labels: list[str | None]) -> list[str | None]:
    """``labels`` with the default route's as None where that route has no examples of its own."""
    default = next((r for r in router.routes.routes if r.name == router.routes.default), None)
    if default is None or default.utterances or default.when is not None:
        return labels
    return [None if label == default.name else label for label in labels]


def _taught(router: Any, texts: list[str], labels: list[str | None]) -> tuple[Any, ...]:
    """The router's routes with each labelled text added to its route's examples."""
    taught: dict[str, list[str]] = {}
    for text, label in zip(texts, labels, strict=True):
        if label is not None:
            taught.setdefault(label, []).append(text)
    return tuple(
        r.model_copy(update={"utterances": tuple(dict.fromkeys([*r.utterances, *taught[r.name]]))})
        if r.name in taught and r.when is None
        else r
        for r in router.routes.routes
    )


def _centred(index: SignalIndex, rows: list[list[float]]) -> Any:
    from unillm.semantic.vectors import unit_rows

    return unit_rows(unit_rows(rows) - index.center)


def _accuracy(router: Any, index: SignalIndex, labelled: _Labelled, weights: Any) -> float:
    right = [
        decide(router.routes, t, index.scores(q), thresholds=index.thresholds).route == label
        for t, label, q in zip(*labelled, strict=True)
    ]
    return float((numpy_module().asarray(right) * weights).sum() / weights.sum())


def _best_threshold(
    router: Any,
    index: SignalIndex,
    labelled: _Labelled,
    unset: list[str],
    weights: Any,
    recall: float | None,
) -> tuple[float, float | None]:
    """The accuracy of the best shared threshold for the ``unset`` signals, and that threshold.

    With the threshold at -1 every unset signal fires; at 2 none does. A sample whose winning
    score reaches the cut keeps the first decision, below it gets the second (a lower-scoring
    route cannot pass a cut the winner missed), so one pass over the sorted scores tries every cut.
    """
    np = numpy_module()
    if not unset:
        return _accuracy(router, index, labelled, weights), None
    scores, kept, refused = [], [], []
    for text, label, query in zip(*labelled, strict=True):
        similarities = index.scores(query)
        loose = decide(router.routes, text, similarities, thresholds=dict.fromkeys(unset, -1.0))
        strict = decide(router.routes, text, similarities, thresholds=dict.fromkeys(unset, 2.0))
        changes = loose.route != strict.route and loose.score is not None
        scores.append(loose.score if changes and loose.score is not None else -1.0)
        kept.append(loose.route == label)
        refused.append(strict.route == label)
    cut, accuracy = best_accuracy_cut(
        np.asarray(scores), np.asarray(kept), np.asarray(refused), weights, min_refused=recall
    )
    return accuracy, round(cut, 4)
