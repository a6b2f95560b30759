"""TGI launch commands: ``text-generation-launcher`` itself, or TGI's official container image.

    command(LaunchSpec(model="Qwen/Qwen2.5-0.5B-Instruct", port=8080), Runtime("docker"))
    # docker run --rm --name unillm-tgi-8080 --gpus all --shm-size 1g -p 127.0.0.1:8080:80
    #   -v ~/.cache/huggingface/hub:/data -e HF_TOKEN -e API_KEY
    #   ghcr.io/huggingface/text-generation-inference:3.3.5 --model-id Qwen/... --hostname 0.0.0.0 --port 80

The form is a setting of the adapter (``TGIAdapter(runtime="podman")``), so :func:`command`
stays pure; :func:`detect_runtime` is the one PATH look-up, done when the adapter is created.
The API key travels in the environment (``API_KEY``, which the launcher reads), never in argv;
the container gets it with ``-e API_KEY`` (name only: the value comes from docker's own
environment). Local model and adapter paths (absolute) are mounted read-only at the same path.
TGI has no served-name flag: ``served_name`` is the model name unillm reports in its results.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Literal

from unillm.adapter import Feature, LaunchCommand, LaunchSpec, RefusalRule, Refuse, UnsupportedFeature

ENGINE = "tgi"
LAUNCHER = "text-generation-launcher"
IMAGE = "ghcr.io/huggingface/text-generation-inference:3.3.5"
RUNTIME_ENV = "UNILLM_TGI_RUNTIME"
DEFAULT_PORT = 3000  # the launcher's own default
CONTAINER_PORT = 80
CONTAINER_CACHE = "/data"  # HF_HOME inside TGI's image
QUANTIZATIONS = (
    "awq",
    "compressed-tensors",
    "eetq",
    "exl2",
    "gptq",
    "marlin",
    "bitsandbytes",
    "bitsandbytes-nf4",
    "bitsandbytes-fp4",
    "fp8",
)
_DTYPES = {
    "float16": "float16",
    "half": "float16",
    "fp16": "float16",
    "bfloat16": "bfloat16",
    "bf16": "bfloat16",
    "auto": None,
}

RuntimeName = Literal["launcher", "docker", "podman"]


@dataclass(frozen=True, slots=True)
class Runtime:
    """How TGI is started: the launcher on PATH, or the image through docker or podman.

    ``gpus=None`` drops the GPU flags; ``cache_dir`` (host) is mounted as the image's model
    cache ``/data`` (default: the Hugging Face hub cache, so downloads are shared).
    """

    name: RuntimeName = "launcher"
    image: str = IMAGE
    cache_dir: str = field(default_factory=lambda: hub_cache())
    gpus: str | None = "all"
    shm_size: str = "1g"


def detect_runtime(
    which: Callable[[str], str | None] = shutil.which, env: Mapping[str, str] = os.environ
) -> RuntimeName:
    """``$UNILLM_TGI_RUNTIME`` if set, else the launcher if on PATH, else docker, else podman.

    Falls back to "launcher" (its absence is then reported when the launch starts).
    """
    forced = env.get(RUNTIME_ENV, "").strip().lower()
    if forced in ("launcher", "docker", "podman"):
        return forced  # type: ignore[return-value]
    for name, binary in (("launcher", LAUNCHER), ("docker", "docker"), ("podman", "podman")):
        if which(binary):
            return name  # type: ignore[return-value]
    return "launcher"


def hub_cache(env: Mapping[str, str] = os.environ) -> str:
    """The host's Hugging Face hub cache (``HF_HUB_CACHE``, ``HF_HOME/hub`` or the default)."""
    if env.get("HF_HUB_CACHE"):
        return os.path.abspath(os.path.expanduser(env["HF_HUB_CACHE"]))
    home = env.get("HF_HOME") or os.path.join(
        env.get("HOME") or os.path.expanduser("~"), ".cache", "huggingface"
    )
    return os.path.abspath(os.path.join(os.path.expanduser(home), "hub"))


EMBED_ALTERNATIVE = (
    "Serve the embedding model with TEI (https://github.com/huggingface/"
    "text-embeddings-inference) and call its /embed, or launch it with "
    'unillm.launch("vllm", ..., task="embed") / "sglang"'
)


def command(spec: LaunchSpec, runtime: Runtime) -> LaunchCommand:
    """The argv and environment that start TGI for ``spec`` in ``runtime``'s form (pure)."""
    _refuse_unsupported(spec)
    port = spec.port or DEFAULT_PORT
    env: dict[str, str] = {}
    key = spec.key()
    if key:
        env["API_KEY"] = key
    if spec.prefix_caching is not None:
        env["PREFIX_CACHING"] = "1" if spec.prefix_caching else "0"
    if runtime.name == "launcher":
        argv = [
            LAUNCHER,
            *_engine_args(spec, host=spec.host, port=port),
            # defaults shared by every TGI on a host: its shard sockets and metrics port
            "--shard-uds-path",
            f"/tmp/unillm-tgi-{port}",
            "--prometheus-port",
            "0",
            *spec.extra_args,
        ]
    else:
        argv = [
            *_container_prefix(spec, runtime, port, env),
            *_engine_args(spec, host="0.0.0.0", port=CONTAINER_PORT),
            *spec.extra_args,
        ]
    return LaunchCommand(argv=argv, env=env, health_path="/health", secrets=(key,) if key else ())


