"""Semantic routing: route validation, the decision, evaluation statistics, importers, and the
router against look-alike embedders (OpenAI and Azure layouts) and look-alike vLLM targets.

The accuracy proof with a real embedding model lives in tests/integration/test_semantic_minilm.py.
"""

from __future__ import annotations

import gc
import json
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from embedding_server import EmbeddingServer

import unillm
from unillm.results import RouteDecision
from unillm.semantic import (
    Condition,
    EmbeddingError,
    EmbeddingSignal,
    KeywordSignal,
    OpenAIEmbedder,
    Route,
    RouteSet,
    SemanticRouter,
    from_litellm,
    from_vsr,
    load_samples,
)
from unillm.semantic.decide import SignalIndex, decide, keyword_fires
from unillm.semantic.evaluation import Sample, report, suggest_threshold
from unillm.semantic.router import routing_text
from unillm.testing.fault_server import FaultServer

pytestmark = pytest.mark.anyio
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


ROUTES = [
    Route(name="code", utterances=["python list sort function", "git commit branch merge"]),
    Route(name="food", utterances=["bake bread flour oven", "boil pasta water salt"]),
    Route(name="chat", utterances=["hello how are you"]),
]


# -- routes --------------------------------------------------------------------------------
def test_route_names_must_be_unique() -> None:
    with pytest.raises(ValueError, match="duplicate route name"):
        RouteSet(routes=(ROUTES[0], ROUTES[0]))


def test_a_route_set_needs_routes() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        RouteSet(routes=())


def test_the_default_route_must_exist() -> None:
    with pytest.raises(ValueError, match="default route 'nope'"):
        RouteSet(routes=tuple(ROUTES), default="nope")


def test_a_route_that_can_never_match_is_refused_unless_it_is_the_default() -> None:
    with pytest.raises(ValueError, match="can never match"):
        RouteSet(routes=(ROUTES[0], Route(name="empty")))
    assert RouteSet(routes=(ROUTES[0], Route(name="empty")), default="empty").default == "empty"


def test_conditions_must_name_known_signals() -> None:
    with pytest.raises(ValueError, match="unknown signal"):
        RouteSet(routes=(Route(name="x", when=Condition(signal="missing")),))


def test_blank_utterances_are_refused() -> None:
    with pytest.raises(ValueError, match="non-blank"):
        Route(name="x", utterances=("  ",))


def test_conditions_combine_with_and_or_not() -> None:
    c = Condition(op="and", of=(Condition(signal="a"), Condition(op="not", of=(Condition(signal="b"),))))
    assert c.holds({"a"}) and not c.holds({"a", "b"}) and not c.holds(set())
    assert c.signals() == {"a", "b"}
    with pytest.raises(ValueError, match="exactly one"):
        Condition(op="not", of=(Condition(signal="a"), Condition(signal="b")))


def test_keywords_match_whole_words_case_insensitively_by_default() -> None:
    sig = KeywordSignal(name="k", keywords=("git", "Node.js"))
    assert keyword_fires(sig, "how do I use GIT?") and keyword_fires(sig, "my node.js app")
    assert not keyword_fires(sig, "a digital camera")
    assert not keyword_fires(KeywordSignal(name="k", keywords=("Git",), case_sensitive=True), "git")
    both = KeywordSignal(name="k", keywords=("a", "b"), mode="all")
    assert keyword_fires(both, "a and b") and not keyword_fires(both, "a only")
    assert keyword_fires(KeywordSignal(name="k", keywords=("x",), mode="none"), "nothing here")


# -- the decision --------------------------------------------------------------------------
def _sims(**by_route: float) -> dict[str, float]:
    return {f"{name}#utterances": value for name, value in by_route.items()}


def test_the_most_similar_matching_route_wins() -> None:
    routes = RouteSet(routes=tuple(ROUTES), default="chat")
    d = decide(routes, "sort a list", _sims(code=0.8, food=0.5, chat=0.1))
    assert (d.route, d.reason, d.score) == ("code", "matched", 0.8)
    assert d.scores == {"code": 0.8, "food": 0.5, "chat": 0.1}


