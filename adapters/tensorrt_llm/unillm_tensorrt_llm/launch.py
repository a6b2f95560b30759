"""``trtllm-serve serve`` launches: its flags, and the YAML options file (``--extra_llm_api_options``).

    command(LaunchSpec(model="/models/qwen", parallel=Parallel(tensor=2),
                       speculative=Speculative(method="ngram", num_tokens=4)))
    # trtllm-serve serve /models/qwen --host 127.0.0.1 --port 8000 --backend pytorch --tp_size 2
    #   --extra_llm_api_options {launch_dir}/extra_llm_api_options.yaml
    # extra_llm_api_options.yaml: guided_decoding_backend, enable_iter_perf_stats,
    #   speculative_config: {decoding_type: NGram, max_draft_len: 4}

Flags are those of ``tensorrt_llm/commands/serve.py``; the YAML keys are ``LlmArgs`` fields
(``speculative_config`` with its ``decoding_type``, ``lora_config``, ``kv_cache_config``,
``guided_decoding_backend``, ``enable_iter_perf_stats``), from NVIDIA/TensorRT-LLM at the commits
named in the adapter's tests. The file is written by the core (a ``LaunchFile``): this module
stays pure. It is emitted as JSON, which is YAML too, so no YAML library is needed. Launching
needs an NVIDIA driver (a ``Prerequisite`` the core checks when it starts); ``--dry-run``
always renders the command and the file.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from unillm.adapter import (
    Feature,
    LaunchCommand,
    LaunchFile,
    LaunchSpec,
    Prerequisite,
    Refuse,
    Speculative,
)

ENGINE = "tensorrt_llm"
SERVE = "trtllm-serve"
DEFAULT_PORT = 8000
OPTIONS_FILE = "extra_llm_api_options.yaml"
DTYPES = ("auto", "float16", "bfloat16", "float32")
BACKENDS = ("xgrammar", "llguidance")  # LlmArgs.guided_decoding_backend
DEFAULT_BACKEND = "xgrammar"
GPU_INSTALL = (
    "Run it on a machine with an NVIDIA GPU and its driver (CUDA 12.x), e.g. NVIDIA's container "
    "nvcr.io/nvidia/tensorrt-llm/release with prefix=['docker', 'exec', ...]; on this machine use "
    "vLLM, SGLang or llama.cpp (they run on CPU)"
)


def lora_ids(lora: dict[str, str]) -> dict[str, int]:
    """The integer id ``lora_request`` names each LoRA by: 1, 2, ... in name order (stable)."""
    return {name: i for i, name in enumerate(sorted(lora), start=1)}


def command(spec: LaunchSpec) -> LaunchCommand:
    """The ``trtllm-serve`` command and its YAML options file for ``spec`` (pure)."""
    _refuse_unsupported(spec)
    p = spec.parallel
    serve = str(Path(spec.python).with_name(SERVE)) if spec.python else SERVE  # the env's console script
    argv = [serve, "serve", spec.model, "--host", spec.host, "--port", str(spec.port or DEFAULT_PORT)]
    argv += ["--backend", "pytorch"]
    if p.tensor > 1:
        argv += ["--tp_size", str(p.tensor)]
    if p.pipeline > 1:
        argv += ["--pp_size", str(p.pipeline)]
    if p.expert:
        argv += ["--ep_size", str(p.tensor)]
    if spec.max_num_seqs is not None:
        argv += ["--max_batch_size", str(spec.max_num_seqs)]
    if spec.max_model_len is not None:
        argv += ["--max_seq_len", str(spec.max_model_len)]
    if spec.memory_fraction is not None:
        argv += ["--kv_cache_free_gpu_memory_fraction", str(spec.memory_fraction)]
    options = LaunchFile(OPTIONS_FILE, json.dumps(llm_api_options(spec), indent=2) + "\n")
    argv += ["--extra_llm_api_options", options.path, *spec.extra_args]
    return LaunchCommand(
        argv=argv,
        health_path="/health",
        files=(options,),
        requires=(Prerequisite("nvidia-driver", "an NVIDIA GPU driver", GPU_INSTALL),),
    )


def llm_api_options(spec: LaunchSpec) -> dict[str, Any]:
    """The ``LlmArgs`` fields of the YAML file: what trtllm-serve has no flag for."""
    options: dict[str, Any] = {
        # response_format is refused without a backend; xgrammar is TensorRT-LLM's usual one
        "guided_decoding_backend": spec.structured_backend or DEFAULT_BACKEND,
        "enable_iter_perf_stats": True,  # /metrics serves iteration stats only when on
    }
    if spec.dtype is not None:
        options["dtype"] = spec.dtype
    if spec.prefix_caching is not None:
        options["kv_cache_config"] = {"enable_block_reuse": spec.prefix_caching}
    if spec.lora:
        lora: dict[str, Any] = {"lora_dir": [spec.lora[n] for n in sorted(spec.lora)]}
        if spec.max_lora_rank is not None:
            lora["max_lora_rank"] = spec.max_lora_rank
        if spec.max_loras is not None:
            lora["max_loras"] = lora["max_cpu_loras"] = spec.max_loras
        options["lora_config"] = lora
    if spec.speculative is not None:
        options["speculative_config"] = speculative_config(spec.speculative)
    return options


def speculative_config(s: Speculative) -> dict[str, Any]:
    """``speculative_config`` for one of the methods TensorRT-LLM's PyTorch backend has."""
    if s.method == "ngram":
        config: dict[str, Any] = {"decoding_type": "NGram", "max_draft_len": s.num_tokens}
        if s.lookup_max is not None:
            config["max_matching_ngram_size"] = s.lookup_max
        return config
    if s.method == "mtp":
        return {"decoding_type": "MTP", "num_nextn_predict_layers": s.num_tokens}
    kind = "DraftTarget" if s.method == "draft" else "Eagle"  # eagle3 (refused: eagle, suffix)
    return {"decoding_type": kind, "max_draft_len": s.num_tokens, "speculative_model_dir": s.draft_model}


