"""``unillm --help`` reads cleanly and every flag says what it does; ``unillm tiny-model``."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from unillm.cli.main import _parser, main


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    [action] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(action.choices)


def test_top_level_help_has_no_docstring_markup(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    assert "``" not in out and ":func:" not in out
    assert "unillm launch vllm --cpu --model M" in out


@pytest.mark.parametrize("command", sorted(_subparsers(_parser())))
def test_every_flag_and_argument_of_every_command_has_help(command: str) -> None:
    sub = _subparsers(_parser())[command]
    missing = [a.dest for a in sub._actions if not a.help]
    assert missing == []
    assert sub.description and "``" not in sub.description


def test_tiny_model_json_prints_existing_model_and_lora_paths(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["tiny-model", "--json"]) == 0
    paths = json.loads(capsys.readouterr().out)
    assert (Path(paths["model"]) / "config.json").is_file()
    assert set(paths["loras"]) == {"sql", "poem"}
    assert all((Path(p) / "adapter_config.json").is_file() for p in paths["loras"].values())


def test_tiny_model_prints_a_launch_line_to_try(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["tiny-model"]) == 0
    out = capsys.readouterr().out
    assert "unillm launch vllm --cpu --model " in out


def test_tiny_model_without_its_packages_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def missing(*args: object, **kwargs: object) -> None:
        raise ModuleNotFoundError("No module named 'safetensors'")

    monkeypatch.setattr("unillm.testing.tiny_model.build_tiny_model", missing)
    assert main(["tiny-model"]) == 2
    assert "pip install 'unillm-sdk[testing]'" in capsys.readouterr().err


def test_the_help_lists_every_installed_engine(capsys: pytest.CaptureFixture[str]) -> None:
    """The engine names in the help are the installed adapters', read at run time (never typed)."""
    from unillm.adapter.registry import installed_engines

    for command in ([], ["setup"], ["launch"]):
        with pytest.raises(SystemExit):
            main([*command, "--help"])
        out = " ".join(capsys.readouterr().out.split())
        assert installed_engines() and [e for e in installed_engines() if e not in out] == [], command
