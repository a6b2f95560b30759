"""The learned head of semantic routing on fixed vectors, without an engine: the linear probe
against nearest-neighbour, no rejection unless asked, the cross-validated cut, calibration that
learns the samples, the warning about a costly cut, and ``route eval``'s baselines.
"""

from __future__ import annotations

import asyncio
import threading
import warnings
from collections.abc import Mapping, Sequence

import numpy as np
import pytest

from unillm.errors import InvalidOptions
from unillm.results import RouteDecision
from unillm.semantic import Route, RouteSet, Scoring, SemanticRouter, evaluate
from unillm.semantic import decide as decide_module
from unillm.semantic.decide import ScorePlan, SignalIndex, decide, decision_plan, index_texts
from unillm.semantic.evaluation import Sample
from unillm.semantic.head import cross_validated, fit_probe, folds_of
from unillm.semantic.routes import EmbeddingSignal
from unillm.semantic.scoring import NO_REJECTION

pytestmark = pytest.mark.anyio
DIM = 24


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


class Table:
    """An embedder answering from a fixed text -> vector table."""

    def __init__(self, vectors: Mapping[str, Sequence[float]], key: str) -> None:
        self.vectors, self.key = vectors, key

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        return [list(self.vectors[t]) for t in texts]

    async def aclose(self) -> None:
        pass


def _elongated(
    seed: int, shots: int = 5, probes: int = 40
) -> tuple[dict[str, list[float]], list[Route], list[Sample]]:
    """Four routes whose examples spread far along a direction they share (topic noise) and
    differ along their own: separable by a linear head, misleading for the single nearest example."""
    rng = np.random.default_rng(seed)
    shared = rng.normal(size=(3, DIM))  # noise directions every route varies along
    vectors: dict[str, list[float]] = {}
    routes, samples = [], []
    for name in ("alpha", "beta", "gamma", "delta"):
        centre = rng.normal(size=DIM)

        def draw(centre: np.ndarray = centre) -> list[float]:
            return list(centre + 1.5 * rng.normal(size=3) @ shared + 0.3 * rng.normal(size=DIM))

        utterances = [f"{name} {i}" for i in range(shots)]
        for u in utterances:
            vectors[u] = draw()
        vectors[name] = list(centre)
        for i in range(probes):
            vectors[f"{name} probe {i}"] = draw()
            samples.append(Sample(text=f"{name} probe {i}", route=name))
        routes.append(Route(name=name, utterances=utterances))
    for i in range(probes):
        vectors[f"nowhere {i}"] = list(4 * rng.normal(size=DIM))
    vectors["other"] = list(rng.normal(size=DIM))
    return vectors, [*routes, Route(name="other")], samples


def _nearest(vectors: Mapping[str, Sequence[float]], routes: Sequence[Route], text: str | None) -> str:
    assert text is not None
    q = np.asarray(vectors[text])
    best = max(
        (float(np.dot(q, v) / np.linalg.norm(q) / np.linalg.norm(v)), r.name)
        for r in routes
        for v in (np.asarray(vectors[u]) for u in r.utterances)
    )
    return best[1]


# -- the probe -----------------------------------------------------------------------------
async def test_the_probe_routes_at_least_as_well_as_nearest_neighbour_on_separable_data() -> None:
    head, nearest = 0, 0
    for seed in range(4):
        vectors, routes, samples = _elongated(seed)
        router = SemanticRouter(
            routes,
            embedder=Table(vectors, f"elongated{seed}"),
            default="other",
            scoring=Scoring(head="probe"),
        )
        assert (await router.index()).probe is not None
        for s in samples:
            head += (await router.route(s.text)).route == s.route
            nearest += _nearest(vectors, routes[:-1], s.text) == s.route
    assert head >= nearest and head / (4 * len(samples)) > 0.8


async def test_by_default_the_head_that_routes_the_held_out_examples_better_is_used() -> None:
    for seed in range(3):
        vectors, routes, _ = _elongated(seed)
        routes = routes[:-1]
        probe = await SemanticRouter(
            routes, embedder=Table(vectors, f"p{seed}"), scoring=Scoring(head="probe")
        ).index()
        blend = await SemanticRouter(
            routes, embedder=Table(vectors, f"b{seed}"), scoring=Scoring(head="blend")
        ).index()
        auto = await SemanticRouter(routes, embedder=Table(vectors, f"a{seed}")).index()
        assert (auto.probe is not None) == probe.probe_beats_blend(blend)


