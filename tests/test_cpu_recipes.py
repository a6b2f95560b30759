"""CPU recipes: each adapter declares one (pure); the core merges it under the caller's settings."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

import unillm
from unillm.adapter.registry import get_adapter
from unillm.launching.cpu import merge_recipe

PY = "/usr/bin/python3"


def test_vllm_recipe_bounds_the_kv_cache_and_fits_the_context_to_it(tmp_path: Path) -> None:
    settings = unillm.cpu_settings("vllm", "/models/small", workdir=tmp_path)
    assert settings["env"]["VLLM_CPU_KVCACHE_SPACE"] == "1"
    assert settings["extra_args"][-2:] == ["--max-model-len", "-1"]
    assert "--enforce-eager" in settings["extra_args"]
    assert settings["max_num_seqs"] == 8 and settings["dtype"] == "bfloat16"


def test_vllm_recipe_keeps_a_max_model_len_the_caller_sets(tmp_path: Path) -> None:
    settings = unillm.cpu_settings("vllm", "/models/small", workdir=tmp_path, max_model_len=2048)
    assert settings["max_model_len"] == 2048
    assert "-1" not in settings["extra_args"]


def test_the_callers_settings_win_env_merges_and_extra_args_come_last(tmp_path: Path) -> None:
    settings = unillm.cpu_settings(
        "vllm",
        "/models/small",
        workdir=tmp_path,
        max_num_seqs=2,
        env={"VLLM_CPU_KVCACHE_SPACE": "3", "MINE": "1"},
        extra_args=["--seed", "7"],
    )
    assert settings["max_num_seqs"] == 2
    assert settings["env"]["VLLM_CPU_KVCACHE_SPACE"] == "3"
    assert settings["env"]["MINE"] == "1" and "VLLM_CACHE_ROOT" in settings["env"]
    assert settings["extra_args"][-2:] == ["--seed", "7"]
    assert settings["extra_args"][0] == "--enforce-eager"


def test_vllm_recipe_keeps_its_files_in_the_work_dir_and_creates_it(tmp_path: Path) -> None:
    settings = unillm.cpu_settings("vllm", "/models/small", workdir=tmp_path / "w")
    for key in ("VLLM_CACHE_ROOT", "VLLM_RPC_BASE_PATH", "TMPDIR"):
        assert Path(settings["env"][key]).is_dir()
        assert Path(settings["env"][key]).is_relative_to(tmp_path / "w")


def test_a_hub_model_is_not_forced_offline(tmp_path: Path) -> None:
    local = unillm.cpu_settings("vllm", "/models/small", workdir=tmp_path)
    hub = unillm.cpu_settings("vllm", "Qwen/Qwen2.5-0.5B-Instruct", workdir=tmp_path)
    assert local["env"]["HF_HUB_OFFLINE"] == "1"
    assert "HF_HUB_OFFLINE" not in hub["env"]


def test_launch_cpu_true_renders_the_recipe_in_the_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("UNILLM_CACHE", str(tmp_path))
    run = unillm.launch("vllm", model="/models/small", cpu=True, python=PY, max_num_seqs=4)
    line = run.command().render()
    assert "VLLM_CPU_KVCACHE_SPACE=1" in line
    assert "--max-num-seqs 4" in line and "--max-model-len -1" in line
    assert f"VLLM_CACHE_ROOT={tmp_path / 'cpu' / 'vllm' / 'cache'}" in line
    assert run.spec.cpu is False  # applied once


def test_launch_with_a_spec_and_cpu_true_keeps_the_specs_own_fields(tmp_path: Path) -> None:
    spec = unillm.LaunchSpec(model="/models/small", dtype="float32", python=PY, env={"TMPDIR": str(tmp_path)})
    run = unillm.launch("vllm", spec, cpu=True)
    argv, env = run.command().argv, run.command().env
    assert argv[argv.index("--dtype") + 1] == "float32"
    assert env["TMPDIR"] == str(tmp_path) and env["VLLM_CPU_KVCACHE_SPACE"] == "1"


def test_merging_a_recipe_twice_changes_nothing(tmp_path: Path) -> None:
    adapter = get_adapter("vllm")
    spec = unillm.LaunchSpec(model="/m", cpu=True, extra_args=["--seed", "1"])
    once = merge_recipe(spec, adapter.cpu_recipe(spec, tmp_path))
    assert once.extra_args.count("--enforce-eager") == 1
    assert once.cpu is False


def test_an_engine_without_a_recipe_says_so() -> None:
    with pytest.raises(unillm.UnsupportedFeature, match="tgi cannot honour a CPU launch recipe"):
        unillm.cpu_settings("tgi", "/models/small")


def test_recipes_are_pure(tmp_path: Path) -> None:
    for engine in ("vllm", "mlx", "sglang"):
        get_adapter(engine).cpu_recipe(unillm.LaunchSpec(model="/m"), tmp_path / engine)
    assert list(tmp_path.iterdir()) == []  # nothing created until the core applies a recipe


def test_cli_launch_cpu_dry_run_prints_the_recipe(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from unillm.cli.main import main

    monkeypatch.setenv("UNILLM_CACHE", str(tmp_path))
    assert (
        main(
            [
                "launch",
                "vllm",
                "--cpu",
                "--model",
                "/m",
                "--dry-run",
                "--python",
                PY,
                "--max-model-len",
                "4096",
            ]
        )
        == 0
    )
    argv = shlex.split(capsys.readouterr().out)
    assert "VLLM_CPU_KVCACHE_SPACE=1" in argv
    assert argv[argv.index("--max-model-len") + 1] == "4096" and "-1" not in argv


def test_cli_launch_cpu_lets_the_recipe_turn_the_key_off(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from unillm.cli.main import main

    monkeypatch.setenv("UNILLM_CACHE", str(tmp_path))
    assert main(["launch", "mlx", "--cpu", "--model", "/m", "--dry-run", "--python", PY]) == 0
    out = capsys.readouterr().out
    assert "HF_HUB_OFFLINE=1" in out and "***" not in out  # mlx_lm.server has no authentication


def test_the_test_helper_takes_a_model_override(tmp_path: Path) -> None:
    from unillm.testing.engines import cpu_launch_settings
    from unillm.testing.tiny_model import build_tiny_model

    settings = cpu_launch_settings("vllm", build_tiny_model(), tmp_path, model="/other/model")
    assert settings["model"] == "/other/model"
