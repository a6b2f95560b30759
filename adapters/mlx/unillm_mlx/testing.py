"""MLX's test recipe: mlx-lm with unillm's tiny model, as a server or in-process (tests, benchmarks).

    tiny = build_tiny_model()
    async with unillm.launch("mlx", **mlx_launch_settings(tiny, workdir)) as llm: ...
    async with unillm.launch("mlx", **mlx_launch_settings(tiny, workdir, in_process=True)) as llm: ...

The settings are MLX's CPU recipe (``MLXAdapter.cpu_recipe``, applied by :func:`unillm.cpu_settings`):
PEFT adapters passed in ``lora=`` (like ``tiny.loras``) are converted into ``workdir`` for the
server. Like every module of an adapter package, this one imports the adapter SDK and, being a
test recipe, the test kit (``unillm.testing``) only.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from unillm.testing.engines import RunningEngine, cpu_launch_settings
from unillm.testing.tiny_model import TinyModel

__all__ = ["MLXServer", "mlx_launch_settings"]


def mlx_launch_settings(
    tiny: TinyModel, workdir: Path, *, in_process: bool = False, **overrides: Any
) -> dict[str, Any]:
    """LaunchSpec fields for MLX with the tiny model; ``overrides`` win (PEFT LoRAs are converted)."""
    return cpu_launch_settings("mlx", tiny, workdir, in_process=in_process, **overrides)


@dataclass(frozen=True)
class MLXServer(RunningEngine):
    """A running mlx_lm.server (for tests): ``server.connect()`` gives an LLM bound like launch's,
    knowing the model path and the LoRA names."""

    bound: ClassVar[bool] = True
