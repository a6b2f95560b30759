"""How a route's examples score a prompt, and the thresholds fitted from the examples alone.

A route's utterances make a ``blend`` signal: on vectors centred on the mean of every route's
examples (which removes the direction all sentences of an embedding model share), its score is

    (blend * best example + (1 - blend) * centroid of the examples + prior * description) / (1 + prior)

so every example counts, not only the nearest one, and the route's description (else its name)
pulls when there are few examples. A route without an explicit threshold gets one fitted by
leave-one-out: each example is scored against its own route without it (what an unseen in-scope
prompt looks like) and against the other routes (what a prompt that belongs elsewhere, or
nowhere, looks like); the cut that best separates the two is shared by those routes.
``router.calibrate(samples)`` replaces these choices with ones measured on labelled prompts.
All numpy, computed once per router; a decision is a few matrix-vector products.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    Vector = npt.NDArray[np.float32]

PROBE_MIN_EXAMPLES = 2  # the probe needs this many utterances on every route (else the blend)
NO_REJECTION = -1.0  # the fitted threshold of a route when nothing asks for out-of-scope rejection
AUTO_PRIOR_CAP = 0.5  # the description's weight with up to 5 examples, then 2.5 / examples
REJECTED_SHARE_WARNING = 0.5  # warn when a threshold rejects more of a route's own examples


class Scoring(BaseModel):
    """How routes' examples score a prompt; ``router.calibrate`` fits it, config files keep it.

    Attributes:
        head: "probe": a linear probe learned from the examples scores each route by its
            probability; "blend": the similarity rule below; "auto" (the default): whichever of
            the two routes the utterances better, each held out (the probe needs 2 routes of at
            least 2 utterances each).
        reject: Fit an out-of-scope cut from the examples alone (cross-validated) for routes
            declared without a threshold; False (the default): no cut, every prompt goes to its
            best route, until ``router.calibrate`` sees out-of-scope samples or a route sets one.
        blend: Weight of the best example against the centroid of all the route's examples (1: best only).
        prior: Weight of the route's description; None: 0.5 up to 5 examples, then 2.5 / examples.
        center: Subtract the mean of all routes' examples before comparing (needs two routes).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    head: Literal["auto", "probe", "blend"] = "auto"
    reject: bool = False
    blend: float = Field(0.5, ge=0, le=1)
    prior: float | None = Field(None, ge=0, le=1)
    center: bool = True

    def uses_probe(self, examples: Sequence[int]) -> bool:
        """True when the probe scores routes with that many utterances each.

        Args:
            examples: Each utterance route's number of utterances.
        """
        if self.head == "blend" or len(examples) < 2:
            return False
        return self.head == "probe" or min(examples) >= PROBE_MIN_EXAMPLES

    def prior_weight(self, examples: int) -> float:
        """The description's weight for a route with that many utterances.

        Args:
            examples: How many utterances the route has.
        """
        if self.prior is not None:
            return self.prior
        return min(AUTO_PRIOR_CAP, 2.5 / max(examples, 1))


def best_cut(own: Vector, rivals: Vector) -> float:
    """The score cut that best separates ``own`` (should pass) from ``rivals`` (should not).

    Maximises the share of ``own`` at or above the cut plus the share of ``rivals`` below it,
    halfway between neighbouring scores.
    """
    from unillm.semantic.vectors import numpy_module

    np = numpy_module()
    values = np.unique(np.concatenate([own, rivals]))
    cuts = np.concatenate([[values[0] - 0.01], (values[1:] + values[:-1]) / 2, [values[-1] + 0.01]])
    own_sorted, rivals_sorted = np.sort(own), np.sort(rivals)
    passed = 1 - np.searchsorted(own_sorted, cuts, side="left") / len(own)
    refused = np.searchsorted(rivals_sorted, cuts, side="left") / len(rivals)
    return float(cuts[int(np.argmax(passed + refused))])


def best_accuracy_cut(
    scores: Vector,
    right_if_kept: Vector,
    right_if_refused: Vector,
    weights: Vector | None = None,
    *,
    min_refused: float | None = None,
) -> tuple[float, float]:
    """The cut on ``scores`` with the most right answers, and that accuracy.

    A sample whose score reaches the cut keeps its match (right when ``right_if_kept``), one
    below it falls back (right when ``right_if_refused``). Ties go to the lowest such cut.

    Args:
        scores: Each sample's score.
        right_if_kept: Whether each sample is right when its score reaches the cut.
        right_if_refused: Whether each sample is right when it falls back.
        weights: What each sample's right answer counts (None: 1 each); the accuracy is the
            weighted share.
        min_refused: The least share of the samples right only when refused (out of scope) that
            the cut must refuse; None: any.

    Returns:
        The cut and the (weighted) accuracy there.
    """
    from unillm.semantic.vectors import numpy_module

    np = numpy_module()
    weight = np.ones(len(scores)) if weights is None else np.asarray(weights, dtype=float)
    order = np.argsort(scores)
    s, kept, refused = (
        scores[order],
        right_if_kept[order] * weight[order],
        right_if_refused[order] * weight[order],
    )
    # cut before sample i: samples < i refused, samples >= i kept
    right = np.concatenate([[0.0], np.cumsum(refused)]) + np.concatenate([np.cumsum(kept[::-1])[::-1], [0.0]])
    edges = np.concatenate([[s[0] - 0.01], (s[1:] + s[:-1]) / 2, [s[-1] + 0.01]])
    valid = np.concatenate([[True], s[1:] > s[:-1], [True]])  # no cut between equal scores
    if min_refused is not None:
        outside = (np.asarray(right_if_refused, dtype=bool) & ~np.asarray(right_if_kept, dtype=bool))[order]
        outside = outside.astype(float)
        refused_share = np.concatenate([[0.0], np.cumsum(outside)]) / max(outside.sum(), 1.0)
        valid &= refused_share >= min_refused - 1e-9
    right = np.where(valid, right, -1.0)
    i = int(np.argmax(right))
    return float(edges[i]), float(right[i] / weight.sum())


def balanced_weights(outside: Vector) -> Vector:
    """Sample weights that give the out-of-scope samples (``outside`` True) and the others equal
    say, however many of each were labelled (each group's weights sum to 1/2; all 1 without both).

    Args:
        outside: Whether each sample belongs to no route.

    Returns:
        One weight per sample.
    """
    from unillm.semantic.vectors import numpy_module

    np = numpy_module()
    flags = np.asarray(outside, dtype=bool)
    count = int(flags.sum())
    if count in (0, len(flags)):
        return np.ones(len(flags))  # type: ignore[no-any-return]
    return np.where(flags, 0.5 / count, 0.5 / (len(flags) - count)) * len(flags)  # type: ignore[no-any-return]


def fitted_threshold(own: Sequence[Any], rivals: Sequence[Any], fallback: float) -> float:
    """One threshold from pooled leave-one-out scores (own route vs other routes).

    Without rivals (a single route) the cut keeps 90% of the own scores; without own scores
    (every route has one example) it is ``fallback``.
    """
    from unillm.semantic.vectors import numpy_module

    np = numpy_module()
    mine = np.concatenate([np.asarray(x, dtype=np.float32) for x in own]) if own else np.zeros(0)
    others = np.concatenate([np.asarray(x, dtype=np.float32) for x in rivals]) if rivals else np.zeros(0)
    if mine.size == 0:
        return fallback
    if others.size == 0:
        return round(float(np.quantile(mine, 0.1)), 4)
    return round(best_cut(mine, others), 4)
