"""Launch settings that make each engine run on a CPU-only machine with the tiny model.

    tiny = build_tiny_model()
    async with unillm.launch("vllm", **cpu_launch_settings("vllm", tiny, workdir)) as llm: ...
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from unillm.testing.tiny_model import TinyModel


def cpu_launch_settings(engine: str, tiny: TinyModel, workdir: Path, **overrides: Any) -> dict[str, Any]:
    """LaunchSpec fields for ``engine`` on CPU; ``overrides`` win. Private dirs live in ``workdir``."""
    if engine != "vllm":
        raise ValueError(f"no CPU recipe for {engine!r} yet (known: vllm)")
    for sub in ("cache", "rpc", "tmp"):
        (workdir / sub).mkdir(parents=True, exist_ok=True)
    settings: dict[str, Any] = {
        "model": str(tiny.path),
        "served_name": "tiny",
        "dtype": "bfloat16",
        "max_model_len": 512,
        "max_num_seqs": 8,
        "env": {
            "VLLM_CPU_KVCACHE_SPACE": "1",  # GiB of KV cache; whole numbers only
            "VLLM_CACHE_ROOT": str(workdir / "cache"),
            "VLLM_RPC_BASE_PATH": str(workdir / "rpc"),
            "TMPDIR": str(workdir / "tmp"),
            "HF_HUB_OFFLINE": "1",
        },
        # Random weights emit whitespace forever inside JSON unless the grammar forbids it;
        # the per-request field is ignored, and the option needs an explicit backend.
        "extra_args": ["--enforce-eager", "--structured-outputs-config",
                       '{"backend":"xgrammar","disable_any_whitespace":true}'],
    }
    settings.update(overrides)
    return settings
