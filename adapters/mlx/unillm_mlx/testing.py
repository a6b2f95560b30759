"""MLX's test recipe: mlx-lm with unillm's tiny model, as a server or in-process (tests, benchmarks).

    tiny = build_tiny_model()
    async with unillm.launch("mlx", **mlx_launch_settings(tiny, workdir)) as llm: ...
    async with unillm.launch("mlx", **mlx_launch_settings(tiny, workdir, in_process=True)) as llm: ...

The settings are MLX's CPU recipe (``MLXAdapter.cpu_recipe``, applied by :func:`unillm.cpu_settings`):
PEFT adapters passed in ``lora=`` (like ``tiny.loras``) are converted into ``workdir`` for the
server.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from unillm import cpu_settings
from unillm.testing.tiny_model import TinyModel

if TYPE_CHECKING:
    from unillm import LLM, Launch

__all__ = ["MLXServer", "mlx_launch_settings"]


def mlx_launch_settings(
    tiny: TinyModel, workdir: Path, *, in_process: bool = False, **overrides: Any
) -> dict[str, Any]:
    """LaunchSpec fields for MLX with the tiny model; ``overrides`` win (PEFT LoRAs are converted)."""
    return cpu_settings("mlx", tiny.path, workdir=workdir, in_process=in_process, **overrides)


@dataclass(frozen=True)
class MLXServer:
    """A running mlx_lm.server (for tests): ``server.connect()`` gives an LLM bound like launch's."""

    launch: Launch

    def connect(self, **kwargs: Any) -> LLM:
        """A fresh LLM for the server, knowing its model path and LoRA names."""
        from unillm import LLM

        return LLM(self.launch.adapter.bind(self.launch.spec), self.launch.base_url, **kwargs)
