"""Ollama launches: the command, its start steps and refusals (pure), then a supervised launch of
a stand-in ``ollama`` (tests/fake_ollama.py) on PATH: found, healthy, the model pulled with
progress, ready once it answers, torn down; and the failures a user meets (no binary, a pull
that fails)."""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr
from unillm_ollama import OllamaAdapter

import unillm
from unillm import Launch, LaunchSpec
from unillm.adapter.launch_spec import Parallel, Speculative
from unillm.errors import LaunchError, UnsupportedFeature
from unillm.launching.supervisor import LaunchProgress

ADAPTER = OllamaAdapter()


def command(**settings: Any) -> Any:
    return ADAPTER.command(LaunchSpec(model="llama3.2:1b", port=11500, api_key=None, **settings))


def test_the_server_is_ollama_serve_configured_by_its_environment() -> None:
    cmd = command(host="0.0.0.0", max_model_len=4096, max_num_seqs=4, extra_args=["--verbose"])
    assert cmd.argv == ["ollama", "serve", "--verbose"]
    assert dict(cmd.env) == {
        "OLLAMA_HOST": "0.0.0.0:11500",
        "OLLAMA_CONTEXT_LENGTH": "4096",
        "OLLAMA_NUM_PARALLEL": "4",
    }
    assert cmd.health_path == "/api/version"


def test_the_model_is_pulled_once_healthy_then_copied_to_its_served_name() -> None:
    steps = command(served_name="tiny").after_start
    assert [(s.path, s.json) for s in steps] == [
        ("/api/pull", {"model": "llama3.2:1b", "stream": True}),
        ("/api/copy", {"source": "llama3.2:1b", "destination": "tiny"}),
    ]


def test_the_binary_is_a_prerequisite_with_install_instructions() -> None:
    (needed,) = (
        OllamaAdapter(binary="/opt/ollama/bin/ollama").command(LaunchSpec(model="m", api_key=None)).requires
    )
    assert (needed.kind, needed.name) == (
        "binary",
        "/opt/ollama/bin/ollama",
    ) and "ollama.com/download" in needed.install


@pytest.mark.parametrize(
    ("settings", "feature"),
    [
        ({"parallel": Parallel(tensor=2)}, "tensor parallel"),
        ({"speculative": Speculative(method="ngram")}, "speculative ngram"),
        ({"runtime_lora": True}, "loras.load/unload at runtime"),
        ({"lora": {"sql": "/adapters/sql"}}, "lora at launch"),
        ({"quantization": "awq"}, "quantization"),
        ({"model": "/models/tiny.gguf"}, "a model path"),
        ({"host": "0.0.0.0", "api_key": SecretStr("k" * 12)}, "api_key"),
    ],
)
def test_what_ollama_cannot_do_at_launch_is_refused(settings: dict[str, Any], feature: str) -> None:
    spec = LaunchSpec.model_validate({"model": "llama3.2:1b", "api_key": None, **settings})
    with pytest.raises(UnsupportedFeature) as refused:
        ADAPTER.command(spec)
    assert (refused.value.feature, refused.value.engine) == (feature, "ollama") and refused.value.alternative


def test_cli_dry_run_prints_the_command_its_prerequisite_and_the_pull(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from unillm.cli.main import main

    assert main(["launch", "ollama", "--model", "llama3.2:1b", "--port", "11500", "--dry-run"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[-1] == "OLLAMA_HOST=127.0.0.1:11500 ollama serve"
    assert "# once healthy: pull llama3.2:1b (POST /api/pull)" in out
    assert any(line.startswith("# needs ollama (binary): Install Ollama") for line in out)


# -- supervision --------------------------------------------------------------------------------
@pytest.fixture
def ollama_on_path(tmp_path: Path) -> str:
    """A PATH whose ``ollama`` runs the stand-in (tests/fake_ollama.py)."""
    script = Path(__file__).with_name("fake_ollama.py")
    exe = tmp_path / "bin" / "ollama"
    exe.parent.mkdir()
    exe.write_text(f'#!/bin/sh\nexec {sys.executable} {script} "$@"\n')
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    return f"{exe.parent}{os.pathsep}{os.environ.get('PATH', '')}"


def _launch(tmp_path: Path, path: str, progress: Any = None, **env: str) -> Launch:
    spec = LaunchSpec(model="tiny:1b", served_name="tiny", env={"PATH": path, **env}, ready_timeout=30)
    return Launch(OllamaAdapter(), spec, progress=progress, log_path=tmp_path / "ollama.log")


@pytest.mark.anyio
async def test_launch_pulls_the_model_with_progress_and_is_ready_when_it_answers(
    ollama_on_path: str, tmp_path: Path
) -> None:
    seen: list[LaunchProgress] = []
    launch = _launch(tmp_path, ollama_on_path, seen.append)
    async with launch as llm:
        completion = await llm.generate("Hi", max_tokens=8)
        process = launch._process
    assert (completion.text, completion.model) == ("Hello", "tiny")
    pulls = [p.last_line for p in seen if p.phase == "preparing"]
    assert "pull tiny:1b: pulling 0123abcd 50% of 2 MB" in pulls and "pull tiny:1b: success" in pulls
    assert [p.phase for p in seen][-1] == "ready"
    assert process is not None and process.poll() is not None  # torn down


@pytest.mark.anyio
async def test_a_pull_that_fails_fails_the_launch_with_ollamas_message(
    ollama_on_path: str, tmp_path: Path
) -> None:
    launch = _launch(tmp_path, ollama_on_path, FAKE_OLLAMA_FAULT="pull_error_line")
    with pytest.raises(LaunchError, match=r"pull tiny:1b failed: .*pull denied"):
        async with launch:
            pass
    assert launch._process is not None and launch._process.poll() is not None


@pytest.mark.anyio
async def test_a_pull_answered_with_an_error_status_fails_the_launch(
    ollama_on_path: str, tmp_path: Path
) -> None:
    launch = _launch(tmp_path, ollama_on_path, FAKE_OLLAMA_FAULT="pull_status")
    with pytest.raises(LaunchError, match="answered 500: pull denied"):
        async with launch:
            pass


@pytest.mark.anyio
async def test_without_the_binary_the_launch_says_how_to_install_it_and_starts_nothing(
    tmp_path: Path,
) -> None:
    launch = _launch(tmp_path, str(tmp_path))
    with pytest.raises(LaunchError, match=r"needs the program 'ollama' on PATH.*ollama.com/download"):
        async with launch:
            pass
    assert launch._process is None


def test_launch_builds_the_command_without_the_binary() -> None:
    cmd = unillm.launch("ollama", model="llama3.2:1b", port=11501, env={"PATH": "/nowhere"}).command()
    assert cmd.argv == ["ollama", "serve"] and cmd.after_start[0].path == "/api/pull"