def _refuse_unsupported(spec: LaunchSpec) -> None:
    no = Refuse(ENGINE)
    no.admission(spec, "trtllm-serve")
    p, s = spec.parallel, spec.speculative
    if spec.task == "embed":
        raise no(
            'task="embed"',
            "unillm launches trtllm-serve for generation only",
            'Launch an embedding model with unillm.launch("vllm", ..., task="embed") or "sglang"',
        )
    if spec.served_name is not None:
        raise no(
            "served_name",
            "trtllm-serve has no served-name flag: it serves the model under the name it was given",
            "Drop served_name= (requests use the model's path or hub id, as /v1/models lists it)",
        )
    if p.data > 1:
        raise no(
            Feature.DATA_PARALLEL.value,
            "one trtllm-serve serves one replica (attention data parallelism is a YAML option of "
            "tensor-parallel MoE models, enable_attention_dp)",
            "Launch one trtllm-serve per replica behind a router, or pass extra_args for attention DP",
        )
    if s is not None and s.method in ("eagle", "suffix"):
        raise no(
            f"speculative {s.method}",
            "TensorRT-LLM's PyTorch backend speculates with n-grams, a draft model, EAGLE-3 or MTP",
            "Use Speculative(method='eagle3', ...), 'draft', 'ngram' or 'mtp'",
        )
    if s is not None and s.lookup_min is not None:
        raise no(
            "speculative lookup_min",
            "TensorRT-LLM's n-gram speculation has no shortest-match setting (only max_matching_ngram_size)",
            "Leave lookup_min unset",
        )
    if spec.quantization is not None:
        raise no(
            f"quantization={spec.quantization}",
            "TensorRT-LLM reads the quantization from the checkpoint (it has no quantize-on-load flag)",
            "Quantize with NVIDIA ModelOpt first, or serve a pre-quantized checkpoint (e.g. an FP8 one)",
        )
    if spec.dtype is not None and spec.dtype not in DTYPES:
        raise no(
            f"dtype={spec.dtype}",
            f"TensorRT-LLM's dtype is one of {', '.join(DTYPES)}",
            "Use dtype='bfloat16'",
        )
    if spec.runtime_lora:
        raise no(
            Feature.LORA_RUNTIME.value,
            "trtllm-serve has no load endpoint: an adapter is loaded by the request that names its path",
            "Pass lora={name: path} at launch (or TensorRTLLMAdapter(loras=...) when connecting)",
        )
    if (spec.max_lora_rank is not None or spec.max_loras is not None) and not spec.lora:
        raise no(
            "max_lora_rank / max_loras without lora",
            "they size lora_config, which needs adapters",
            "Pass lora={name: path}",
        )
    no.key_without_auth(spec, "trtllm-serve")