def test_below_every_threshold_the_default_route_is_taken() -> None:
    routes = RouteSet(routes=tuple(ROUTES), default="chat")
    d = decide(routes, "?", _sims(code=0.1, food=0.2, chat=0.3))
    assert (d.route, d.reason, d.score) == ("chat", "default", None)


def test_priority_beats_similarity() -> None:
    routes = RouteSet(routes=(ROUTES[0], ROUTES[1].model_copy(update={"priority": 5})))
    assert decide(routes, "x", _sims(code=0.9, food=0.5)).route == "food"


def test_a_keyword_match_counts_as_certain() -> None:
    routes = RouteSet(routes=(ROUTES[0].model_copy(update={"keywords": ("pytest",)}), ROUTES[1]))
    d = decide(routes, "run pytest", _sims(code=0.1, food=0.6))
    assert (d.route, d.score) == ("code", 1.0) and "code#keywords" in d.signals


def test_signal_index_scores_by_max_or_mean_and_checks_dimensions() -> None:
    signals = [
        EmbeddingSignal(name="a", candidates=("1", "2")),
        EmbeddingSignal(name="b", candidates=("3", "4"), aggregation="mean"),
    ]
    index = SignalIndex.build(signals, [[1, 0], [0, 1], [1, 0], [0, 1]])
    scores = index.scores([1, 0])
    assert scores["a"] == pytest.approx(1.0) and scores["b"] == pytest.approx(0.5)
    with pytest.raises(ValueError, match="dimensions"):
        index.scores([1, 0, 0])


# -- evaluation statistics -----------------------------------------------------------------
def _decision(route: str | None, **scores: float) -> RouteDecision:
    return RouteDecision(route=route, reason="matched", scores=scores, seconds=0.001)


def test_report_counts_accuracy_confusion_precision_and_recall() -> None:
    samples = [Sample(text="a", route="x"), Sample(text="b", route="x"), Sample(text="c", route="y")]
    decisions = [_decision("x"), _decision("y"), _decision("y")]
    r = report(samples, decisions, ["x", "y"])
    assert (r.total, r.correct) == (3, 2) and r.accuracy == pytest.approx(2 / 3)
    assert r.confusion == {"x": {"x": 1, "y": 1}, "y": {"y": 1}}
    assert r.per_route["x"].recall == 0.5 and r.per_route["x"].precision == 1.0
    assert r.per_route["y"].precision == 0.5 and r.per_route["y"].recall == 1.0
    assert [m.text for m in r.misses] == ["b"]
    assert "| x | 1 | 1 |" in r.markdown()


def test_threshold_suggestion_separates_the_routes_scores() -> None:
    samples = [Sample(text=t, route=r) for t, r in [("a", "x"), ("b", "x"), ("c", "y"), ("d", "y")]]
    decisions = [_decision(None, x=s) for s in (0.9, 0.7, 0.4, 0.2)]
    assert suggest_threshold("x", samples, decisions) == pytest.approx(0.55)
    assert suggest_threshold("z", samples, decisions) is None


def test_labelled_files_are_validated(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "hi", "route": "chat"}\n{"route": "x"}\n')
    with pytest.raises(unillm.InvalidOptions, match=":2: give exactly one of text or messages"):
        load_samples(bad)
    (tmp_path / "empty.jsonl").write_text("\n")
    with pytest.raises(unillm.InvalidOptions, match="holds no samples"):
        load_samples(tmp_path / "empty.jsonl")


def test_the_committed_labelled_set_covers_six_routes_with_200_prompts() -> None:
    samples = load_samples(ROOT / "tests" / "data" / "routing_labelled.jsonl")
    assert len(samples) >= 200 and len({s.route for s in samples}) >= 5
    if sys.version_info >= (3, 11):  # the example routes must not contain evaluation prompts
        import tomllib
    else:  # pragma: no cover
        import tomli as tomllib

    routes = tomllib.loads((ROOT / "examples" / "routes.toml").read_text())["router"]["routes"]
    utterances = {u for r in routes for u in r["utterances"]}
    assert not utterances & {s.text for s in samples}


