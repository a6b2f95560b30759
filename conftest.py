"""Fixtures for every test folder: the anyio backend, the locally built tiny model, real vLLM.

Each vLLM server here (the tiny model's, the trained model's, the embedder's) is launched once per
session through ``unillm.launch`` (CPU build, in its managed venv from ``unillm setup vllm``), for
every module that asks. A missing engine is an error, never a skip.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from hypothesis import settings

import unillm
from unillm.testing.engines import RunningEngine, cpu_launch_settings
from unillm.testing.tiny_model import TinyModel, build_tiny_model


@pytest.fixture(scope="session")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="session")
def tiny() -> TinyModel:
    return build_tiny_model()


@pytest.fixture(scope="session")
def workdir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="unillm-tests-") as d:
        yield Path(d)


@pytest.fixture(scope="session")
def vllm_server(tiny: TinyModel, workdir: Path) -> Iterator[RunningEngine]:
    """vLLM with the tiny model, the 'sql' LoRA at launch, and runtime LoRA loading on."""
    settings = cpu_launch_settings(
        "vllm",
        tiny,
        workdir / "main",
        served_name="tiny",
        lora={"sql": str(tiny.loras["sql"])},
        max_lora_rank=8,
        max_loras=2,
        runtime_lora=True,
    )
    yield from RunningEngine.serving("vllm", workdir / "vllm-main.log", **settings)


@pytest.fixture(scope="session")
def minilm_server(workdir: Path) -> Iterator[RunningEngine]:
    """vLLM's pooling runner with all-MiniLM-L6-v2 (embeddings, semantic routing); no API key, so
    a look-alike proxy can forward to it."""
    from unillm_vllm.testing import embedding_settings  # vLLM's test recipe (its adapter package)

    settings = embedding_settings(workdir / "minilm", api_key=None)
    yield from RunningEngine.serving("vllm", workdir / "vllm-minilm.log", **settings)


@pytest.fixture(scope="session")
def trained_server(workdir: Path) -> Iterator[RunningEngine]:
    """vLLM with the trained model and the hermes tool parser (one launch for every module that
    asks: the trained-model and framework tests)."""
    from unillm.testing.trained_model import build_trained_model

    settings = cpu_launch_settings(
        "vllm", build_trained_model(), workdir / "trained", served_name="tiny-trained", tool_parser="hermes"
    )
    assert settings["compact_json"] is False  # the spaces it learnt
    yield from RunningEngine.serving("vllm", workdir / "vllm-trained.log", **settings)


@pytest.fixture(scope="session")
def thinking_server(workdir: Path) -> Iterator[RunningEngine]:
    """vLLM with the thinking model (qwen3 reasoning parser, hermes tool parser), its template
    taught to render an assistant's ``reasoning_content`` as Qwen3's does: one launch for the
    reasoning tests and the multi-turn replay tests."""
    from unillm.testing.replay_check import replay_launch_settings

    settings = replay_launch_settings("vllm", workdir, served_name="tiny-thinking")
    yield from RunningEngine.serving("vllm", workdir / "vllm-thinking.log", **settings)


@pytest.fixture
async def llm(vllm_server: RunningEngine) -> AsyncIterator[unillm.LLM]:
    async with vllm_server.connect() as client:
        yield client


REAL_ENGINES = frozenset(
    {
        "vllm_server",
        "sglang_server",
        "mlx_server",
        "mlx_draft_server",
        "minilm_server",
        "trained_server",
        "thinking_server",
        "vlm_server",
    }
)


#: The engines launched once per pytest run (``vlm_server`` is one module's own).
SESSION_ENGINES = REAL_ENGINES - {"vlm_server"}

#: Session engines that serve a trained tiny model (their tests are marked ``trained`` too).
TRAINED_ENGINES = frozenset({"trained_server", "thinking_server"})


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test that uses a real engine ``engine`` (``-m "not engine"`` skips them), and run
    the modules that need a trained model last: from empty caches, ``./run test`` trains both in the
    background while the rest of the suite runs."""
    late = set()
    for item in items:
        fixtures = set(getattr(item, "fixturenames", ()))
        if REAL_ENGINES & fixtures:
            item.add_marker(pytest.mark.engine)
        if TRAINED_ENGINES & fixtures:
            item.add_marker(pytest.mark.trained)
        if item.get_closest_marker("trained"):
            late.add(item.nodeid.split("::")[0])
        shared = SESSION_ENGINES & fixtures
        if item.get_closest_marker("side_stream") and shared:
            raise pytest.UsageError(
                f"{item.nodeid}: marked side_stream but uses the session engine {sorted(shared)[0]}, "
                "which the other engine tests launch too: drop the mark or launch an engine of its own"
            )
    items.sort(key=lambda item: item.nodeid.split("::")[0] in late)  # stable: the order within stays


_seconds_by_module: dict[str, float] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Add each phase's time (set-up included: engine launches, model training) to its module."""
    module = report.nodeid.split("::")[0]
    _seconds_by_module[module] = _seconds_by_module.get(module, 0.0) + report.duration


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Where the time went: the 15 modules that took longest (engine launches and training included)."""
    if sum(_seconds_by_module.values()) < 60:
        return
    terminalreporter.section("slowest 15 modules (set-up, call and teardown)")
    ranked = sorted(_seconds_by_module.items(), key=lambda kv: -kv[1])
    for module, seconds in ranked[:15]:
        terminalreporter.write_line(f"{seconds:8.1f}s  {module}")
    terminalreporter.write_line(f"{sum(_seconds_by_module.values()):8.1f}s  all {len(ranked)} modules")


def pytest_report_header() -> str:
    return f"unillm cache: {os.environ.get('UNILLM_CACHE') or '~/.cache/unillm'}"


# Property tests (tests/test_decoder_properties.py): few examples, the same ones every run.
settings.register_profile("unillm", max_examples=25, derandomize=True, deadline=None, database=None)
settings.load_profile("unillm")
