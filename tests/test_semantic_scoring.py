"""Semantic routing's scoring on fixed vectors, without an engine: the blend of a route's examples,
the leave-one-out thresholds, calibration on labelled prompts, the warning about strict thresholds,
and fitted values surviving a config file.

The measured comparison on CLINC150 with real MiniLM is benchmarks/routing_accuracy.py.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence

import numpy as np
import pytest

import unillm
from unillm.config.semantic import build_router
from unillm.errors import InvalidOptions
from unillm.semantic import Calibration, EmbeddingSignal, Route, RouteSet, Scoring, SemanticRouter
from unillm.semantic.decide import SignalIndex, decide, index_texts
from unillm.semantic.evaluation import Sample
from unillm.semantic.scoring import balanced_weights, best_accuracy_cut, best_cut, fitted_threshold

pytestmark = pytest.mark.anyio
DIM = 16
LEGACY = Scoring(head="blend", reject=True)  # the similarity rule with leave-one-out thresholds


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


class Table:
    """An embedder answering from a fixed text -> vector table."""

    def __init__(self, vectors: Mapping[str, Sequence[float]], key: str = "table") -> None:
        self.vectors, self.key, self.calls = vectors, key, 0

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        self.calls += 1
        return [list(self.vectors[t]) for t in texts]

    async def aclose(self) -> None:
        pass


def _clusters(seed: int, spread: float = 0.35) -> tuple[dict[str, list[float]], list[Route]]:
    """Three routes of five examples around three random directions, their names, and probes."""
    rng = np.random.default_rng(seed)
    centres = {name: rng.normal(size=DIM) for name in ("alpha", "beta", "gamma")}
    vectors: dict[str, list[float]] = {}
    routes = []
    for name, centre in centres.items():
        utterances = [f"{name} {i}" for i in range(5)]
        for u in utterances:
            vectors[u] = list(centre + spread * np.linalg.norm(centre) * rng.normal(size=DIM) / np.sqrt(DIM))
        vectors[name] = list(centre)  # the description (the route's name)
        vectors[f"{name} probe"] = list(centre + 0.2 * rng.normal(size=DIM))
        routes.append(Route(name=name, utterances=utterances))
    vectors["nowhere"] = list(rng.normal(size=DIM) - sum(centres.values()))
    vectors["other"] = list(rng.normal(size=DIM))  # the default route's name, once it has examples
    return vectors, [*routes, Route(name="other")]


def _index(
    routes: Sequence[Route], vectors: dict[str, list[float]], scoring: Scoring | None = None
) -> SignalIndex:
    default = routes[-1].name if not routes[-1].utterances else None
    signals = RouteSet(routes=tuple(routes), default=default).embedding_signals()
    return SignalIndex.build(signals, [vectors[t] for t in index_texts(signals)], scoring)


# -- cuts ----------------------------------------------------------------------------------
def test_best_cut_falls_between_the_own_and_the_rival_scores() -> None:
    cut = best_cut(np.array([0.7, 0.8, 0.9]), np.array([0.1, 0.2, 0.3]))
    assert 0.3 < cut < 0.7


def test_best_accuracy_cut_counts_kept_and_refused_answers() -> None:
    scores = np.array([0.1, 0.2, 0.8, 0.9])
    kept = np.array([False, False, True, True])  # the match is right only for the high scores
    refused = np.array([True, True, False, False])  # the fallback is right for the low ones
    cut, accuracy = best_accuracy_cut(scores, kept, refused)
    assert 0.2 < cut < 0.8 and accuracy == 1.0


def test_balanced_weights_give_out_of_scope_samples_as_much_say_as_the_others() -> None:
    # 6 in-scope samples right when kept (scores 0.5 to 0.9), 2 out-of-scope ones right when
    # refused (scores 0.6 and 0.7, among the in-scope ones)
    scores = np.array([0.5, 0.55, 0.6, 0.65, 0.7, 0.8, 0.85, 0.9])
    outside = np.array([False, False, True, False, True, False, False, False])
    kept, refused = ~outside, outside
    counted, accuracy = best_accuracy_cut(scores, kept, refused)
    assert counted < 0.5 and accuracy == pytest.approx(6 / 8)  # by count: keep everything
    weights = balanced_weights(outside)
    assert weights.sum() == pytest.approx(8) and weights[outside].sum() == pytest.approx(
        weights[~outside].sum()
    )
    balanced, score = best_accuracy_cut(scores, kept, refused, weights)
    assert 0.7 < balanced < 0.8 and score == pytest.approx((3 / 6 + 2 / 2) / 2)
    assert (balanced_weights(np.zeros(3, dtype=bool)) == 1).all()


def test_a_recall_asked_for_moves_the_cut_to_refuse_that_share_of_the_outside() -> None:
    scores = np.array([0.5, 0.55, 0.6, 0.65, 0.7, 0.8, 0.85, 0.9])  # as above
    outside = np.array([False, False, True, False, True, False, False, False])
    half, _ = best_accuracy_cut(scores, ~outside, outside, min_refused=0.5)
    assert 0.6 < half < 0.65  # refuses the 0.6 outsider, the fewest in-scope with it
    whole, accuracy = best_accuracy_cut(scores, ~outside, outside, min_refused=1.0)
    assert 0.7 < whole < 0.8 and accuracy == pytest.approx(5 / 8)


def test_without_rivals_the_threshold_keeps_nine_in_ten_own_scores() -> None:
    own = np.linspace(0.0, 1.0, 11)
    assert fitted_threshold([own], [], fallback=0.4) == pytest.approx(0.1)


def test_without_own_scores_the_threshold_is_the_fallback() -> None:
    assert fitted_threshold([], [np.array([0.5])], fallback=0.4) == 0.4


def test_the_description_weighs_half_with_few_examples_then_less() -> None:
    scoring = Scoring()
    assert scoring.prior_weight(3) == 0.5 and scoring.prior_weight(5) == 0.5
    assert scoring.prior_weight(10) == pytest.approx(0.25)
    assert Scoring(prior=0.1).prior_weight(3) == 0.1


# -- the blend -----------------------------------------------------------------------------
def test_the_blend_follows_all_examples_where_nearest_neighbour_follows_one() -> None:
    vectors = {
        "a1": [1.0, 0.3, 0.0],
        "a2": [1.0, -0.3, 0.0],
        "b1": [0.75, 0.0, 0.66],  # one example of b lies closest to the query
        "b2": [0.0, 0.0, 1.0],
        "q": [1.0, 0.0, 0.45],
    }
    routes = [Route(name="a", utterances=["a1", "a2"]), Route(name="b", utterances=["b1", "b2"])]
    nearest = _index(
        routes,
        vectors | {"a": [0, 0, 0], "b": [0, 0, 0]},
        Scoring(head="blend", blend=1, prior=0, center=False),
    )
    blended = _index(
        routes,
        vectors | {"a": [0, 0, 0], "b": [0, 0, 0]},
        Scoring(head="blend", blend=0.5, prior=0, center=False),
    )
    best = nearest.scores(vectors["q"])
    assert best["b#utterances"] > best["a#utterances"]
    mixed = blended.scores(vectors["q"])
    assert mixed["a#utterances"] > mixed["b#utterances"]


def test_the_route_description_pulls_a_query_towards_its_route() -> None:
    vectors = {"a1": [1.0, 0.0], "b1": [0.0, 1.0], "q": [0.6, 0.8], "about a": [0.0, 1.0], "b": [0.0, 0.0]}
    routes = [Route(name="a", utterances=["a1"], description="about a"), Route(name="b", utterances=["b1"])]
    plain = _index(routes, vectors, Scoring(prior=0, center=False)).scores(vectors["q"])
    described = _index(routes, vectors, Scoring(prior=0.5, center=False)).scores(vectors["q"])
    assert plain["b#utterances"] > plain["a#utterances"]
    assert described["a#utterances"] > described["b#utterances"]


def test_centering_removes_the_direction_every_example_shares() -> None:
    vectors: dict[str, list[float]] = {
        "a1": [5.0, 1.0, 0.0],
        "b1": [5.0, 0.0, 1.0],
        "q": [5.0, 0.4, -0.3],
        "a": [0.0, 0.0, 0.0],
        "b": [0.0, 0.0, 0.0],
    }
    routes = [Route(name="a", utterances=["a1"]), Route(name="b", utterances=["b1"])]
    raw = _index(routes, vectors, Scoring(prior=0, center=False)).scores(vectors["q"])
    assert min(raw.values()) > 0.95  # the shared direction drowns the difference
    centred = _index(routes, vectors, Scoring(prior=0)).scores(vectors["q"])
    assert centred["a#utterances"] > 0.5 > centred["b#utterances"]


def test_an_index_refuses_a_query_of_another_dimension() -> None:
    vectors, routes = _clusters(0)
    with pytest.raises(ValueError, match="dimensions"):
        _index(routes, vectors).scores([1.0, 0.0])


# -- thresholds fitted from the examples ---------------------------------------------------
def test_leave_one_out_scores_an_example_without_itself() -> None:
    signal = EmbeddingSignal(name="s", candidates=("x", "x again", "y"), threshold=0.5)
    index = SignalIndex.build([signal], [[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]])
    own, rivals = index.leave_one_out()
    assert own["s"].tolist() == pytest.approx([1.0, 1.0, 0.0])  # best other candidate each
    assert rivals == {}


def test_a_route_without_threshold_gets_one_between_its_examples_and_the_others() -> None:
    vectors, routes = _clusters(1)
    index = _index(routes, vectors, LEGACY)
    own, rivals = index.leave_one_out()
    cut = index.thresholds["alpha#utterances"]
    assert set(index.thresholds.values()) == {cut}  # one cut shared by the unset routes
    assert np.mean(own["alpha#utterances"] >= cut) > 0.5 and np.mean(rivals["alpha#utterances"] < cut) > 0.5


def test_an_explicit_threshold_is_kept_and_not_fitted() -> None:
    vectors, routes = _clusters(2)
    routes[0] = routes[0].model_copy(update={"threshold": 0.9})
    index = _index(routes, vectors)
    assert "alpha#utterances" not in index.thresholds
    signal = routes[0].own_signals()[0]
    assert isinstance(signal, EmbeddingSignal) and index.threshold(signal) == 0.9


async def test_fitted_thresholds_route_in_scope_probes_and_send_the_rest_to_the_default() -> None:
    vectors, routes = _clusters(3)
    router = SemanticRouter(routes, embedder=Table(vectors), default="other", scoring=LEGACY)
    for name in ("alpha", "beta", "gamma"):
        assert (await router.route(f"{name} probe")).route == name
    decision = await router.route("nowhere")
    assert (decision.route, decision.reason) == ("other", "default")


def test_decide_uses_the_fitted_threshold_and_falls_back_to_0_4_without_one() -> None:
    routes = RouteSet(routes=(Route(name="a", utterances=["x"]), Route(name="z")), default="z")
    assert decide(routes, "q", {"a#utterances": 0.3}, thresholds={"a#utterances": 0.2}).route == "a"
    assert decide(routes, "q", {"a#utterances": 0.3}).route == "z"


async def test_the_router_reports_the_thresholds_in_use() -> None:
    vectors, routes = _clusters(4)
    router = SemanticRouter(routes, embedder=Table(vectors), default="other")
    thresholds = await router.thresholds()
    assert set(thresholds) == {"alpha#utterances", "beta#utterances", "gamma#utterances"}
    fitted = await router.fitted_routes()
    assert [r.threshold for r in fitted[:3]] == [thresholds[f"{r.name}#utterances"] for r in routes[:3]]


# -- the warning ---------------------------------------------------------------------------
async def test_a_threshold_that_rejects_most_of_its_own_examples_warns_once() -> None:
    vectors, routes = _clusters(5)
    strict = [routes[0].model_copy(update={"threshold": 0.99}), *routes[1:]]
    with pytest.warns(RuntimeWarning, match=r"'alpha#utterances' has threshold 0.99, which rejects 100%"):
        await SemanticRouter(
            strict, embedder=Table(vectors, "first"), default="other", scoring=LEGACY
        ).index()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        await SemanticRouter(
            strict, embedder=Table(vectors, "second"), default="other", scoring=LEGACY
        ).index()


async def test_fitted_thresholds_on_separate_routes_do_not_warn() -> None:
    vectors, routes = _clusters(6, spread=0.1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        await SemanticRouter(routes, embedder=Table(vectors), default="other").index()


# -- calibration ---------------------------------------------------------------------------
def _labelled(vectors: dict[str, list[float]], seed: int) -> list[Sample]:
    rng = np.random.default_rng(seed)
    samples = []
    for name in ("alpha", "beta", "gamma"):
        for i in range(6):
            text = f"{name} labelled {i}"
            vectors[text] = list(np.asarray(vectors[f"{name} probe"]) + 0.6 * rng.normal(size=DIM))
            samples.append(Sample(text=text, route=name))
    for i in range(6):
        vectors[f"unrelated {i}"] = list(rng.normal(size=DIM) * 3)
        samples.append(Sample(text=f"unrelated {i}", route="other"))
    return samples


async def test_calibrate_reports_before_and_after_and_never_gets_worse() -> None:
    vectors, routes = _clusters(7)
    samples = _labelled(vectors, 7)
    router = SemanticRouter(routes, embedder=Table(vectors), default="other", scoring=LEGACY)
    report = await router.calibrate(samples)
    assert isinstance(report, Calibration) and report.samples == len(samples)
    assert report.after >= report.before
    right = [(await router.route(s.text)).route == s.route for s in samples]
    inside = [r for r, s in zip(right, samples, strict=True) if s.route != "other"]
    outside = [r for r, s in zip(right, samples, strict=True) if s.route == "other"]
    assert report.balanced  # both kinds were labelled: the mean of in-scope accuracy and OOS recall
    assert (sum(inside) / len(inside) + sum(outside) / len(outside)) / 2 == pytest.approx(report.after)


async def test_calibrate_fits_the_shared_threshold_to_the_labelled_prompts() -> None:
    vectors, routes = _clusters(8)
    samples = _labelled(vectors, 8)
    router = SemanticRouter(routes, embedder=Table(vectors), default="other")
    before = await router.thresholds()
    report = await router.calibrate(samples)
    if report.after > report.before:
        assert report.threshold is not None
        assert set((await router.thresholds()).values()) == {report.threshold}
        assert router.scoring == report.scoring
    else:
        assert await router.thresholds() == before


async def test_calibrate_refuses_labels_that_are_not_routes() -> None:
    vectors, routes = _clusters(9)
    router = SemanticRouter(routes, embedder=Table(vectors), default="other")
    with pytest.raises(InvalidOptions, match="not routes of this router"):
        await router.calibrate([Sample(text="alpha probe", route="nope")])
    with pytest.raises(InvalidOptions, match="needs labelled samples"):
        await router.calibrate([])


# -- config --------------------------------------------------------------------------------
async def test_fitted_thresholds_and_scoring_round_trip_through_a_config_table() -> None:
    vectors, routes = _clusters(10)
    router = SemanticRouter(routes, embedder=Table(vectors), default="other")
    await router.calibrate(_labelled(vectors, 10))
    table = {
        "default": "other",
        "embedder": {"url": "http://127.0.0.1:9/v1", "model": "m"},
        "scoring": router.scoring.model_dump(),
        "routes": [r.model_dump(exclude_defaults=True) for r in await router.fitted_routes()],
    }
    again = build_router(table)
    assert again.scoring == router.scoring
    assert [r.threshold for r in again.routes.routes] == [r.threshold for r in await router.fitted_routes()]
    assert all(r.threshold is not None for r in again.routes.routes if r.utterances)


def test_semantic_router_and_route_are_top_level_names() -> None:
    assert unillm.SemanticRouter is SemanticRouter and unillm.Route is Route


async def test_a_fitted_threshold_that_rejects_most_examples_says_to_add_examples() -> None:
    vectors = {"a1": [1.0, 0.0, 0.0], "a2": [0.0, 1.0, 0.0], "b1": [0.7, 0.7, 0.1], "b2": [0.6, 0.7, 0.2]}
    vectors |= {"a": [0.0, 0.0, 0.0], "b": [0.0, 0.0, 0.0]}
    routes = [Route(name="a", utterances=["a1", "a2"]), Route(name="b", utterances=["b1", "b2"])]
    with pytest.warns(RuntimeWarning, match="'a#utterances'.*add examples"):
        await SemanticRouter(routes, embedder=Table(vectors, "spread"), scoring=LEGACY).index()


async def test_thresholds_chosen_by_calibration_do_not_warn() -> None:
    vectors, routes = _clusters(11)
    router = SemanticRouter(routes, embedder=Table(vectors), default="other")
    router.rescore(
        Scoring(), dict.fromkeys(["alpha#utterances", "beta#utterances", "gamma#utterances"], 0.99)
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert set((await router.thresholds()).values()) == {0.99}