# -- importers -----------------------------------------------------------------------------
VSR = {
    "version": "v0.3",
    "providers": {"defaults": {"default_model": "qwen"}, "models": [{"name": "qwen"}]},
    "routing": {
        "signals": {
            "keywords": [{"name": "urgent", "operator": "OR", "keywords": ["asap", "urgent"]}],
            "embeddings": [{"name": "code", "threshold": 0.6, "candidates": ["fix my bug"]}],
            "domains": [{"name": "math", "description": "maths"}],
        },
        "decisions": [
            {
                "name": "code_urgent",
                "priority": 200,
                "rules": {
                    "operator": "AND",
                    "conditions": [
                        {"type": "keyword", "name": "urgent"},
                        {"type": "embedding", "name": "code"},
                    ],
                },
                "modelRefs": [{"model": "coder", "lora_name": "fast"}, {"model": "backup"}],
            },
            {
                "name": "math",
                "priority": 100,
                "rules": {"operator": "OR", "conditions": [{"type": "domain", "name": "math"}]},
                "modelRefs": [{"model": "qwen", "use_reasoning": True}],
            },
            {
                "name": "fallback",
                "priority": 1,
                "rules": {"operator": "AND"},
                "modelRefs": [{"model": "qwen"}],
            },
        ],
    },
}


def test_vsr_signals_and_decisions_map_and_the_rest_is_reported() -> None:
    imported = from_vsr(VSR)
    routes = imported.routes
    assert [r.name for r in routes.routes] == ["code_urgent", "fallback"]
    code = routes.route("code_urgent")
    assert (code.model, code.lora, code.priority) == ("coder", "fast", 200)
    assert code.when is not None and code.when.holds({"keyword:urgent", "embedding:code"})
    assert not code.when.holds({"keyword:urgent"})
    assert routes.default == "fallback"
    text = "\n".join(imported.unmapped)
    assert "domains signals (math)" in text and "decision 'math'" in text
    assert "1 more modelRefs" in text and "top-level 'providers'" in text


def test_vsr_keyword_and_embedding_signals_keep_their_settings() -> None:
    signals = {s.name: s for s in from_vsr(VSR).routes.signals}
    kw, emb = signals["keyword:urgent"], signals["embedding:code"]
    assert isinstance(kw, KeywordSignal) and kw.keywords == ("asap", "urgent") and kw.mode == "any"
    assert isinstance(emb, EmbeddingSignal) and emb.threshold == 0.6


def test_litellm_auto_router_routes_map_with_their_thresholds() -> None:
    file = {
        "encoder_type": "openai",
        "encoder_name": "text-embedding-3-small",
        "routes": [
            {
                "name": "gpt-coder",
                "utterances": ["write code"],
                "score_threshold": 0.5,
                "description": "code",
                "function_schemas": None,
                "llm": None,
                "metadata": {},
            }
        ],
    }
    imported = from_litellm(file, default_model="gpt-small")
    assert [r.name for r in imported.routes.routes] == ["gpt-coder", "gpt-small"]
    coder = imported.routes.route("gpt-coder")
    assert coder.threshold == 0.5 and coder.model == "gpt-coder"
    assert imported.routes.default == "gpt-small"
    assert any("encoder openai/text-embedding-3-small" in u for u in imported.unmapped)


def test_importers_refuse_what_they_cannot_read() -> None:
    with pytest.raises(unillm.InvalidOptions, match="'routes' list"):
        from_litellm({"routes": "nope"})
    with pytest.raises(unillm.InvalidOptions, match="no route mapped"):
        from_vsr({"decisions": [{"name": "d", "rules": {"type": "domain", "name": "x"}}]})


# -- the router with look-alike embedders and engines --------------------------------------
@pytest.fixture
def embeddings() -> Iterator[EmbeddingServer]:
    with EmbeddingServer(api_key="k") as server:
        yield server


