"""Every script in examples/ runs (against the vLLM look-alike, or the real vLLM where needed)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from unillm.testing.engines import RunningEngine
from unillm.testing.fault_server import FaultServer

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
TOOL_CALL = '{"name": "get_weather", "arguments": {"city": "Rome"}}'
# script -> what the look-alike answers (None: it needs no server)
ON_THE_LOOK_ALIKE: dict[str, str | None] = {
    "engines.py": None,
    "speculative_decoding.py": None,
    "config_and_swaps.py": None,
    "cpu_recipes.py": None,
    "structured_output.py": '{"name": "Rome", "country": "Italy"}',
    "tools.py": TOOL_CALL,
    "agents.py": "It is sunny in Oslo.",
    "lora.py": "Hello",
    "fleets.py": "Hello",
    "semantic_routing.py": "Hello",
    "bench.py": "Hello",
    "observability.py": "Hello",
    "errors.py": "Hello",
}
ON_REAL_VLLM = ("embeddings_and_tokens.py",)
NOT_HERE = {
    "demo.py": "./run demo: it launches vLLM and trains a model (the real-engine tests run its parts)"
}


def _run(script: str, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / script), *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


@pytest.fixture
def two_servers() -> Iterator[tuple[FaultServer, FaultServer]]:
    with FaultServer(loras=("sql",)) as a, FaultServer(loras=("sql",)) as b:
        yield a, b


def test_every_example_is_tested() -> None:
    scripts = {p.name for p in EXAMPLES.glob("*.py") if not p.name.startswith("_")}
    assert scripts == {*ON_THE_LOOK_ALIKE, *ON_REAL_VLLM, *NOT_HERE}


@pytest.mark.parametrize("script", sorted(ON_THE_LOOK_ALIKE))
def test_an_example_runs(script: str, two_servers: tuple[FaultServer, FaultServer]) -> None:
    answer = ON_THE_LOOK_ALIKE[script]
    args: list[str] = []
    if answer is not None:
        for server in two_servers:
            server.pieces = (answer,)
        args = [a for s in two_servers[: 2 if script == "fleets.py" else 1] for a in ("--url", s.url)]
    out = _run(script, *args)
    assert out.strip(), f"{script} printed nothing"
    if answer is not None:
        assert sum(s.count() for s in two_servers) >= 1, f"{script} sent nothing"


def test_the_fleet_example_sends_each_of_its_requests_to_one_replica(
    two_servers: tuple[FaultServer, FaultServer],
) -> None:
    a, b = two_servers
    _run("fleets.py", "--url", a.url, "--url", b.url)
    assert a.count("/v1/completions") + b.count("/v1/completions") == 3


def test_the_errors_example_refuses_bad_input_before_sending(
    two_servers: tuple[FaultServer, FaultServer],
) -> None:
    out = _run("errors.py", "--url", two_servers[0].url)
    assert "InvalidOptions" in out and "UnknownLora" in out


@pytest.mark.parametrize("script", ON_REAL_VLLM)
def test_an_example_runs_on_real_vllm(script: str, vllm_server: RunningEngine) -> None:
    out = _run(script, "--url", vllm_server.base_url, "--api-key", str(vllm_server.api_key))
    assert "tokens" in out
