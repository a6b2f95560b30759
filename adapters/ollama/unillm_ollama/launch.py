"""``ollama serve`` launches: the environment it reads, the model pull once it is up, and refusals.

    command(LaunchSpec(model="llama3.2:1b", port=11500), binary="ollama")
    # OLLAMA_HOST=127.0.0.1:11500 ollama serve
    # once healthy: pull llama3.2:1b (POST /api/pull), progress reported as it downloads

Ollama is a program the user installs (not a pip package): the command names it as a
``Prerequisite`` the core looks up on PATH when the launch starts. Its settings are environment
variables (``envconfig/config.go``): ``OLLAMA_HOST``, ``OLLAMA_CONTEXT_LENGTH``,
``OLLAMA_NUM_PARALLEL``. The model is not an argument: it is pulled (``/api/pull``) once the
server answers, and copied to ``served_name`` (``/api/copy``) when one is given.
"""

from __future__ import annotations

from typing import Any

from unillm.adapter import (
    Feature,
    LaunchCommand,
    LaunchSpec,
    Prerequisite,
    RefusalRule,
    Refuse,
    StartStep,
    error_for_status,
)

ENGINE = "ollama"
BINARY = "ollama"
DEFAULT_PORT = 11434
HEALTH_PATH = "/api/version"
INSTALL = (
    "Install Ollama from https://ollama.com/download (Linux: curl -fsSL "
    "https://ollama.com/install.sh | sh; macOS: brew install ollama), or give its path with "
    'OllamaAdapter(binary="/path/to/ollama")'
)
LORA_ALTERNATIVE = (
    "Build a model with the adapter (a Modelfile with FROM <base> and ADAPTER <path>, then "
    "`ollama create <name> -f Modelfile`) and pass lora=<name> per request"
)


def command(spec: LaunchSpec, binary: str = BINARY) -> LaunchCommand:
    """The command, environment and start steps that serve ``spec`` with ``ollama serve`` (pure)."""
    _refuse_unsupported(spec)
    env = {"OLLAMA_HOST": f"{spec.host}:{spec.port or DEFAULT_PORT}"}
    if spec.max_model_len is not None:
        env["OLLAMA_CONTEXT_LENGTH"] = str(spec.max_model_len)
    if spec.max_num_seqs is not None:
        env["OLLAMA_NUM_PARALLEL"] = str(spec.max_num_seqs)
    steps = [
        StartStep(
            f"pull {spec.model}", "POST", "/api/pull", {"model": spec.model, "stream": True}, pull_progress
        )
    ]
    if spec.served_name and spec.served_name != spec.model:
        steps.append(
            StartStep(
                f"copy {spec.model} to {spec.served_name}",
                "POST",
                "/api/copy",
                {"source": spec.model, "destination": spec.served_name},
            )
        )
    return LaunchCommand(
        argv=[binary, "serve", *spec.extra_args],
        env=env,
        health_path=HEALTH_PATH,
        after_start=tuple(steps),
        requires=(Prerequisite("binary", binary, INSTALL),),
    )


def pull_progress(event: Any) -> str | None:
    """One line of ``/api/pull``'s NDJSON (ProgressResponse) as a progress line; an error line raises."""
    if not isinstance(event, dict):
        return None
    if event.get("error"):
        raise error_for_status(ENGINE, 500, f"pull failed: {event['error']}", None)
    status = str(event.get("status") or "")
    total, completed = event.get("total"), event.get("completed")
    if isinstance(total, int) and total > 0 and isinstance(completed, int):
        return f"{status} {completed * 100 // total}% of {total / 1e6:.0f} MB"
    return status or None


#: Settings Ollama has no counterpart for, refused in this order (after a model path and parallel).
_REFUSALS: tuple[RefusalRule, ...] = (
    (
        lambda spec: spec.dtype is not None,
        "dtype",
        "an Ollama model's weights are fixed by its tag",
        "Pick a tag with the precision you want (e.g. ':fp16')",
    ),
    (
        lambda spec: spec.quantization is not None,
        "quantization",
        "an Ollama model is quantized when it is built",
        "Pick a quantized tag (e.g. 'llama3.2:1b-instruct-q4_K_M')",
    ),
    (
        lambda spec: spec.memory_fraction is not None,
        "memory_fraction",
        "Ollama sizes its memory use per model (it has no share-of-memory setting)",
        "Leave it unset (env={'OLLAMA_GPU_OVERHEAD': '<bytes>'} reserves memory per GPU)",
    ),
    (
        lambda spec: spec.prefix_caching is False,
        "prefix_caching=False",
        "Ollama always reuses a slot's cached prompt prefix",
        "Leave prefix_caching unset",
    ),
    (
        lambda spec: spec.lora or spec.max_lora_rank is not None or spec.max_loras is not None,
        "lora at launch",
        "Ollama serves a LoRA as a model of its own, not as an adapter loaded at launch",
        LORA_ALTERNATIVE,
    ),
    (
        lambda spec: spec.runtime_lora,
        Feature.LORA_RUNTIME.value,
        "Ollama cannot load LoRA adapters into a running model",
        LORA_ALTERNATIVE,
    ),
)


def _refuse_unsupported(spec: LaunchSpec) -> None:
    no = Refuse(ENGINE)
    p = spec.parallel
    if spec.model.startswith(("/", "./", "../", "~")):
        raise no(
            "a model path",
            "Ollama serves models by name from its library or its own store, not files",
            "Pass a library name (model='llama3.2:1b'); for a local GGUF, write a Modelfile "
            "(FROM /path/model.gguf), run `ollama create <name> -f Modelfile` and pass model=<name>",
        )
    if p.tensor > 1 or p.pipeline > 1 or p.data > 1 or p.expert:
        raise no(
            Feature.TENSOR_PARALLEL.value
            if p.tensor > 1 or p.expert
            else Feature.PIPELINE_PARALLEL.value
            if p.pipeline > 1
            else Feature.DATA_PARALLEL.value,
            "Ollama places a model on the GPUs it finds by itself; it has no parallel layout settings",
            "Leave parallel unset (env={'OLLAMA_SCHED_SPREAD': '1'} spreads a model over every GPU), "
            "or use vLLM or SGLang",
        )
    no.first_of(spec, _REFUSALS)
    no.admission(
        spec,
        "Ollama",
        "Drop max_queued_requests= and cap Ollama's own queue with env={'OLLAMA_MAX_QUEUE': 'N'} "
        "(it answers 503 past it, unillm's Overloaded)",
    )
    if spec.speculative is not None:
        raise no(
            f"speculative {spec.speculative.method}",
            "Ollama's server has no speculative decoding setting",
            "Drop speculative=, or use vLLM, SGLang or TensorRT-LLM",
        )
    no.key_without_auth(spec, "Ollama")