@pytest.fixture
def engines() -> Iterator[tuple[FaultServer, FaultServer]]:
    with FaultServer(model="tiny", loras=("sql",)) as main, FaultServer(model="coder") as coder:
        yield main, coder


def _router(embeddings: EmbeddingServer, main: FaultServer, coder: FaultServer, **kw: Any) -> SemanticRouter:
    routes = [
        ROUTES[0].model_copy(update={"target": "coder"}),
        ROUTES[1].model_copy(update={"lora": "sql"}),
        ROUTES[2],
    ]
    return SemanticRouter(
        routes,
        embedder=OpenAIEmbedder(embeddings.url + "/v1", model="m", api_key="k"),
        llm=unillm.connect("vllm", main.url),
        targets={"coder": unillm.connect("vllm", coder.url)},
        default="chat",
        **kw,
    )


@pytest.fixture
async def router(
    embeddings: EmbeddingServer, engines: tuple[FaultServer, FaultServer]
) -> AsyncIterator[SemanticRouter]:
    """The routes of :func:`_router` over the two engines, open."""
    async with _router(embeddings, *engines) as opened:
        yield opened


async def test_generate_goes_to_the_routes_target_and_says_which(
    router: SemanticRouter, engines: tuple[FaultServer, FaultServer]
) -> None:
    main, coder = engines
    r = await router.generate("please sort my python list", max_tokens=4)
    assert r.route is not None and r.route.route == "code" and r.route.reason == "matched"
    assert coder.count() == 1 and main.count() == 0
    r = await router.generate(messages=[{"role": "user", "content": "bake bread in the oven"}])
    assert r.route is not None and r.route.route == "food"
    assert main.requests[-1].body["model"] == "sql"  # the route's LoRA


async def test_a_route_can_name_another_served_model(
    embeddings: EmbeddingServer, engines: tuple[FaultServer, FaultServer]
) -> None:
    main, _ = engines
    routes = [ROUTES[0].model_copy(update={"model": "sql"}), ROUTES[2]]
    router = SemanticRouter(
        routes,
        embedder=OpenAIEmbedder(embeddings.url + "/v1", api_key="k"),
        llm=unillm.connect("vllm", main.url),
        default="chat",
    )
    async with router:
        r = await router.generate("sort my python list")
        assert r.route is not None and r.route.route == "code"
        assert main.requests[-1].body["model"] == "sql"
        await router.generate("hello how are you")
        assert main.requests[-1].body["model"] == "tiny"


async def test_a_fleet_target_fails_over_when_a_replica_is_down(
    embeddings: EmbeddingServer, engines: tuple[FaultServer, FaultServer]
) -> None:
    main, coder = engines
    with FaultServer(model="coder") as gone:
        down = gone.url
    fleet = unillm.connect("vllm", [down, coder.url], policy="round_robin")
    routes = [ROUTES[0].model_copy(update={"target": "coders"}), ROUTES[2]]
    router = SemanticRouter(
        routes,
        embedder=OpenAIEmbedder(embeddings.url + "/v1", api_key="k"),
        llm=unillm.connect("vllm", main.url),
        targets={"coders": fleet},
        default="chat",
    )
    async with router:
        for _ in range(3):
            r = await router.generate("sort my python list")
            assert r.route is not None and r.route.route == "code" and r.text == "Hello, world!"
    assert coder.count() == 3 and main.count() == 0


async def test_each_decision_is_recorded_on_the_opentelemetry_span(
    embeddings: EmbeddingServer, engines: tuple[FaultServer, FaultServer]
) -> None:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    unillm.instrument(tracer_provider=provider)
    try:
        main, coder = engines
        async with _router(embeddings, main, coder) as router:
            await router.generate("please sort my python list")
            async with router.stream("hello how are you") as s:
                await s.collect()
    finally:
        unillm.uninstrument()
    routed = [dict(span.attributes or {}) for span in spans.get_finished_spans()]
    assert [(a["unillm.route.name"], a["unillm.route.reason"]) for a in routed] == [
        ("code", "matched"),
        ("chat", "matched"),
    ]
    seconds = [a["unillm.route.decision_seconds"] for a in routed]
    assert all(isinstance(s, float) and s > 0 for s in seconds)
    assert all("unillm.route.score" in a for a in routed)


