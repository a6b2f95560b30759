"""Aphrodite Engine's launch: the command line for a LaunchSpec (pure: no I/O).

``python -m aphrodite.endpoints.openai.api_server --model M ...`` is what ``aphrodite run M`` runs
(the console script is a thin wrapper around it); the module form starts the engine env's own
interpreter, ``spec.python``.
"""

from __future__ import annotations

from unillm.adapter import EngineInstall, Flags, LaunchCommand, LaunchSpec, Refuse, UnsupportedFeature

__all__ = ["ENGINE_MODULE", "SERVER_MODULE", "command", "install"]

ENGINE_MODULE = "aphrodite"
SERVER_MODULE = "aphrodite.endpoints.openai.api_server"
_NOT_MAPPED = "the Aphrodite Engine adapter does not map this setting (yet)"
_SPEC_METHODS = ("ngram", "draft")


def command(spec: LaunchSpec, health_path: str = "/health") -> LaunchCommand:
    """``python -m SERVER_MODULE --model M --host H --port P ...``; refuses what it cannot map.

    Args:
        spec: The launch settings.
        health_path: The path that answers once the engine is ready.

    Returns:
        The command line, with the API key (``--api-keys``) masked when printed.
    """
    _refuse_unmapped(spec)
    argv = [spec.python or "python", "-m", SERVER_MODULE, "--model", spec.model, "--host", spec.host]
    flags = Flags(argv)
    flags.add("--port", spec.port)
    flags.add("--served-model-name", spec.served_name)
    flags.add("--dtype", spec.dtype)
    flags.add("--max-model-len", spec.max_model_len)
    flags.add("--max-num-seqs", spec.max_num_seqs)
    flags.add("--gpu-memory-utilization", spec.memory_fraction)
    flags.add("--quantization", spec.quantization)
    flags.switch("--enable-prefix-caching", spec.prefix_caching is True)
    _parallel(spec, flags)
    _lora(spec, argv)
    _speculative(spec, flags)
    key = spec.key()
    flags.add("--api-keys", key)
    argv += spec.extra_args
    return LaunchCommand(argv=argv, env={}, health_path=health_path, secrets=(key,) if key else ())


def install(gpu: bool = True) -> EngineInstall:
    """What ``unillm setup aphrodite`` installs: the ``aphrodite-engine`` wheel (CUDA builds only).

    Args:
        gpu: Whether the machine has a GPU; Aphrodite Engine publishes no CPU wheel.

    Returns:
        The pip requirements for the engine's own venv.

    Raises:
        UnsupportedFeature: ``gpu=False``.
    """
    if not gpu:
        raise UnsupportedFeature(
            "aphrodite",
            "CPU install",
            why="Aphrodite Engine publishes CUDA wheels only (a CPU build is from source)",
            alternative="Build Aphrodite Engine from source and launch with python=, or use vLLM's CPU build",
        )
    return EngineInstall(packages=("aphrodite-engine",))


def _parallel(spec: LaunchSpec, flags: Flags) -> None:
    """Tensor and pipeline parallelism (``-tp`` / ``-pp``); 1 (the default) adds nothing."""
    p = spec.parallel
    flags.add("--tensor-parallel-size", p.tensor if p.tensor > 1 else None)
    flags.add("--pipeline-parallel-size", p.pipeline if p.pipeline > 1 else None)


def _lora(spec: LaunchSpec, argv: list[str]) -> None:
    """LoRA adapters loaded at start (``--lora-modules a=path b=path``), served as models by name."""
    flags = Flags(argv)
    if spec.lora:
        argv += ["--enable-lora", "--lora-modules", *(f"{n}={p}" for n, p in spec.lora.items())]
    flags.add("--max-lora-rank", spec.max_lora_rank)
    flags.add("--max-loras", spec.max_loras)


def _speculative(spec: LaunchSpec, flags: Flags) -> None:
    """ngram (``--speculative-model [ngram]``) or a draft model; the other methods are refused."""
    s = spec.speculative
    if s is None:
        return
    flags.add("--speculative-model", "[ngram]" if s.method == "ngram" else s.draft_model)
    flags.add("--num-speculative-tokens", s.num_tokens)
    flags.add("--ngram-prompt-lookup-max", s.lookup_max)
    flags.add("--ngram-prompt-lookup-min", s.lookup_min)


def _refuse_unmapped(spec: LaunchSpec) -> None:
    """Every setting the command does not map is refused before anything starts, never dropped."""
    no = Refuse("aphrodite")
    p = spec.parallel
    if p.data > 1 or p.expert:
        raise no(
            "parallel", "Aphrodite Engine splits a model by tensor or pipeline only", "Use Parallel(tensor=N)"
        )
    if spec.task != "generate":
        raise no(f"task={spec.task!r}", _NOT_MAPPED, 'Drop task= (or task="generate")')
    if spec.runtime_lora:
        raise no("runtime_lora", _NOT_MAPPED, "Load the LoRA adapters at start with lora=")
    if (spec.max_lora_rank is not None or spec.max_loras is not None) and not spec.lora:
        raise no("max_lora_rank", "Aphrodite Engine reads it only with LoRA on", "Set lora= too, or drop it")
    s = spec.speculative
    if s is not None and s.method not in _SPEC_METHODS:
        raise no(f"speculative={s.method!r}", _NOT_MAPPED, "Use method='ngram' or 'draft'")
    if s is not None and s.method != "ngram" and (s.lookup_max is not None or s.lookup_min is not None):
        raise no("speculative.lookup_max", "only ngram speculation reads it", "Drop lookup_max=/lookup_min=")
    no.set_settings(spec, {"nodes": _NOT_MAPPED, "pd": _NOT_MAPPED})
    no.admission(spec, "Aphrodite Engine")
