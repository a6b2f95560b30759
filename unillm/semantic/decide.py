"""The routing decision, as pure functions: similarities in, a :class:`RouteDecision` out.

    index = SignalIndex.build(signals, vectors_of_index_texts)   # once per embedder
    decision = decide(routes, text, index.scores(query_vector), thresholds=index.thresholds)

Embedding signals fire when their similarity reaches their threshold, keyword signals when
the text holds their words; a route matches when its condition holds. Among matching routes
the highest ``priority`` wins, then the highest similarity (a keyword-only match counts as 1.0).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cache
from typing import TYPE_CHECKING

from unillm.results import RouteDecision
from unillm.semantic.head import Probe, cross_validated, fit_probe
from unillm.semantic.routes import DEFAULT_THRESHOLD, Condition, EmbeddingSignal, KeywordSignal, RouteSet
from unillm.semantic.scoring import NO_REJECTION, Scoring, best_cut, fitted_threshold
from unillm.semantic.vectors import numpy_module, unit_rows

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    Matrix = npt.NDArray[np.float32]
    Labels = npt.NDArray[np.int64]


def index_texts(signals: Sequence[EmbeddingSignal]) -> list[str]:
    """What an index embeds, in order: every signal's candidates, then the blend signals' descriptions."""
    return [c for s in signals for c in s.candidates] + [
        s.description for s in signals if s.aggregation == "blend" and s.description
    ]


@dataclass(frozen=True)
class ScorePlan:
    """What scoring a query reads from a :class:`SignalIndex`, made once per index (not per query).

    ``names`` are the signals' names; ``starts`` each signal's first row (for ``reduceat``);
    the blend rule's weights as columns (best example, centroid, description, and the
    ``1 + prior`` it divides by); ``count`` each signal's candidates; ``is_blend``/``is_mean``
    the aggregation of each signal; ``heads`` the probe's signals; ``only_probe``/``only_blend``
    when one head scores every signal.
    """

    names: tuple[str, ...]
    starts: Labels
    best_weight: Matrix
    centroid_weight: Matrix
    prior_weight: Matrix
    scale: Matrix
    count: Matrix
    is_blend: Matrix
    is_mean: Matrix
    heads: Labels
    only_probe: bool
    only_blend: bool

    @classmethod
    def of(cls, index: SignalIndex) -> ScorePlan:
        """The plan of an index (the same arithmetic as scoring from the index's fields).

        Args:
            index: The index to score with.
        """
        np = numpy_module()
        weights = index.weights if len(index.spans) else np.zeros((0, 4), dtype=np.float32)
        every_head = len(index.heads) == len(index.spans)
        return cls(
            names=tuple(s.name for s, _, _ in index.spans),
            starts=np.asarray([a for _, a, _ in index.spans], dtype=np.intp),
            best_weight=weights[:, 0].copy(),
            centroid_weight=1 - weights[:, 0],
            prior_weight=weights[:, 1].copy(),
            scale=1 + weights[:, 1],
            count=weights[:, 3].copy(),
            is_blend=weights[:, 2] == 2,  # 0: max, 1: mean, 2: blend
            is_mean=weights[:, 2] == 1,
            heads=np.asarray(index.heads, dtype=np.intp),
            only_probe=index.probe is not None and every_head,
            only_blend=index.probe is None and every_head,
        )


@dataclass(frozen=True)
class SignalIndex:
    """Every embedding signal's candidates as unit rows, for one embedder, and how each scores.

    ``matrix`` holds the candidates as they are (``max``/``mean`` signals compare with them),
    ``centred`` the same rows after subtracting ``center`` (``blend`` signals compare with
    those, with their ``centroids`` and ``priors``). ``thresholds`` are the fitted ones (for
    signals declared without a threshold). ``probe`` (when the scoring uses it) replaces the
    blend signals' scores by its probabilities; it learns from ``examples`` (the blend signals'
    centred candidates and descriptions) labelled ``labels`` (the blend signal's position in ``heads``).
    ``plan`` is what :meth:`score_vector` reads, made once when the index is (and by ``replace``).
    """

    matrix: Matrix
    spans: tuple[tuple[EmbeddingSignal, int, int], ...]  # signal, first row, end row
    scoring: Scoring
    center: Matrix
    centred: Matrix
    centroids: Matrix  # one row per signal (zero unless blend)
    priors: Matrix  # one row per signal: the description's centred unit vector (zero if none)
    weights: Matrix  # per signal: blend weight, prior weight, kind (0 max, 1 mean, 2 blend), candidates
    thresholds: dict[str, float]
    probe: Probe | None = None
    heads: tuple[int, ...] = ()  # the positions in spans of the blend signals (the probe's classes)
    examples: Matrix | None = None
    labels: Labels | None = None
    plan: ScorePlan = field(init=False, repr=False, compare=False)  # built with the index

    @property
    def dimension(self) -> int:
        """Length of the vectors."""
        return int(self.matrix.shape[1])

    @classmethod
    def build(
        cls,
        signals: Sequence[EmbeddingSignal],
        vectors: Sequence[Sequence[float]],
        scoring: Scoring | None = None,
        thresholds: Mapping[str, float] | None = None,
    ) -> SignalIndex:
        """An index from the vectors of :func:`index_texts` (``signals``' texts, in that order).

        Args:
            signals: The embedding signals.
            vectors: One vector per text of ``index_texts(signals)``.
            scoring: The weights of blend signals (default :class:`Scoring`).
            thresholds: Thresholds for signals declared without one; None fits them (leave-one-out).
        """
        np = numpy_module()
        scoring = scoring or Scoring()
        texts = index_texts(signals)
        if not signals and not vectors:
            empty = np.zeros((0, 0), dtype=np.float32)
            return cls(empty, (), scoring, np.zeros(0, dtype=np.float32), empty, empty, empty, empty, {})
        if len(texts) != len(vectors):
            raise ValueError(f"expected {len(texts)} candidate vectors, got {len(vectors)}")
        rows = unit_rows(vectors)
        spans, start = [], 0
        for s in signals:
            spans.append((s, start, start + len(s.candidates)))
            start += len(s.candidates)
        matrix, described = rows[:start], iter(rows[start:])
        blends = [(a, b) for s, a, b in spans if s.aggregation == "blend"]
        center = np.zeros(matrix.shape[1], dtype=np.float32)
        if scoring.center and len(blends) >= 2:
            center = np.concatenate([matrix[a:b] for a, b in blends]).mean(axis=0)
        centred = _centre(matrix, center)
        centroids = np.zeros((len(spans), matrix.shape[1]), dtype=np.float32)
        priors = np.zeros_like(centroids)
        weights = np.zeros((len(spans), 4), dtype=np.float32)
        for i, (s, a, b) in enumerate(spans):
            weights[i, 2:] = (("max", "mean", "blend").index(s.aggregation), b - a)
            if s.aggregation != "blend":
                continue
            centroids[i] = unit_rows([centred[a:b].sum(axis=0)])[0]
            weights[i, 0] = scoring.blend
            if s.description:
                priors[i] = _centre(next(described)[None, :], center)[0]
                weights[i, 1] = scoring.prior_weight(b - a)
        heads = tuple(i for i, (s, _, _) in enumerate(spans) if s.aggregation == "blend")
        probe, examples, labels = None, None, None
        if scoring.uses_probe([spans[i][2] - spans[i][1] for i in heads]):
            examples, labels = _probe_examples(spans, heads, centred, priors)
            probe = fit_probe(examples, labels, len(heads))
        index = cls(matrix, tuple(spans), scoring, center, centred, centroids, priors, weights, {})
        if probe is not None:
            with_probe = replace(index, probe=probe, heads=heads, examples=examples, labels=labels)
            if scoring.head == "probe" or with_probe.probe_beats_blend(index):
                index = with_probe
        index.thresholds.update(index.fit_thresholds() if thresholds is None else thresholds)
        return index

    def __post_init__(self) -> None:
        object.__setattr__(self, "plan", ScorePlan.of(self))

    def scores(self, query: Sequence[float]) -> dict[str, float]:
        """Each signal's similarity to ``query``."""
        return dict(zip(self.plan.names, self.score_vector(query).tolist(), strict=True))

    def score_vector(self, query: Sequence[float]) -> Matrix:
        """Each signal's similarity to ``query``, in the order of ``spans``.

        Reads only what :class:`ScorePlan` prepared when the index was built: a few
        matrix-vector products and sums, nothing fitted or sliced per query.
        """
        np = numpy_module()
        plan = self.plan
        q = np.asarray(query, dtype=np.float32)
        if q.ndim != 1 or q.shape[0] != self.dimension:
            raise ValueError(
                f"query has {q.shape[-1] if q.ndim else 0} dimensions, the index {self.dimension}"
            )
        q = _unit(q)
        qc = _unit(q - self.center)
        probe = self.probe
        if probe is not None and plan.only_probe:  # the probe scores every signal
            return probe.probabilities(qc[None, :])[0]  # type: ignore[no-any-return]
        blend = (
            plan.best_weight * np.maximum.reduceat(self.centred @ qc, plan.starts)
            + plan.centroid_weight * (self.centroids @ qc)
            + plan.prior_weight * (self.priors @ qc)
        ) / plan.scale
        if plan.only_blend:  # every signal is a blend
            return blend  # type: ignore[no-any-return]
        raw = self.matrix @ q
        best = np.maximum.reduceat(raw, plan.starts)
        mean = np.add.reduceat(raw, plan.starts) / plan.count
        out = np.where(plan.is_blend, blend, np.where(plan.is_mean, mean, best))
        if probe is not None:
            out[plan.heads] = probe.probabilities(qc[None, :])[0]
        return out  # type: ignore[no-any-return]

    def probe_beats_blend(self, blend: SignalIndex) -> bool:
        """True when the probe's cross-validated accuracy on the utterances beats the blend rule's
        leave-one-out accuracy on them (each example scored against every route without itself).

        Args:
            blend: The same index without the probe.
        """
        np = numpy_module()
        own, rivals = blend.leave_one_out()
        names = [self.spans[i][0].name for i in self.heads]
        blend_right = np.concatenate([own[n] > rivals[n] for n in names if n in own and n in rivals])
        held, labels = self.held_out()
        utterances = sum(self.spans[i][2] - self.spans[i][1] for i in self.heads)
        probe_right = held[:utterances].argmax(axis=1) == labels[:utterances]
        return bool(probe_right.mean() > blend_right.mean())

    def held_out(self) -> tuple[Matrix, Labels]:
        """The probe's cross-validated probabilities of its examples, and their labels.

        Raises:
            ValueError: The index has no probe.
        """
        if self.probe is None or self.examples is None or self.labels is None:
            raise ValueError("this index scores without a probe")
        return cross_validated(self.examples, self.labels, len(self.heads)), self.labels

    def leave_one_out(self) -> tuple[dict[str, Matrix], dict[str, Matrix]]:
        """Per signal: its candidates' scores without themselves, and the best other blend signal's.

        The first are what unseen prompts of the signal look like to it; the second what a
        prompt that is not the signal's looks like to the route it would be mistaken for.
        Signals with one candidate have no own scores.
        """
        np = numpy_module()
        own: dict[str, Matrix] = {}
        rivals: dict[str, Matrix] = {}
        gram_raw, gram = self.matrix @ self.matrix.T, self.centred @ self.centred.T
        blends = [i for i, (s, _, _) in enumerate(self.spans) if s.aggregation == "blend"]
        for i, (s, a, b) in enumerate(self.spans):
            if b - a >= 2:
                own[s.name] = np.array([self._without(i, a, b, r, gram_raw, gram) for r in range(a, b)])
            others = [j for j in blends if j != i]
            if s.aggregation == "blend" and others:
                scores = np.stack([self.score_vector(self.matrix[r]) for r in range(a, b)])
                rivals[s.name] = scores[:, others].max(axis=1)
        return own, rivals

    def _without(self, i: int, a: int, b: int, row: int, gram_raw: Matrix, gram: Matrix) -> float:
        np = numpy_module()
        rest = [r for r in range(a, b) if r != row]
        signal = self.spans[i][0]
        if signal.aggregation == "max":
            return float(gram_raw[row, rest].max())
        if signal.aggregation == "mean":
            return float(gram_raw[row, rest].mean())
        centroid = unit_rows([self.centred[rest].sum(axis=0)])[0]
        blend, prior = self.weights[i, :2]
        return float(
            blend * gram[row, rest].max()
            + (1 - blend) * np.dot(centroid, self.centred[row])
            + prior * np.dot(self.priors[i], self.centred[row])
        ) / (1 + float(prior))

    def fit_thresholds(self) -> dict[str, float]:
        """The threshold of every signal declared without one: a cut shared by all of them.

        Routes' utterance signals get none (``NO_REJECTION``) unless the scoring asks to reject;
        then the probe's cut separates its right from its wrong cross-validated answers, the
        blend's separates leave-one-out own scores from the other routes'.
        """
        unset = [s.name for s, _, _ in self.spans if s.threshold is None]
        if not unset:
            return {}
        if not self.scoring.reject:
            out = {
                s.name: NO_REJECTION for s, _, _ in self.spans if s.name in unset and s.aggregation == "blend"
            }
            unset = [n for n in unset if n not in out]
            if not unset:
                return out
        else:
            out = {}
        if self.probe is not None and self.scoring.reject:
            np = numpy_module()
            held, labels = self.held_out()
            top, right = held.max(axis=1), held.argmax(axis=1) == labels
            cut = best_cut(top[right], top[~right]) if (~right).any() else float(np.quantile(top, 0.1))
            out |= {
                self.spans[i][0].name: round(cut, 4) for i in self.heads if self.spans[i][0].name in unset
            }
            unset = [n for n in unset if n not in out]
            if not unset:
                return out
        own, rivals = self.leave_one_out()
        cut = fitted_threshold(
            [own[n] for n in unset if n in own], [rivals[n] for n in unset if n in rivals], DEFAULT_THRESHOLD
        )
        return out | dict.fromkeys(unset, cut)

    def threshold(self, signal: EmbeddingSignal) -> float:
        """The signal's threshold: its own, else the fitted one."""
        if signal.threshold is not None:
            return signal.threshold
        return self.thresholds.get(signal.name, DEFAULT_THRESHOLD)


def _probe_examples(
    spans: Sequence[tuple[EmbeddingSignal, int, int]], heads: Sequence[int], centred: Matrix, priors: Matrix
) -> tuple[Matrix, Labels]:
    """The probe's examples (blend signals' centred candidates, then descriptions), labelled by head."""
    np = numpy_module()
    parts = [centred[spans[i][1] : spans[i][2]] for i in heads]
    titled = [c for c, i in enumerate(heads) if spans[i][0].description]
    examples = np.concatenate([*parts, priors[[heads[c] for c in titled]]])
    labels = np.concatenate(
        [np.full(len(p), c, dtype=np.int64) for c, p in enumerate(parts)]
        + [np.asarray(titled, dtype=np.int64)]
    )
    return examples, labels


def _centre(rows: Matrix, center: Matrix) -> Matrix:
    return unit_rows(rows - center)


def _unit(vector: Matrix) -> Matrix:
    """One vector scaled to length 1 (a zero vector stays zero), without building a matrix."""
    norm = float(vector @ vector) ** 0.5
    return vector / norm if norm > 0 else vector


@cache
def _keyword_pattern(keyword: str, case_sensitive: bool) -> re.Pattern[str]:
    return re.compile(rf"(?<!\w){re.escape(keyword)}(?!\w)", 0 if case_sensitive else re.IGNORECASE)


def keyword_fires(signal: KeywordSignal, text: str) -> bool:
    """True when ``text`` satisfies the keyword signal (whole words or phrases)."""
    hits = [bool(_keyword_pattern(k, signal.case_sensitive).search(text)) for k in signal.keywords]
    if signal.mode == "all":
        return all(hits)
    if signal.mode == "none":
        return not any(hits)
    return any(hits)


@dataclass(frozen=True)
class DecisionPlan:
    """What :func:`decide` reads from a route set, built once per set (no pydantic work per decision).

    ``keywords`` are the keyword signals, ``embeddings`` each embedding signal's name and declared
    threshold, ``routes`` each route's name, priority, condition, the signals it uses and, when
    its condition is one signal (a simple route's utterances or keywords alone), that signal.
    """

    keywords: tuple[KeywordSignal, ...]
    embeddings: tuple[tuple[str, float | None], ...]
    routes: tuple[tuple[str, int, Condition | None, frozenset[str], str | None], ...]


_PLANS: dict[int, tuple[RouteSet, DecisionPlan]] = {}  # by id of the (frozen) route set
PLAN_CACHE_SIZE = 64


def decision_plan(routes: RouteSet) -> DecisionPlan:
    """The route set's :class:`DecisionPlan`, cached by identity (route sets are frozen).

    Args:
        routes: The routes.

    Returns:
        Its signals and conditions, ready for :func:`decide`.
    """
    hit = _PLANS.get(id(routes))
    if hit is not None and hit[0] is routes:
        return hit[1]
    signals = routes.all_signals()
    conditions = [(r, r.condition()) for r in routes.routes]
    plan = DecisionPlan(
        keywords=tuple(s for s in signals if isinstance(s, KeywordSignal)),
        embeddings=tuple((s.name, s.threshold) for s in signals if isinstance(s, EmbeddingSignal)),
        routes=tuple(
            (
                r.name,
                r.priority,
                c,
                frozenset(c.signals()) if c is not None else frozenset(),
                c.signal if c is not None else None,
            )
            for r, c in conditions
        ),
    )
    while len(_PLANS) >= PLAN_CACHE_SIZE:
        _PLANS.pop(next(iter(_PLANS)))
    _PLANS[id(routes)] = (routes, plan)
    return plan


def _route_score(
    used: frozenset[str], condition: Condition, fired: set[str], similarities: Mapping[str, float]
) -> tuple[float | None, float | None]:
    """A route's best similarity (None without one) and, when its condition holds, its match score."""
    sims = [similarities[s] for s in used if s in similarities]
    best = max(sims) if sims else None
    if not condition.holds(fired):
        return best, None
    matched = used & fired
    if any(s not in similarities for s in matched):  # a keyword signal: an explicit match
        return best, 1.0
    return best, max((similarities[s] for s in matched), default=max(sims, default=0.0))


def decide(
    routes: RouteSet,
    text: str,
    similarities: Mapping[str, float],
    seconds: float = 0.0,
    thresholds: Mapping[str, float] | None = None,
) -> RouteDecision:
    """Pick the route for ``text`` given each embedding signal's similarity.

    Args:
        routes: The routes.
        text: The routing text (keyword signals look at it).
        similarities: Each embedding signal's similarity, by signal name.
        seconds: How long the decision took, recorded on it.
        thresholds: Fitted thresholds of signals declared without one (else 0.4).
    """
    plan = decision_plan(routes)
    fitted = thresholds or {}
    fired = {s.name for s in plan.keywords if keyword_fires(s, text)} if plan.keywords else set()
    for name, declared in plan.embeddings:
        threshold = declared if declared is not None else fitted.get(name, DEFAULT_THRESHOLD)
        if similarities.get(name, float("-inf")) >= threshold:
            fired.add(name)
    scores: dict[str, float] = {}
    best: tuple[int, float, str] | None = None
    for name, priority, condition, used, single in plan.routes:
        if single is not None:  # one signal: its similarity, matched when it fired
            sim = similarities.get(single)
            if sim is not None:
                scores[name] = sim
            score = (1.0 if sim is None else sim) if single in fired else None
        elif condition is None:
            sims = [similarities[s] for s in used if s in similarities]
            if sims:
                scores[name] = max(sims)
            continue
        else:
            top, score = _route_score(used, condition, fired, similarities)
            if top is not None:
                scores[name] = top
        if score is not None and (best is None or (priority, score) > best[:2]):
            best = (priority, score, name)
    if best is not None:
        return RouteDecision(
            route=best[2],
            reason="matched",
            score=best[1],
            scores=scores,
            signals=tuple(sorted(fired)),
            seconds=seconds,
        )
    return RouteDecision(
        route=routes.default, reason="default", scores=scores, signals=tuple(sorted(fired)), seconds=seconds
    )
