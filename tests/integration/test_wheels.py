"""The built artifacts install on their own: the core and every adapter distribution built as wheels,
installed into a fresh venv from those wheels (third-party dependencies from the index), with no
checkout on the path, then ``unillm engines``, a ``--dry-run`` launch per engine and a connect to a
look-alike server, all run by the fresh venv's own ``unillm``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

import unillm
from unillm.adapter.registry import first_party_engines
from unillm.testing.fault_server import FaultServer

# Slow (it builds eight wheels and a venv): marked like the real-engine tests, so it runs in
# ./run test and not in ./run unit, beside the session engines' tests (it needs none).
pytestmark = [pytest.mark.engine, pytest.mark.side_stream]

ROOT = Path(__file__).resolve().parents[2]
PROJECTS = [ROOT, *sorted(p.parent for p in ROOT.glob("adapters/*/pyproject.toml"))]
#: A model argument each engine's dry run accepts (llama.cpp serves GGUF files, Ollama library names).
MODELS = {"llamacpp": "/models/tiny.gguf", "ollama": "llama3.2:1b"}
CONNECT = """
import asyncio, sys, unillm
async def main():
    async with unillm.connect("vllm", sys.argv[1], model="tiny") as llm:
        print((await llm.generate("Hi", max_tokens=4)).text)
asyncio.run(main())
"""


def run(*args: str | Path, cwd: Path) -> str:
    done = subprocess.run([str(a) for a in args], cwd=cwd, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"{args}: {done.stdout}\n{done.stderr}"
    return done.stdout


def distribution(project: Path) -> str:
    name: str = tomllib.loads((project / "pyproject.toml").read_text())["project"]["name"]
    return name


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv with the core and every adapter installed from freshly built wheels."""
    tmp = tmp_path_factory.mktemp("wheels")
    wheels = tmp / "dist"
    uv = (sys.executable, "-m", "uv")
    for project in PROJECTS:
        run(*uv, "build", "--wheel", "--out-dir", wheels, project, cwd=tmp)
    run(*uv, "venv", "--python", sys.executable, tmp / "venv", cwd=tmp)
    python = tmp / "venv" / "bin" / "python"
    version = unillm.__version__
    extras = ",".join(e.replace("_", "-") for e in first_party_engines())
    wanted = [f"unillm-sdk[{extras}]=={version}"]  # the extras pull in every adapter distribution
    run(*uv, "pip", "install", "--python", python, "--find-links", wheels, *wanted, cwd=tmp)
    return tmp


def test_the_core_and_every_adapter_are_built_as_wheels(venv: Path) -> None:
    names = {p.name.split("-")[0] for p in (venv / "dist").glob("*.whl")}
    assert names == {distribution(p).replace("-", "_") for p in PROJECTS}


def test_unillm_is_imported_from_the_venv_not_the_checkout(venv: Path) -> None:
    where = run(venv / "venv/bin/python", "-c", "import unillm; print(unillm.__file__)", cwd=venv)
    assert where.startswith(str(venv / "venv")) and str(ROOT) not in where


def test_unillm_engines_lists_every_first_party_engine(venv: Path) -> None:
    table = run(venv / "venv/bin/unillm", "engines", cwd=venv)
    assert all(
        label in table for label in ("vLLM", "SGLang", "TGI", "MLX", "llama.cpp", "Ollama", "TensorRT-LLM")
    )


@pytest.mark.parametrize("engine", first_party_engines())
def test_a_dry_run_launch_prints_the_engine_command(venv: Path, engine: str) -> None:
    model = MODELS.get(engine, "/models/tiny")
    assert run(venv / "venv/bin/unillm", "launch", engine, "--model", model, "--dry-run", cwd=venv).strip()


def test_the_installed_client_talks_to_a_look_alike(venv: Path) -> None:
    with FaultServer(model="tiny") as server:
        out = run(venv / "venv/bin/python", "-c", CONNECT, server.url, cwd=venv)
    assert out.strip() == "Hello, world!"