def test_the_probe_fits_linearly_separable_points_exactly() -> None:
    rows = np.asarray([[1, 0.1], [1, -0.1], [-1, 0.1], [-1, -0.1]], dtype=np.float32)
    rows /= np.linalg.norm(rows, axis=1, keepdims=True)
    probe = fit_probe(rows, np.asarray([0, 0, 1, 1]), 2)
    assert (probe.probabilities(rows).argmax(axis=1) == [0, 0, 1, 1]).all()


def test_with_one_example_a_route_is_scored_by_the_blend_rule_not_the_probe() -> None:
    vectors = {"a1": [1.0, 0.0], "b1": [0.0, 1.0], "a": [1.0, 0.1], "b": [0.1, 1.0]}
    routes = RouteSet(routes=(Route(name="a", utterances=["a1"]), Route(name="b", utterances=["b1"])))
    signals = routes.embedding_signals()
    index = SignalIndex.build(signals, [vectors[t] for t in index_texts(signals)])
    assert index.probe is None and Scoring().uses_probe([2, 2]) and not Scoring().uses_probe([1, 5])


# -- rejection -----------------------------------------------------------------------------
async def test_without_out_of_scope_examples_or_thresholds_nothing_is_rejected() -> None:
    vectors, routes, _ = _elongated(10)
    router = SemanticRouter(routes, embedder=Table(vectors, "norejection"), default="other")
    assert set((await router.thresholds()).values()) == {NO_REJECTION}
    decisions = [await router.route(f"nowhere {i}") for i in range(20)]
    assert all(d.reason == "matched" and d.route != "other" for d in decisions)


async def test_asked_to_reject_the_cut_comes_from_cross_validated_answers() -> None:
    vectors, routes, _ = _elongated(11)
    router = SemanticRouter(
        routes, embedder=Table(vectors, "reject"), default="other", scoring=Scoring(reject=True)
    )
    index = await router.index()
    held, _ = index.held_out()
    cut = set((await router.thresholds()).values())
    assert len(cut) == 1 and 0 < cut.pop() < 1
    assert index.probe is not None and index.examples is not None
    full = index.probe.probabilities(index.examples)
    assert not np.allclose(held, full)  # each row scored without itself


def test_folds_are_stratified_and_every_row_is_held_out_once() -> None:
    labels = np.asarray([0] * 5 + [1] * 5 + [2] * 3)
    fold = folds_of(labels, 5)
    for c in range(3):
        assert len(set(fold[labels == c])) == (labels == c).sum()  # a class's rows in distinct folds
    rows = np.eye(13, dtype=np.float32)
    held = cross_validated(rows, labels, 3)
    assert held.shape == (13, 3) and np.allclose(held.sum(axis=1), 1.0)


# -- calibration ---------------------------------------------------------------------------
async def test_calibration_learns_the_samples_and_fits_the_cut_to_the_out_of_scope_ones() -> None:
    vectors, routes, samples = _elongated(12)
    nowhere = [Sample(text=f"nowhere {i}", route="other") for i in range(40)]
    fit, held = samples[::2] + nowhere[::2], samples[1::2] + nowhere[1::2]
    router = SemanticRouter(routes, embedder=Table(vectors, "learn"), default="other")
    before = await _balanced(router, held)
    report = await router.calibrate(fit)
    assert report.after > report.before and report.scoring.head == "probe"
    fitted = {r.name: r for r in await router.fitted_routes()}
    assert "alpha probe 0" in fitted["alpha"].utterances
    # the default route has no examples: what belongs to no route teaches the cut, not the probe
    assert fitted["other"].utterances == () and report.threshold is not None
    assert report.balanced  # in- and out-of-scope samples: the cut weighs both kinds equally
    in_scope, refused = await _balanced(router, held)
    assert refused >= 0.5 and before[1] == 0.0  # nothing was rejected before calibration
    assert (in_scope + refused) / 2 > sum(before) / 2 + 0.2 and in_scope > 0.7


