"""unillm check / unillm.check_config: every refusal of a config, at once, with nothing started.

The configs are real files in tests/configs/: one application (app.toml) and its versions for
MLX, TGI and SGLang. Swapping ``engine`` must give the whole list of what to change in one go.
"""

from __future__ import annotations

import json
import socket
import subprocess
from pathlib import Path
from typing import Any

import pytest

import unillm
from unillm.cli.main import main

CONFIGS = Path(__file__).parent / "configs"
APP = CONFIGS / "app.toml"


@pytest.fixture(autouse=True)
def _nothing_is_started_or_connected(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("check_config must not start or connect anything")

    monkeypatch.setattr(subprocess, "Popen", refuse)
    monkeypatch.setattr(socket.socket, "connect", refuse)


def settings(report: unillm.ConfigCheck) -> list[str]:
    return [p.setting for p in report.problems]


@pytest.mark.parametrize("name", ["app", "mlx", "tgi", "sglang"])
def test_each_engines_config_passes_its_check(name: str) -> None:
    report = unillm.check_config(CONFIGS / f"{name}.toml", env={})
    assert report.ok, report.render()
    assert report.engine == ("vllm" if name == "app" else name)


@pytest.mark.parametrize(
    ("engine", "refused", "hint"),
    [
        (
            "mlx",
            [
                "defaults.n",
                "uses.json_schema",
                "uses.regex",
                "uses.lora_runtime",
                "uses.logprobs",
                "launch.parallel.tensor",
                "launch.speculative",
                "launch.dtype",
                "launch.max_lora_rank",
                "launch.max_model_len",
                "launch.runtime_lora",
            ],
            (1, "in_process=True"),
        ),
        (
            "tgi",  # chat-only sampling refusals, and launch ones
            [
                "defaults.top_k",
                "defaults.min_p",
                "defaults.n",
                "uses.lora_runtime",
                "launch.cpu",
                "launch.runtime_lora",
                "launch.max_lora_rank",
            ],
            (0, "with chat messages"),
        ),
    ],
)
def test_swapping_vllm_for_another_engine_lists_every_refusal_at_once(
    engine: str, refused: list[str], hint: tuple[int, str]
) -> None:
    report = unillm.check_config(APP, env={}, engine=engine)
    assert settings(report) == refused
    assert all(p.error == "UnsupportedFeature" for p in report.problems)
    index, what_instead = hint
    assert what_instead in report.problems[index].message  # each says what to do instead


def test_mlx_in_process_is_checked_with_its_own_capabilities() -> None:
    report = unillm.check_config(CONFIGS / "mlx.toml", env={}, launch={"mlx": {"dtype": "float16"}})
    assert report.version is not None and report.version.endswith("+in-process")
    assert settings(report) == ["launch.dtype"]


def test_an_older_engine_version_is_checked_when_configured() -> None:
    report = unillm.check_config(APP, env={}, engine_version="0.5.4")
    assert report.version == "0.5.4"
    assert settings(report) == ["uses.json_schema", "uses.regex"]
    assert "vLLM >= 0.6" in report.problems[0].message


def test_bad_values_and_unknown_names_are_listed_too() -> None:
    report = unillm.check_config(
        APP,
        env={},
        uses=["json_schema", "jsonschema"],
        defaults={"temperature": -1, "max_tokenz": 3},
        launch={"max_num_seqs": 0},
    )
    problems = {p.setting: p for p in report.problems}
    assert "did you mean 'json_schema'" in problems["uses.jsonschema"].message
    assert "temperature" in problems["defaults.temperature"].message
    assert "did you mean 'max_tokens'" in problems["defaults.max_tokenz"].message
    assert problems["launch.max_num_seqs"].error == "InvalidOptions"


def test_a_launch_refusal_that_depends_on_another_setting_is_found() -> None:
    report = unillm.check_config({"engine": "vllm", "launch": {"model": "/m", "max_loras": 2}}, env={})
    assert settings(report) == ["launch.max_loras"]
    assert report.problems[0].error == "InvalidOptions"


def test_an_unreadable_config_is_one_problem() -> None:
    report = unillm.check_config({"engine": "vllm"}, env={})
    assert settings(report) == ["config"]
    assert "base_url" in report.problems[0].message


def test_a_missing_config_file_does_not_print_a_question_mark_for_the_engine(tmp_path: Path) -> None:
    report = unillm.check_config(tmp_path / "nope.toml")
    assert settings(report) == ["config"] and "does not exist" in report.problems[0].message
    assert "?" not in report.render().splitlines()[0]


def test_a_malformed_config_is_reported_in_one_readable_line() -> None:
    report = unillm.check_config({"base_url": "http://h:8000"}, env={})
    [problem] = report.problems
    assert problem.message == "engine: Field required" and problem.error == "InvalidOptions"


def test_cli_check_prints_every_problem_and_exits_1(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", str(APP), "--engine", "mlx"]) == 1
    out = capsys.readouterr().out
    assert out.startswith("11 problem(s) for mlx")
    assert "launch.dtype: UnsupportedFeature: mlx cannot honour dtype" in out


def test_cli_check_json_and_a_clean_config(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", str(CONFIGS / "tgi.toml"), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report == {"engine": "tgi", "version": "3.3.6", "problems": []}
