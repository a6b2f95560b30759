"""The routing decision, as pure functions: similarities in, a :class:`RouteDecision` out.

    index = SignalIndex.build(routes, vectors_by_signal)     # once per embedder
    decision = decide(routes, text, index.scores(query_vector))

Embedding signals fire when their similarity reaches their threshold, keyword signals when
the text holds their words; a route matches when its condition holds. Among matching routes
the highest ``priority`` wins, then the highest similarity (a keyword-only match counts as 1.0).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Any

from unillm.results import RouteDecision
from unillm.semantic.routes import EmbeddingSignal, KeywordSignal, RouteSet

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    Matrix = npt.NDArray[np.float32]


def _numpy() -> Any:
    try:
        import numpy
    except ImportError:  # pragma: no cover - the extra installs it
        from unillm.errors import InvalidOptions

        raise InvalidOptions("semantic routing needs numpy: pip install 'unillm[routing]'") from None
    return numpy


def unit_rows(vectors: Sequence[Sequence[float]]) -> Matrix:
    """The vectors as a float32 matrix whose rows have length 1 (cosine = dot product)."""
    np = _numpy()
    m = np.asarray(vectors, dtype=np.float32)
    if m.ndim != 2 or m.shape[0] == 0:
        raise ValueError("expected a non-empty list of equal-length vectors")
    norms = np.linalg.norm(m, axis=1, keepdims=True)
    return m / np.where(norms == 0, 1.0, norms)  # type: ignore[no-any-return]


@dataclass(frozen=True)
class SignalIndex:
    """The candidates of every embedding signal as unit rows of one matrix, for one embedder."""

    matrix: Matrix
    spans: tuple[tuple[EmbeddingSignal, int, int], ...]  # signal, first row, end row

    @property
    def dimension(self) -> int:
        """Length of the vectors."""
        return int(self.matrix.shape[1])

    @classmethod
    def build(cls, signals: Sequence[EmbeddingSignal], vectors: Sequence[Sequence[float]]) -> SignalIndex:
        """``vectors`` are the embeddings of every signal's candidates, in order."""
        spans, start = [], 0
        for s in signals:
            spans.append((s, start, start + len(s.candidates)))
            start += len(s.candidates)
        if start != len(vectors):
            raise ValueError(f"expected {start} candidate vectors, got {len(vectors)}")
        return cls(unit_rows(vectors), tuple(spans))

    def scores(self, query: Sequence[float]) -> dict[str, float]:
        """Each signal's similarity to ``query`` (its best candidate, or their mean)."""
        np = _numpy()
        q = unit_rows([query])[0]
        if q.shape[0] != self.dimension:
            raise ValueError(f"query has {q.shape[0]} dimensions, the index {self.dimension}")
        sims = self.matrix @ q
        return {
            s.name: float(np.max(sims[a:b]) if s.aggregation == "max" else np.mean(sims[a:b]))
            for s, a, b in self.spans
        }


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


def decide(
    routes: RouteSet, text: str, similarities: Mapping[str, float], seconds: float = 0.0
) -> RouteDecision:
    """Pick the route for ``text`` given each embedding signal's similarity."""
    fired: set[str] = set()
    for signal in routes.all_signals():
        if isinstance(signal, KeywordSignal):
            if keyword_fires(signal, text):
                fired.add(signal.name)
        elif similarities.get(signal.name, float("-inf")) >= signal.threshold:
            fired.add(signal.name)
    scores: dict[str, float] = {}
    best: tuple[int, float, str] | None = None
    for route in routes.routes:
        condition = route.condition()
        used = condition.signals() if condition else set()
        sims = [similarities[s] for s in used if s in similarities]
        if sims:
            scores[route.name] = max(sims)
        if condition is None or not condition.holds(fired):
            continue
        matched = used & fired
        if any(s not in similarities for s in matched):  # a keyword signal: an explicit match
            score = 1.0
        else:
            score = max((similarities[s] for s in matched), default=max(sims, default=0.0))
        candidate = (route.priority, score, route.name)
        if best is None or candidate[:2] > best[:2]:
            best = candidate
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
