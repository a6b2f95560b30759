"""MLX's CPU recipe, declared by the adapter: no key, an offline hub, PEFT LoRAs converted for the server."""

from __future__ import annotations

from pathlib import Path

import unillm
from unillm.testing.tiny_model import TinyModel


def test_server_recipe_converts_peft_loras_into_the_work_dir(tiny: TinyModel, tmp_path: Path) -> None:
    settings = unillm.cpu_settings("mlx", tiny.path, workdir=tmp_path, lora={"sql": str(tiny.loras["sql"])})
    converted = Path(settings["lora"]["sql"])
    assert converted.is_relative_to(tmp_path)
    assert (converted / "adapters.safetensors").is_file()
    assert settings["api_key"] is None  # mlx_lm.server has no authentication


def test_in_process_recipe_leaves_loras_to_the_engine(tiny: TinyModel, tmp_path: Path) -> None:
    settings = unillm.cpu_settings(
        "mlx", tiny.path, workdir=tmp_path, in_process=True, lora={"sql": str(tiny.loras["sql"])}
    )
    assert settings["lora"] == {"sql": str(tiny.loras["sql"])}


def test_a_local_model_stays_off_the_hub(tiny: TinyModel, tmp_path: Path) -> None:
    env = unillm.cpu_settings("mlx", tiny.path, workdir=tmp_path)["env"]
    assert env["HF_HUB_OFFLINE"] == "1"
    assert Path(env["HF_HUB_CACHE"]).is_dir()
    assert "HF_HUB_OFFLINE" not in unillm.cpu_settings("mlx", "mlx-community/x", workdir=tmp_path)["env"]


def test_launch_cpu_true_renders_a_server_command_without_a_key(tiny: TinyModel, tmp_path: Path) -> None:
    run = unillm.launch("mlx", model=str(tiny.path), cpu=True, python="/usr/bin/python3")
    assert run.spec.key() is None
    assert "HF_HUB_OFFLINE=1" in run.command().render()