async def test_streams_are_routed_too(
    router: SemanticRouter, engines: tuple[FaultServer, FaultServer]
) -> None:
    async with router.stream("git merge my branch") as s:
        text = await s.collect()
    assert text == "Hello, world!" and s.route is not None and s.route.route == "code"
    assert engines[1].count() == 1  # the coder


async def test_breaking_out_of_a_routed_stream_closes_it_without_the_gc(
    embeddings: EmbeddingServer, engines: tuple[FaultServer, FaultServer]
) -> None:
    main, coder = engines
    coder.endless()
    gc.disable()  # only the garbage collector would otherwise break the stream's reference cycle
    try:
        async with _router(embeddings, main, coder) as router:
            async for _ in router.stream("git merge my branch"):
                break
            assert await coder.wait_disconnect(10)
    finally:
        gc.enable()


async def test_route_embeddings_are_computed_once_per_embedder(
    embeddings: EmbeddingServer, router: SemanticRouter
) -> None:
    await router.route("hello")
    await router.route("hello again")
    examples = [r for r in embeddings.requests if len(r["body"]["input"]) > 1]
    assert len(examples) == 1  # the route examples, once
    assert len(embeddings.requests) - len(examples) == 2


async def test_route_many_decides_as_route_does_with_one_embedding_call(
    embeddings: EmbeddingServer, router: SemanticRouter
) -> None:
    prompts = ["hello", "write a poem", "fix my python code"]
    one_by_one = [await router.route(p) for p in prompts]
    before = len(embeddings.requests)
    chat = [{"role": "user", "content": "fix my python code"}]
    together = await router.route_many([*prompts[:2], None], messages=[None, None, chat])
    assert len(embeddings.requests) - before == 1
    assert embeddings.requests[-1]["body"]["input"] == prompts
    assert [(d.route, d.score) for d in together] == [(d.route, d.score) for d in one_by_one]
    assert all(d.seconds > 0 for d in together)
    with pytest.raises(unillm.InvalidOptions, match="3 prompts but 1 messages entries"):
        await router.route_many(prompts, messages=[None])


async def test_an_embedder_that_answers_too_few_vectors_is_a_typed_error(router: SemanticRouter) -> None:
    await router.index()

    answers: list[list[list[float]]] = [[[1.0] * 64], []]

    async def short(texts: Any) -> list[list[float]]:
        return answers.pop(0)

    router.embedder.embed = short  # type: ignore[method-assign]
    with pytest.raises(EmbeddingError, match="returned 1 vectors for 2 texts"):
        await router.route_many(["a", "b"])
    with pytest.raises(EmbeddingError, match="returned 0 vectors for 1 texts"):  # none: no silent default
        await router.route("a")


async def test_an_embedder_whose_dimension_changes_is_a_typed_error(
    embeddings: EmbeddingServer, router: SemanticRouter
) -> None:
    await router.route("hello")
    embeddings.dimension = 32
    with pytest.raises(EmbeddingError, match="32-dimensional vector but the routes were embedded with 64"):
        await router.route("hello")


async def test_an_unreachable_embedder_raises_by_default(engines: tuple[FaultServer, FaultServer]) -> None:
    main, _ = engines
    with EmbeddingServer() as gone:
        url = gone.url
    router = SemanticRouter(
        ROUTES, embedder=OpenAIEmbedder(url), llm=unillm.connect("vllm", main.url), default="chat"
    )
    async with router:
        with pytest.raises(EmbeddingError, match="could not be reached"):
            await router.generate("hello")
    assert main.count() == 0  # nothing half-done


async def test_an_unreachable_embedder_can_fall_back_to_the_default_route_with_a_warning(
    engines: tuple[FaultServer, FaultServer],
) -> None:
    main, _ = engines
    with EmbeddingServer(fail_with=503) as failing:
        router = SemanticRouter(
            ROUTES,
            embedder=OpenAIEmbedder(failing.url),
            default="chat",
            llm=unillm.connect("vllm", main.url),
            on_embedder_error="default",
        )
        async with router:
            with pytest.warns(RuntimeWarning, match="using the default route 'chat'"):
                r = await router.generate("hello")
    assert r.route is not None and (r.route.route, r.route.reason) == ("chat", "fallback")
    assert main.count() == 1


