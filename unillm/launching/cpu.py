"""Run an engine on a CPU-only machine: each adapter's CPU recipe, applied by the core.

    async with unillm.launch("vllm", model="/models/qwen2.5-0.5b", cpu=True) as llm: ...
    settings = unillm.cpu_settings("vllm", "/models/qwen2.5-0.5b")   # inspect or change first
    async with unillm.launch("vllm", **settings) as llm: ...

A recipe is declared by the engine's adapter (``Adapter.cpu_recipe``, pure) and picks settings
that fit a small machine (for vLLM: a 1 GiB KV cache, a context length fitted to it, eager
mode); the settings you pass win over it. Engine caches and temporary files go to a private work
dir, by default ``$UNILLM_CACHE/cpu/<engine>``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from unillm.adapter.base import Adapter
from unillm.adapter.launch_spec import CpuRecipe, LaunchSpec
from unillm.adapter.registry import get_adapter
from unillm.errors import LaunchError

__all__ = ["apply_cpu_recipe", "cpu_settings", "cpu_workdir", "merge_recipe"]


def cpu_workdir(engine: str) -> Path:
    """The default private work dir of ``engine``'s CPU recipe: ``$UNILLM_CACHE/cpu/<engine>``."""
    from unillm.launching.envs import cache_root

    return cache_root() / "cpu" / engine


def merge_recipe(spec: LaunchSpec, recipe: CpuRecipe) -> LaunchSpec:
    """``spec`` with the recipe filled in (pure): fields set in ``spec`` win, env is merged,
    the recipe's extra_args come first. The result has ``cpu=False`` (applied once)."""
    from unillm.adapter.launch_spec import build_spec

    mine = {name: getattr(spec, name) for name in spec.model_fields_set}
    merged: dict[str, Any] = {**dict(recipe.settings), **mine, "cpu": False}
    merged["env"] = {**dict(recipe.settings.get("env", {})), **spec.env}
    merged["extra_args"] = [*recipe.settings.get("extra_args", ()), *spec.extra_args]
    return build_spec(None, merged)


def apply_cpu_recipe(adapter: Adapter, spec: LaunchSpec, workdir: Path | None = None) -> LaunchSpec:
    """The spec ready to launch on a CPU: recipe merged, its folders made, its preparation run."""
    workdir = Path(workdir) if workdir is not None else cpu_workdir(adapter.name)
    recipe = adapter.cpu_recipe(spec, workdir)
    merged = merge_recipe(spec, recipe)
    for folder in recipe.dirs:
        folder.mkdir(parents=True, exist_ok=True)
    if recipe.engine_env is not None and merged.python is None and not merged.prefix:
        merged = merged.model_copy(update={"python": str(_recipe_python(adapter, recipe))})
    if recipe.experimental:
        print(f"[unillm] {adapter.name} on CPU is experimental: {recipe.experimental}", file=sys.stderr)
    return recipe.prepare(merged) if recipe.prepare is not None else merged


def cpu_settings(
    engine: str, model: str | Path, *, workdir: str | Path | None = None, **settings: Any
) -> dict[str, Any]:
    """LaunchSpec fields that run ``engine`` with ``model`` on a CPU-only machine.

        settings = unillm.cpu_settings("vllm", "/models/qwen2.5-0.5b", max_model_len=4096)
        async with unillm.launch("vllm", **settings) as llm: ...

    ``settings`` (LaunchSpec fields) win over the recipe; ``workdir`` holds the engine's caches
    and temporary files (default ``$UNILLM_CACHE/cpu/<engine>``). Same as ``launch(..., cpu=True)``.

    Args:
        engine: The adapter's name ("vllm", "sglang", "llamacpp", ...).
        model: The model's name or local path.
        workdir: The engine's caches and temporary files; None is ``$UNILLM_CACHE/cpu/<engine>``.
        **settings: LaunchSpec fields that win over the recipe's.

    Returns:
        LaunchSpec settings for a CPU-only host, to pass to :func:`unillm.launch`.

    Raises:
        UnsupportedFeature: The engine has no CPU recipe.
    """
    from unillm.adapter.launch_spec import build_spec

    adapter = get_adapter(engine)
    spec = build_spec(None, {"model": str(model), **settings, "cpu": False})
    ready = apply_cpu_recipe(adapter, spec, Path(workdir) if workdir is not None else None)
    return {name: getattr(ready, name) for name in ready.model_fields_set if name != "cpu"}


def _recipe_python(adapter: Adapter, recipe: CpuRecipe) -> Path:
    from unillm.launching.envs import env_dir

    assert recipe.engine_env is not None
    python = env_dir(recipe.engine_env) / "bin" / "python"
    if not python.is_file():
        raise LaunchError(
            f"{adapter.name}'s CPU recipe runs from the env {recipe.engine_env!r}, which is not built "
            f"({python} is missing). {recipe.experimental}",
            command="(cpu recipe)",
            log_tail=[],
        )
    return python
