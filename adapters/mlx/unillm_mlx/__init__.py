"""MLX adapter for unillm: mlx-lm as a server (``mlx_lm.server``) or inside your process.

    async with unillm.launch("mlx", model="/models/qwen-4bit") as llm: ...            # a server
    async with unillm.launch("mlx", model="/models/qwen-4bit", in_process=True) as llm:
        r = await llm.generate("Date?", output=unillm.Regex(r"\\d{4}-\\d{2}-\\d{2}"))  # constrained

Server mode speaks mlx_lm.server's OpenAI API and handles its quirks: per-request adapters only
apply with an explicit model path (``lora="name"`` sends both), a draft model needs the prompt
cache off, and constrained output is refused (the server silently ignores it). In-process mode
answers the same API from mlx-lm inside this process, with constraints enforced during decoding
by llguidance; its discovery reports the version ``<mlx-lm version>+in-process``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from unillm_mlx.adapter import DEFAULT_MODEL, IN_PROCESS_SUFFIX, MLXAdapter, is_in_process
from unillm_mlx.launch import SERVER_MAIN, refuse_unsupported

if TYPE_CHECKING:
    from unillm_mlx.peft import convert_peft_adapter as convert_peft_adapter
    from unillm_mlx.peft import is_peft_adapter as is_peft_adapter

__all__ = [
    "DEFAULT_MODEL",
    "IN_PROCESS_SUFFIX",
    "SERVER_MAIN",
    "MLXAdapter",
    "convert_peft_adapter",
    "is_in_process",
    "is_peft_adapter",
    "refuse_unsupported",
]


def __getattr__(name: str) -> Any:
    if name in ("convert_peft_adapter", "is_peft_adapter"):
        from unillm_mlx import peft

        return getattr(peft, name)
    raise AttributeError(f"module 'unillm_mlx' has no attribute {name!r}")