async def test_a_recall_asked_for_refuses_more_of_what_belongs_to_no_route() -> None:
    vectors, routes, samples = _elongated(12)
    nowhere = [Sample(text=f"nowhere {i}", route="other") for i in range(40)]
    fit, held = samples[::2] + nowhere[::2], samples[1::2] + nowhere[1::2]
    shares = []
    for recall in (None, 1.0):
        router = SemanticRouter(routes, embedder=Table(vectors, "learn"), default="other")
        await router.calibrate(fit, out_of_scope_recall=recall)
        shares.append(await _balanced(router, held))
    (in_scope, refused), (strict_in_scope, strict_refused) = shares
    assert strict_refused > refused and strict_refused >= 0.9 and strict_in_scope < in_scope
    router = SemanticRouter(routes, embedder=Table(vectors, "learn"), default="other")
    for bad in (0.0, 1.5, True):
        with pytest.raises(InvalidOptions, match="out_of_scope_recall"):
            await router.calibrate(fit, out_of_scope_recall=bad)
    with pytest.raises(InvalidOptions, match="needs out-of-scope samples"):
        await router.calibrate(samples, out_of_scope_recall=0.9)


async def _balanced(router: SemanticRouter, held: list[Sample]) -> tuple[float, float]:
    """The share of in-scope samples routed right, and of out-of-scope ones refused."""
    right = [(await router.route(s.text)).route == s.route for s in held]
    inside = [r for r, s in zip(right, held, strict=True) if s.route != "other"]
    outside = [r for r, s in zip(right, held, strict=True) if s.route == "other"]
    return sum(inside) / len(inside), sum(outside) / len(outside)


# -- the warning ---------------------------------------------------------------------------
async def test_a_cut_that_rejects_own_examples_without_out_of_scope_ones_warns_once() -> None:
    vectors, routes, _ = _elongated(13)
    strict = [r.model_copy(update={"threshold": 0.99}) if r.utterances else r for r in routes]
    with pytest.warns(RuntimeWarning, match="reject .* of their own examples"):
        await SemanticRouter(strict, embedder=Table(vectors, "strict1"), default="other").index()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        await SemanticRouter(strict, embedder=Table(vectors, "strict2"), default="other").index()
        await SemanticRouter(routes, embedder=Table(vectors, "loose"), default="other").index()


# -- evaluation and speed ------------------------------------------------------------------
async def test_eval_reports_nearest_neighbour_and_the_heads_cross_validated_estimate() -> None:
    vectors, routes, samples = _elongated(14)
    router = SemanticRouter(routes, embedder=Table(vectors, "eval"), default="other")
    report = await evaluate(router, samples)
    nearest = sum(_nearest(vectors, routes[:-1], s.text) == s.route for s in samples) / len(samples)
    assert report.nearest_neighbour == pytest.approx(nearest)
    assert report.cross_validated is not None and 0 < report.cross_validated <= 1
    assert "nearest-neighbour over the same vectors" in report.markdown()
    assert "cross-validated" in report.markdown()


def _speed_router(scoring: Scoring | None = None) -> tuple[SemanticRouter, dict[str, list[float]]]:
    rng = np.random.default_rng(0)
    vectors = {f"r{i} {j}": list(rng.normal(size=384)) for i in range(10) for j in range(20)}
    vectors |= {f"r{i}": list(rng.normal(size=384)) for i in range(10)}
    vectors["q"] = list(rng.normal(size=384))
    routes = [Route(name=f"r{i}", utterances=[f"r{i} {j}" for j in range(20)]) for i in range(10)]
    return SemanticRouter(routes, embedder=Table(vectors, "speed"), default="r0", scoring=scoring), vectors


