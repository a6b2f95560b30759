"""Launch settings that make each engine run on a CPU-only machine with the tiny model.

    tiny = build_tiny_model()
    async with unillm.launch("vllm", **cpu_launch_settings("vllm", tiny, workdir)) as llm: ...
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from unillm.adapter import Adapter
from unillm.entrypoints import connect
from unillm.llm import LLM
from unillm.supervisor import Launch
from unillm.testing.tiny_model import TinyModel


@dataclass(frozen=True)
class RunningEngine:
    """An engine started with ``unillm.launch`` (e.g. by a test fixture): connect more clients.

        with launch.blocking():
            engine = RunningEngine(launch)
            async with engine.connect() as llm: ...
    """

    launch: Launch

    @property
    def base_url(self) -> str:
        """Where the engine listens."""
        return self.launch.base_url

    @property
    def api_key(self) -> str | None:
        """The engine's API key (generated at launch unless given)."""
        return self.launch.spec.key()

    def connect(self, *, adapter: Adapter | None = None, **kwargs: Any) -> LLM:
        """A new client; ``adapter`` overrides the launch's (e.g. a differently configured one)."""
        if adapter is not None:
            return LLM(adapter, self.base_url, api_key=self.api_key, **kwargs)
        return connect(self.launch.adapter.name, self.base_url, api_key=self.api_key, **kwargs)


def cpu_launch_settings(engine: str, tiny: TinyModel, workdir: Path, **overrides: Any) -> dict[str, Any]:
    """LaunchSpec fields for ``engine`` on CPU; ``overrides`` win. Private dirs live in ``workdir``."""
    if engine == "mlx":
        from unillm.testing.mlx_recipe import mlx_launch_settings

        return mlx_launch_settings(tiny, workdir, **{"in_process": True, **overrides})
    if engine != "vllm":
        raise ValueError(f"no CPU recipe for {engine!r} (known: vllm, mlx)")
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
