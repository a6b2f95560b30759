"""SGLang's CPU recipe is experimental: it runs from the test suite's env and says so."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import unillm


def test_without_the_cpu_env_the_launch_says_how_to_build_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("UNILLM_CACHE", str(tmp_path))
    with pytest.raises(unillm.LaunchError, match=r"cpu_env\.py") as caught:
        unillm.launch("sglang", model="/m", cpu=True)
    assert "sglang-cpu" in str(caught.value) and "sgl_kernel" in str(caught.value)


def test_the_recipe_runs_from_the_cpu_env_and_warns_that_it_is_experimental(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("UNILLM_CACHE", str(tmp_path))
    python = tmp_path / "envs" / "sglang-cpu" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.touch()
    run = unillm.launch("sglang", model="/m", cpu=True)
    argv = run.command().argv
    assert argv[0] == str(python)
    assert argv[argv.index("--attention-backend") + 1] == "torch_native"
    assert "experimental" in capsys.readouterr().err


def test_a_python_given_by_the_caller_wins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("UNILLM_CACHE", str(tmp_path))
    run = unillm.launch("sglang", model="/m", cpu=True, python="/opt/sglang/bin/python")
    assert run.command().argv[0] == "/opt/sglang/bin/python"


@pytest.mark.parametrize(
    "setting",
    [
        {"lora": {"sql": "/a/sql"}},
        {"runtime_lora": True},
        {"speculative": unillm.Speculative(method="ngram")},
    ],
)
def test_lora_and_speculation_are_refused_on_a_cpu(setting: dict[str, Any]) -> None:
    with pytest.raises(unillm.UnsupportedFeature, match="on a CPU: SGLang runs them with CUDA"):
        unillm.launch("sglang", model="/m", cpu=True, python="/opt/sglang/bin/python", **setting)
