"""Launching llama-cpp-python's server: the command line, the managed install and the CPU recipe."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from unillm.adapter import CpuRecipe, LaunchCommand, LaunchSpec, Refuse, unsupported
from unillm.adapter.base import EngineInstall
from unillm_llamacpp.serve import API_KEY_ENV, SERVER_MAIN

__all__ = ["ENGINE_PACKAGE", "HEALTH_PATH", "command", "cpu_recipe", "install", "refuse_unsupported"]

ENGINE_VERSION = "0.3.36"
ENGINE_PACKAGE = f"llama-cpp-python[server]=={ENGINE_VERSION}"
HEALTH_PATH = "/openapi.json"  # no /health; this one is served without the API key
PROMPT_LOOKUP = "prompt-lookup-decoding"
ONE_DEVICE = unsupported(
    "llama-cpp-python's server runs one model in one process",
    "Use vLLM or SGLang to split a model or to serve several nodes",
)
NO_SPEC = unsupported(
    "llama-cpp-python's server only speculates by prompt lookup",
    'Use unillm.Speculative(method="ngram", num_tokens=k)',
)


def install(*, gpu: bool) -> EngineInstall:
    """llama-cpp-python's server, compiled for this machine's CPU (pip caches the built wheel).

    The same CPU build with ``gpu=True``: a CUDA build needs ``CMAKE_ARGS="-DGGML_CUDA=on"``
    at compile time; install that yourself and pass ``python=<its interpreter>``.
    """
    return EngineInstall(packages=(ENGINE_PACKAGE,), python="3.11")


def command(spec: LaunchSpec) -> LaunchCommand:
    """``python -c SERVER_MAIN <settings>``: llama-cpp-python's server app (see ``serve``)."""
    refuse_unsupported(spec)
    base: dict[str, Any] = {"model": spec.model}
    if spec.max_model_len is not None:
        base["n_ctx"] = spec.max_model_len
    if spec.prefix_caching is not None:
        base["cache"] = spec.prefix_caching  # llama-cpp-python's RAM prompt cache (off by default)
    if spec.speculative is not None:
        base.update(draft_model=PROMPT_LOOKUP, draft_model_num_pred_tokens=spec.speculative.num_tokens)
    models = [{**base, "model_alias": spec.served_name or spec.model}]
    models += [{**base, "model_alias": name, "lora_path": path} for name, path in spec.lora.items()]
    config = {"host": spec.host, "port": spec.port or 8000, "interrupt_requests": False, "models": models}
    argv = [spec.python or "python", "-c", SERVER_MAIN, json.dumps(config), *spec.extra_args]
    key = spec.key()
    env = {API_KEY_ENV: key} if key else {}
    return LaunchCommand(argv=argv, env=env, health_path=HEALTH_PATH, secrets=(key,) if key else ())


def cpu_recipe(spec: LaunchSpec, workdir: Path) -> CpuRecipe:
    """llama.cpp runs on CPUs as it is; the recipe converts a Hugging Face Llama folder and
    its PEFT LoRA adapters to GGUF first (cached under ``$UNILLM_CACHE/gguf``; needs
    ``unillm-llamacpp[convert]``), and sizes the context to 1024 tokens unless set."""
    from unillm_llamacpp.prepare import to_gguf_spec

    settings: dict[str, Any] = {} if spec.max_model_len is not None else {"max_model_len": 1024}
    return CpuRecipe(settings=settings, prepare=to_gguf_spec)


def refuse_unsupported(spec: LaunchSpec) -> None:
    """Raise UnsupportedFeature for launch settings llama-cpp-python's server cannot honour."""
    no = Refuse("llamacpp")
    no.admission(spec, "llama-cpp-python's server")
    if not spec.model.endswith(".gguf"):
        raise no(
            "a non-GGUF model",
            f"llama.cpp serves GGUF files, and {spec.model!r} is not one",
            "Launch with cpu=True (converts a Hugging Face Llama folder), or convert it with "
            "unillm_llamacpp.gguf_convert.to_gguf (or llama.cpp's convert_hf_to_gguf.py)",
        )
    for name, path in spec.lora.items():
        if not path.endswith(".gguf"):
            raise no(
                f"LoRA {name!r}",
                f"llama.cpp loads GGUF LoRA files, and {path!r} is not one",
                "Launch with cpu=True (converts PEFT adapters), or convert it with "
                "unillm_llamacpp.gguf_convert.lora_to_gguf (or convert_lora_to_gguf.py)",
            )
    if spec.task == "embed":
        raise no(
            'task="embed"',
            "unillm launches llama-cpp-python for generation only",
            'Use unillm.launch("vllm", ..., task="embed")',
        )
    p = spec.parallel
    if p.tensor > 1 or p.pipeline > 1 or p.data > 1 or p.expert or spec.nodes or spec.pd:
        raise no("parallel", ONE_DEVICE.why, ONE_DEVICE.alternative)
    if spec.speculative is not None:
        s = spec.speculative
        if s.method != "ngram":
            raise no(f"speculative method {s.method!r}", NO_SPEC.why, NO_SPEC.alternative)
        if s.lookup_max is not None or s.lookup_min is not None:
            raise no(
                "speculative lookup_max/lookup_min",
                "llama-cpp-python's server sets only the number of tokens to predict",
                "Drop lookup_max/lookup_min (num_tokens is honoured)",
            )
    if spec.runtime_lora:
        raise no(
            "runtime_lora",
            "llama-cpp-python loads LoRA adapters with the model",
            "Pass lora={name: path} at launch",
        )
    if spec.max_num_seqs is not None and spec.max_num_seqs > 1:
        raise no(
            "max_num_seqs > 1",
            "llama-cpp-python's server answers one request at a time",
            "Drop max_num_seqs=, or run replicas (a Fleet)",
        )
    unsupported_settings = {
        "dtype": "a GGUF file stores its own types (convert with another --outtype)",
        "quantization": "llama.cpp quantizes GGUF files offline (llama-quantize), not at launch",
        "memory_fraction": "llama-cpp-python has no memory-fraction setting",
        "max_lora_rank": "llama.cpp reads the rank from each GGUF LoRA file",
        "max_loras": "each LoRA is served as its own model name",
    }
    for setting, why in unsupported_settings.items():
        if getattr(spec, setting) is not None:
            raise no(setting, why, f"Drop {setting}=")