async def test_a_decision_builds_no_signals_or_conditions_once_the_router_is_built(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    router, vectors = _speed_router()
    first = await router.route("q")

    def rebuilt(*_: object) -> None:
        raise AssertionError("the decision path rebuilt the routes' signals or conditions")

    for owner, method in ((Route, "own_signals"), (Route, "condition"), (RouteSet, "all_signals")):
        monkeypatch.setattr(owner, method, rebuilt)
    index = await router.index()
    again = decide(router.routes, "q", index.scores(vectors["q"]), thresholds=index.thresholds)
    assert (await router.route("q")).route == again.route == first.route


async def test_a_decision_completes_without_yielding_to_the_event_loop_or_a_thread(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    router, _ = _speed_router()
    await router.route("q")  # the index is built once (that step embeds the examples)

    def forbidden(*_: object, **__: object) -> None:
        raise AssertionError("the decision path started a thread or used an executor")

    monkeypatch.setattr(threading.Thread, "start", forbidden)
    monkeypatch.setattr(asyncio.AbstractEventLoop, "run_in_executor", forbidden)
    monkeypatch.setattr(asyncio.BaseEventLoop, "run_in_executor", forbidden)
    step = router.route("q")  # the embedder answers at once, so nothing may suspend the coroutine
    with pytest.raises(StopIteration) as done:
        step.send(None)
    decision = done.value.value
    assert isinstance(decision, RouteDecision) and decision.route is not None


@pytest.mark.parametrize("head", ["probe", "blend"])
async def test_what_a_decision_reads_is_built_with_the_index_never_per_decision(
    monkeypatch: pytest.MonkeyPatch, head: str
) -> None:
    router, vectors = _speed_router(Scoring.model_validate({"head": head}))
    built: list[ScorePlan] = []
    real_of = ScorePlan.of

    def counted(cls: type[ScorePlan], index: SignalIndex) -> ScorePlan:
        built.append(real_of(index))
        return built[-1]

    monkeypatch.setattr(ScorePlan, "of", classmethod(counted))
    index = await router.index()
    assert built and index.plan is built[-1]  # the scoring plan: made with the index
    assert decision_plan(router.routes) is decision_plan(router.routes)  # the route set's: made already
    assert decide_module._PLANS[id(router.routes)][0] is router.routes
    made = len(built)

    def refit(*_: object, **__: object) -> None:
        raise AssertionError("a decision fitted or planned again")

    for owner, name in (
        (ScorePlan, "of"),
        (SignalIndex, "build"),
        (decide_module, "fit_probe"),
        (decide_module, "cross_validated"),
        (decide_module, "best_cut"),
        (RouteSet, "all_signals"),
    ):
        monkeypatch.setattr(owner, name, refit)
    rng = np.random.default_rng(1)
    for _ in range(50):
        query = list(rng.normal(size=384))
        decided = decide(router.routes, "q", index.scores(query), thresholds=index.thresholds)
        assert decided.route in {f"r{i}" for i in range(10)}
    assert (await router.route("q")).route == decide(
        router.routes, "q", index.scores(vectors["q"]), thresholds=index.thresholds
    ).route
    assert len(built) == made and (await router.index()).plan is index.plan


def test_the_score_plan_holds_the_index_weights_it_scores_with() -> None:
    signals = [
        EmbeddingSignal(name="m", candidates=("a", "b"), aggregation="max"),
        EmbeddingSignal(name="n", candidates=("c",), aggregation="mean"),
        EmbeddingSignal(name="x", candidates=("d", "e"), aggregation="blend", description="dx"),
        EmbeddingSignal(name="y", candidates=("f", "g"), aggregation="blend", description="dy"),
    ]
    rng = np.random.default_rng(2)
    index = SignalIndex.build(
        signals, rng.normal(size=(len(index_texts(signals)), 8)).tolist(), Scoring(head="blend")
    )
    plan = index.plan
    assert plan.names == ("m", "n", "x", "y") and plan.starts.tolist() == [0, 2, 3, 5]
    assert plan.is_blend.tolist() == [False, False, True, True] and plan.is_mean.tolist() == [
        False,
        True,
        False,
        False,
    ]
    assert np.array_equal(plan.centroid_weight, 1 - index.weights[:, 0])
    assert np.array_equal(plan.scale, 1 + index.weights[:, 1])
    assert not plan.only_blend and not plan.only_probe
    query = rng.normal(size=8)
    assert list(index.scores(query.tolist())) == ["m", "n", "x", "y"]
    assert index.scores(query.tolist())["n"] == pytest.approx(
        float(index.matrix[2] @ (query / np.linalg.norm(query))), abs=1e-6
    )


def test_the_decision_plan_is_built_once_per_route_set_and_follows_a_copy() -> None:
    routes = RouteSet(
        routes=(
            Route(name="a", utterances=["a1", "a2"]),
            Route(name="b", utterances=["b1"], keywords=["bee"]),
        )
    )
    plan = decision_plan(routes)
    assert decision_plan(routes) is plan
    assert [name for name, *_ in plan.routes] == ["a", "b"]
    assert [s.name for s in plan.keywords] == ["b#keywords"]
    renamed = routes.model_copy(update={"routes": (Route(name="c", utterances=["c1"]),)})
    assert [name for name, *_ in decision_plan(renamed).routes] == ["c"]
    assert decide(renamed, "bee", {"c#utterances": 0.9}).route == "c"
