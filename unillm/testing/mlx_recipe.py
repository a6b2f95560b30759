"""Launch settings that run MLX (mlx-lm) with the tiny model, as a server or in-process.

    tiny = build_tiny_model()
    async with unillm.launch("mlx", **mlx_launch_settings(tiny, workdir)) as llm: ...
    async with unillm.launch("mlx", **mlx_launch_settings(tiny, workdir, in_process=True)) as llm: ...

mlx-lm loads LoRA adapters in its own layout, so PEFT adapters passed in ``lora=`` (like
``tiny.loras``) are converted into ``workdir`` first. Needs the ``unillm-mlx`` adapter installed.
"""

from __future__ import annotations

import platform
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from unillm.testing.tiny_model import TinyModel

if TYPE_CHECKING:
    from unillm.llm import LLM
    from unillm.supervisor import Launch

__all__ = ["MLXServer", "default_demo_engine", "mlx_launch_settings", "mlx_lora"]


def mlx_lora(adapter: str | Path, workdir: Path) -> str:
    """The adapter folder mlx-lm can load: PEFT adapters are converted once into ``workdir``."""
    from unillm_mlx.peft import convert_peft_adapter, is_peft_adapter

    source = Path(adapter)
    if not is_peft_adapter(source):
        return str(source)
    target = workdir / "mlx-loras" / source.name
    if not (target / "adapters.safetensors").is_file():
        convert_peft_adapter(source, target)
    return str(target)


def mlx_launch_settings(
    tiny: TinyModel, workdir: Path, *, in_process: bool = False, **overrides: Any
) -> dict[str, Any]:
    """LaunchSpec fields for MLX with the tiny model; ``overrides`` win (PEFT LoRAs are converted)."""
    hub = workdir / "hf-hub"  # mlx_lm.server lists this cache in /v1/models; it must exist
    hub.mkdir(parents=True, exist_ok=True)
    settings: dict[str, Any] = {
        "model": str(tiny.path),
        "in_process": in_process,
        "api_key": None,  # mlx_lm.server has no authentication
        "env": {"HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": str(hub)},
    }
    settings.update(overrides)
    if settings.get("lora"):
        settings["lora"] = {name: mlx_lora(path, workdir) for name, path in settings["lora"].items()}
    return settings


def default_demo_engine() -> str:
    """"mlx" on Apple Silicon (where vLLM's CPU build does not apply), else "vllm"."""
    return "mlx" if sys.platform == "darwin" and platform.machine() == "arm64" else "vllm"


@dataclass(frozen=True)
class MLXServer:
    """A running mlx_lm.server (for tests): ``server.connect()`` gives an LLM bound like launch's."""

    launch: Launch

    def connect(self, **kwargs: Any) -> LLM:
        """A fresh LLM for the server, knowing its model path and LoRA names."""
        from unillm.llm import LLM

        return LLM(self.launch.adapter.bind(self.launch.spec), self.launch.base_url, **kwargs)