def _container_prefix(spec: LaunchSpec, runtime: Runtime, port: int, env: Mapping[str, str]) -> list[str]:
    argv = [runtime.name, "run", "--rm", "--name", f"unillm-tgi-{port}"]
    if runtime.gpus:
        argv += (
            ["--gpus", runtime.gpus]
            if runtime.name == "docker"
            else ["--device", f"nvidia.com/gpu={runtime.gpus}"]
        )
    argv += [
        "--shm-size",
        runtime.shm_size,
        "-p",
        f"{spec.host}:{port}:{CONTAINER_PORT}",
        "-v",
        f"{runtime.cache_dir}:{CONTAINER_CACHE}",
    ]
    for path in dict.fromkeys([spec.model, *spec.lora.values()]):
        if path.startswith("/"):
            argv += ["-v", f"{path}:{path}:ro"]
    for name in dict.fromkeys(["HF_TOKEN", *sorted(env), *sorted(spec.env)]):
        argv += ["-e", name]  # names only: values come from the runtime's environment
    argv.append(runtime.image)
    return argv


def _engine_args(spec: LaunchSpec, *, host: str, port: int) -> list[str]:
    argv = ["--model-id", spec.model, "--hostname", host, "--port", str(port)]
    if spec.parallel.tensor > 1:
        argv += ["--num-shard", str(spec.parallel.tensor)]
    if spec.dtype is not None and (dtype := _DTYPES[spec.dtype.lower()]) is not None:
        argv += ["--dtype", dtype]
    if spec.quantization is not None:
        argv += ["--quantize", spec.quantization]
    if spec.max_model_len is not None:
        argv += [
            "--max-input-tokens",
            str(spec.max_model_len - 1),
            "--max-total-tokens",
            str(spec.max_model_len),
        ]
    if spec.max_num_seqs is not None:
        argv += ["--max-batch-size", str(spec.max_num_seqs)]
    if spec.memory_fraction is not None:
        argv += ["--cuda-memory-fraction", str(spec.memory_fraction)]
    if spec.lora:
        argv += ["--lora-adapters", ",".join(_lora_entry(n, p) for n, p in spec.lora.items())]
    if spec.speculative is not None:
        argv += ["--speculate", str(spec.speculative.num_tokens)]
    return argv


def _lora_entry(name: str, path: str) -> str:
    if path.startswith("/"):
        return f"{name}={path}"
    if path != name:
        raise UnsupportedFeature(
            ENGINE,
            "a LoRA name that differs from its hub id",
            why=f"TGI serves a hub adapter under its id ({path!r}), not under {name!r}",
            alternative=f"Use lora={{{path!r}: {path!r}}} and lora={path!r} per request, or "
            "download it and pass an absolute path",
        )
    return path


#: Settings TGI has no counterpart for, refused in this order (before the ones that need values).
_REFUSALS: tuple[RefusalRule, ...] = (
    (
        lambda spec: spec.task == "embed",
        'task="embed"',
        "TGI serves generative models only; embeddings are a separate "
        "server, Text Embeddings Inference (TEI)",
        EMBED_ALTERNATIVE,
    ),
    (
        lambda spec: spec.parallel.pipeline > 1,
        Feature.PIPELINE_PARALLEL.value,
        "TGI only shards tensors (--num-shard)",
        "Use parallel=Parallel(tensor=N)",
    ),
    (
        lambda spec: spec.parallel.data > 1,
        Feature.DATA_PARALLEL.value,
        "one TGI serves one replica",
        "Launch one TGI per replica (e.g. CUDA_VISIBLE_DEVICES per launch) behind a router",
    ),
    (
        lambda spec: spec.parallel.expert,
        Feature.EXPERT_PARALLEL.value,
        "TGI has no expert-parallel mode",
        "Use parallel=Parallel(tensor=N)",
    ),
    (
        lambda spec: spec.runtime_lora,
        Feature.LORA_RUNTIME.value,
        "TGI loads LoRA adapters only at launch",
        "Pass lora={name: path} instead",
    ),
    (
        lambda spec: spec.max_lora_rank is not None or spec.max_loras is not None,
        "max_lora_rank / max_loras",
        "TGI has no such launch settings (it sizes adapters itself)",
        "Leave them unset",
    ),
)


def _refuse_unsupported(spec: LaunchSpec) -> None:
    no = Refuse(ENGINE)
    no.first_of(spec, _REFUSALS)
    no.admission(
        spec,
        "TGI",
        "Drop max_queued_requests= and pass extra_args=['--max-concurrent-requests', 'N'] (TGI "
        "answers 429 past N requests in flight, unillm's Overloaded)",
    )
    s = spec.speculative
    if s is not None and s.method != "ngram":
        raise no(
            f"speculative {s.method}",
            "TGI speculates with n-grams (--speculate) or with the "
            "Medusa heads a model ships (used automatically); no draft, EAGLE, MTP or suffix",
            "Use Speculative(method='ngram', num_tokens=N), or a Medusa model",
        )
    if s is not None and (s.lookup_max or s.lookup_min):
        raise no(
            "speculative lookup_max/lookup_min",
            "TGI's n-gram speculation has no such settings (only the number of tokens, --speculate)",
            "Leave them unset",
        )
    if spec.dtype is not None and spec.dtype.lower() not in _DTYPES:
        raise no(f"dtype={spec.dtype}", "TGI runs float16 or bfloat16", "Use dtype='bfloat16'")
    if spec.dtype is not None and _DTYPES[spec.dtype.lower()] and spec.quantization is not None:
        raise no(
            "dtype together with quantization", "TGI refuses --dtype with --quantize", "Set only one of them"
        )
    if spec.quantization is not None and spec.quantization not in QUANTIZATIONS:
        raise no(f"quantization={spec.quantization}", f"TGI's --quantize takes {', '.join(QUANTIZATIONS)}")
    if spec.max_model_len is not None and spec.max_model_len < 2:
        raise no("max_model_len < 2", "TGI needs max_input_tokens < max_total_tokens")