async def test_azure_embedder_sends_the_api_key_header_and_api_version() -> None:
    with EmbeddingServer(azure=True, api_key="secret") as azure:
        embedder = OpenAIEmbedder.azure(
            azure.url, deployment="emb", api_version="2024-10-21", api_key="secret", dimensions=8
        )
        vectors = await embedder.embed(["a cat", "a dog"])
        await embedder.aclose()
        seen = azure.requests[-1]
        assert seen["path"] == "/openai/deployments/emb/embeddings?api-version=2024-10-21"
        assert seen["headers"]["api-key"] == "secret" and "authorization" not in seen["headers"]
        assert seen["body"] == {"input": ["a cat", "a dog"], "dimensions": 8}
        assert len(vectors) == 2
        wrong = OpenAIEmbedder.azure(azure.url, deployment="emb", api_version="2024-10-21", api_key="nope")
        with pytest.raises(unillm.Unauthorized, match="invalid subscription key"):
            await wrong.embed(["x"])
        await wrong.aclose()


async def test_routing_text_is_the_last_user_message_by_default() -> None:
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "first"},
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": [{"type": "text", "text": "second"}]},
    ]
    assert routing_text(None, messages) == "second"
    assert routing_text(None, messages, "user") == "first\nsecond"
    with pytest.raises(unillm.InvalidOptions, match="no last user text"):
        routing_text(None, [{"role": "system", "content": "x"}])


def test_routes_must_name_known_targets(embeddings: EmbeddingServer) -> None:
    with pytest.raises(unillm.InvalidOptions, match="targets 'gpu', which is not one of"):
        SemanticRouter(
            [ROUTES[0].model_copy(update={"target": "gpu"})], embedder=OpenAIEmbedder(embeddings.url)
        )


def test_config_builds_a_router_and_lists_every_problem(tmp_path: Path, embeddings: EmbeddingServer) -> None:
    config = tmp_path / "unillm.toml"
    config.write_text(f'''
engine = "vllm"
base_url = "http://127.0.0.1:9"
[router]
default = "chat"
[router.embedder]
url = "{embeddings.url}/v1"
api_key_env = "EMB_KEY"
[[router.routes]]
name = "chat"
utterances = ["hello"]
''')
    router = unillm.from_config(config, env={"EMB_KEY": "k"})
    assert isinstance(router, SemanticRouter) and router.routes.default == "chat"
    with pytest.raises(unillm.ConfigError, match="api_key_env='EMB_KEY' is not set"):
        unillm.from_config(config, env={})
    config.write_text(
        'engine = "vllm"\nbase_url = "http://x:1"\n[router]\n[router.embedder]\n'
        'url = "http://x:2"\nazure_endpoint = "http://y"\n'
    )
    with pytest.raises(unillm.ConfigError, match=r"routes.*(Field required|at least 1)"):
        unillm.from_config(config, env={})


def test_the_example_routes_without_an_embedder_say_how_to_add_one() -> None:
    # examples/routes.toml (what the README points `unillm route eval` at) has no embedder.
    from unillm.config.semantic import router_from_config

    with pytest.raises(unillm.ConfigError, match=r"embedder: Field required\. Add a \[router\.embedder\]"):
        router_from_config(ROOT / "examples" / "routes.toml")


def test_cli_import_prints_routes_and_reports_what_did_not_map(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from unillm.cli.main import main

    path = tmp_path / "vsr.json"  # YAML is a superset of JSON
    path.write_text(json.dumps(VSR))
    assert main(["route", "import", "vsr", str(path)]) == 0
    out, err = capsys.readouterr()
    assert '[[router.routes]]\nname = "code_urgent"' in out
    assert "not imported: domains signals (math)" in err
