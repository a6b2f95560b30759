"""A learned routing head: a linear probe (multinomial logistic regression) over unit embeddings.

    probe = fit_probe(rows, labels, classes=3)        # milliseconds, numpy only
    probe.probabilities(query_rows)                   # one row of route probabilities per query
    held_out = cross_validated(rows, labels, 3)       # each row scored by a probe fitted without it

The probe starts from the routes' centroids (the centroid classifier) and is refined by
accelerated gradient descent on the L2-regularised cross-entropy, so few steps suffice and the
same vectors always give the same head. The cross-validated probabilities say how the head does
on prompts it has not seen: what fits an out-of-scope cut and what ``route eval`` reports.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from unillm.semantic.vectors import numpy_module

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    Matrix = npt.NDArray[np.float32]
    Labels = npt.NDArray[np.int64]

REGULARISATION = 1e-3  # L2 weight of the probe's cross-entropy
STEPS = 150  # accelerated gradient steps
SCALE = 10.0  # the centroid start's logit scale (unit rows, cosines in [-1, 1])
FOLDS = 5


@dataclass(frozen=True)
class Probe:
    """A fitted linear probe: ``softmax(rows @ weights + bias)``."""

    weights: Matrix  # dimension x classes
    bias: Matrix  # classes

    def probabilities(self, rows: Matrix) -> Matrix:
        """Each row's probability of every class (rows should be unit vectors, as fitted).

        Args:
            rows: Query vectors, one per row.

        Returns:
            One row of class probabilities per query.
        """
        return _softmax(rows @ self.weights + self.bias)


def _softmax(logits: Matrix) -> Matrix:
    np = numpy_module()
    shifted = np.exp(logits - logits.max(axis=-1, keepdims=True))
    return shifted / shifted.sum(axis=-1, keepdims=True)  # type: ignore[no-any-return]


def fit_probe(rows: Matrix, labels: Labels, classes: int, *, regularisation: float = REGULARISATION) -> Probe:
    """Fit the probe to labelled rows (every class needs at least one row).

    Args:
        rows: Unit vectors, one per example.
        labels: Each row's class, 0 to ``classes - 1``.
        classes: How many classes.
        regularisation: The L2 weight.

    Returns:
        The fitted probe.
    """
    np = numpy_module()
    rows = np.asarray(rows, dtype=np.float32)
    n = rows.shape[0]
    onehot = np.zeros((n, classes), dtype=np.float32)
    onehot[np.arange(n), labels] = 1.0
    counts = np.maximum(onehot.sum(axis=0), 1.0)
    weights = SCALE * (rows.T @ onehot) / counts  # the centroid classifier
    bias = np.zeros(classes, dtype=np.float32)
    # the loss's gradient is at most (largest eigenvalue of rows' Gram / n) + regularisation Lipschitz
    lipschitz = float(np.linalg.norm(rows, ord=2) ** 2) / n + regularisation
    step = 1.0 / lipschitz
    ahead_w, ahead_b, previous_w, previous_b = weights, bias, weights, bias
    for t in range(1, STEPS + 1):
        error = (_softmax(rows @ ahead_w + ahead_b) - onehot) / n
        weights = ahead_w - step * (rows.T @ error + regularisation * ahead_w)
        bias = ahead_b - step * error.sum(axis=0)
        momentum = (t - 1) / (t + 2)
        ahead_w = weights + momentum * (weights - previous_w)
        ahead_b = bias + momentum * (bias - previous_b)
        previous_w, previous_b = weights, bias
    return Probe(weights.astype(np.float32), bias.astype(np.float32))


def folds_of(labels: Labels, folds: int = FOLDS, seed: int = 0) -> Labels:
    """Each row's fold: every class's rows dealt in turn over the folds, from a seeded shuffle.

    Args:
        labels: Each row's class.
        folds: How many folds.
        seed: The shuffle's seed.
    """
    np = numpy_module()
    rng = np.random.default_rng(seed)
    fold = np.zeros(len(labels), dtype=np.int64)
    offset = 0
    for c in np.unique(labels):
        members = rng.permutation(np.flatnonzero(labels == c))
        fold[members] = (np.arange(len(members)) + offset) % folds
        offset += len(members)
    return fold  # type: ignore[no-any-return]


def cross_validated(rows: Matrix, labels: Labels, classes: int, folds: int = FOLDS) -> Matrix:
    """Each row's class probabilities from a probe fitted on the other folds (stratified).

    A class whose every row falls in the held-out fold is absent from that fold's probe and
    gets probability 0 there. With fewer rows than folds, each row is its own fold.

    Args:
        rows: Unit vectors, one per example.
        labels: Each row's class.
        classes: How many classes.
        folds: How many folds.

    Returns:
        One row of held-out class probabilities per example.
    """
    np = numpy_module()
    fold = folds_of(labels, min(folds, len(labels)))
    out = np.zeros((len(labels), classes), dtype=np.float32)
    for f in np.unique(fold):
        held = fold == f
        present = np.unique(labels[~held])
        remap = np.full(classes, -1, dtype=np.int64)
        remap[present] = np.arange(len(present))
        probe = fit_probe(rows[~held], remap[labels[~held]], len(present))
        out[np.ix_(np.flatnonzero(held), present)] = probe.probabilities(rows[held])
    return out  # type: ignore[no-any-return]
