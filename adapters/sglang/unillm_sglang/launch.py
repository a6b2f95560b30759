"""The ``python -m sglang.launch_server`` command for a unified LaunchSpec (pure).

    command = launch_command(LaunchSpec(model="/models/qwen", parallel=Parallel(tensor=2)))
    command.render()   # the API key is masked

SGLang reads its API key only from ``--api-key`` (no environment variable), so the key is in
argv: ``LaunchCommand.secrets`` masks it wherever unillm prints the command. Readiness is
polled on ``/health`` (503 while starting); the supervisor then proves the model runs with one
real request.
"""

from __future__ import annotations

from pathlib import Path

from unillm.adapter import CpuRecipe, Flags, InvalidOptions, LaunchCommand, LaunchSpec, UnsupportedFeature

MODULE = "sglang.launch_server"
CPU_ENV = "sglang-cpu"
CPU_EXPERIMENTAL = (
    "SGLang's CPU kernels (sgl_kernel) are not on PyPI, so the recipe runs from the env "
    f"{CPU_ENV!r} that unillm's test suite puts together (CPU torch, SGLang without its CUDA "
    "dependencies, a stub sgl_kernel whose kernels are never called with the torch_native "
    "attention backend, a patched torchvision). Build it from a clone of unillm with "
    "`python adapters/sglang/tests/cpu_env.py` (~5 min). Dense text models only; LoRA and "
    "speculative decoding need CUDA"
)
#: ``--reasoning-parser`` names, as SGLang's own list (sglang/srt/parser/reasoning_parser_names.py) has them.
REASONING_PARSERS = frozenset(
    {
        "apertus2509", "beam", "cohere_command4", "deepseek-r1", "deepseek-v3", "deepseek-v4",
        "deepseek-v41", "dots", "gemma4", "gigachat35", "glm45", "gpt-oss", "granite_thinking_parser",
        "hunyuan", "inkling", "interns1", "iquest_q1", "k2_horizon", "kimi", "kimi_k2", "kimi_k3",
        "ling3", "mimo", "minimax", "minimax-append-think", "minimax-m3", "mistral", "muse",
        "nanbeige", "nemotron_3", "poolside_v1", "qwen3", "qwen3-thinking", "response_template",
        "step3", "step3p5",
    }
)  # fmt: skip
#: unillm's tool-parser names are vLLM's; SGLang names some formats differently.
TOOL_PARSERS = {
    "hermes": "qwen25",
    "llama3_json": "llama3",
    "deepseek_v3": "deepseekv3",
    "deepseek_v31": "deepseekv31",
    "openai": "gpt-oss",
}
#: SGLang's ``--grammar-backend`` choices that constrain output; the first is its default.
GRAMMAR_BACKENDS = ("xgrammar", "llguidance", "outlines")
_ALGORITHM = {"ngram": "NGRAM", "draft": "STANDALONE", "eagle": "EAGLE", "eagle3": "EAGLE3", "mtp": "NEXTN"}


def grammar_settings(spec: LaunchSpec) -> tuple[str, bool]:
    """The grammar backend and compact-JSON switch the server starts with (from the settings,
    else from ``--grammar-backend`` / ``--constrained-json-disable-any-whitespace`` in
    ``extra_args``; SGLang's default backend is xgrammar).

    Args:
        spec: The launch settings.

    Returns:
        The backend's name and whether whitespace in JSON is forbidden.
    """
    args = spec.extra_args
    backend = spec.structured_backend
    for i, arg in enumerate(args):
        flag, eq, value = arg.partition("=")
        if flag == "--grammar-backend":
            backend = value if eq else (args[i + 1] if i + 1 < len(args) else None)
    compact = spec.compact_json is True or "--constrained-json-disable-any-whitespace" in args
    return backend or GRAMMAR_BACKENDS[0], compact


def launch_command(spec: LaunchSpec, engine: str = "sglang") -> LaunchCommand:
    """argv and environment that start SGLang for ``spec`` (unset fields keep SGLang's defaults)."""
    # --enable-metrics: SGLang serves /metrics only when asked (vLLM always does); unillm's
    # normalized metrics, fleets and benchmarks read it, and it costs little. --enable-cache-report:
    # usage.prompt_tokens_details.cached_tokens on the OpenAI API (Usage.cached_tokens).
    argv = [
        spec.python or "python",
        "-m",
        MODULE,
        "--model-path",
        spec.model,
        "--host",
        spec.host,
        "--enable-metrics",
        "--enable-cache-report",
    ]
    flag = Flags(argv)
    flag.add("--port", spec.port)
    flag.add("--served-model-name", spec.served_name)
    flag.switch("--is-embedding", spec.task == "embed")
    _parallel(spec, flag)
    flag.add("--dtype", spec.dtype)
    flag.add("--context-length", spec.max_model_len)
    flag.add("--max-running-requests", spec.max_num_seqs)
    flag.add("--mem-fraction-static", spec.memory_fraction)
    flag.add("--quantization", spec.quantization)
    if spec.prefix_caching is False:
        argv.append("--disable-radix-cache")  # RadixAttention prefix caching is on by default
    flag.add("--max-queued-requests", spec.max_queued_requests)  # past it: 503, unillm's Overloaded
    # SGLang serves higher values first by default; unillm's priority= is vLLM's, lower first
    flag.switch("--enable-priority-scheduling", spec.scheduling == "priority")
    flag.switch("--schedule-low-priority-values-first", spec.scheduling == "priority")
    parser = spec.parser()
    flag.add("--tool-call-parser", TOOL_PARSERS.get(parser, parser) if parser else None)
    flag.add("--grammar-backend", spec.structured_backend)
    flag.switch("--constrained-json-disable-any-whitespace", spec.compact_json is True)
    flag.add("--reasoning-parser", spec.thinking_parser())
    _lora(spec, argv, flag)
    _speculative(spec, argv, flag, engine)
    _nodes_and_roles(spec, argv, flag)
    key = spec.key()
    if key:  # one token: a generated key may start with "-", which argparse would take for a flag
        argv.append(f"--api-key={key}")
    argv += spec.extra_args
    return LaunchCommand(argv=argv, env={}, health_path="/health", secrets=(key,) if key else ())


def _parallel(spec: LaunchSpec, flag: Flags) -> None:
    p = spec.parallel
    flag.add("--tp-size", p.tensor if p.tensor > 1 else None)
    flag.add("--pp-size", p.pipeline if p.pipeline > 1 else None)
    flag.add("--dp-size", p.data if p.data > 1 else None)
    if p.expert:  # SGLang splits experts over the tensor-parallel group: --ep-size = --tp-size
        if p.tensor < 2:
            raise InvalidOptions(
                "SGLang's expert parallelism spans the tensor-parallel ranks: "
                "use Parallel(tensor=N, expert=True) with N >= 2"
            )
        flag.add("--ep-size", p.tensor)


def _nodes_and_roles(spec: LaunchSpec, argv: list[str], flag: Flags) -> None:
    """Multi-node rank and address, and the prefill/decode role."""
    if spec.nodes is not None:  # every node runs the same command with its own rank
        host, port = spec.nodes.head_address()
        argv += [
            "--nnodes",
            str(spec.nodes.count),
            "--node-rank",
            str(spec.nodes.rank),
            "--dist-init-addr",
            f"{host}:{port}",
        ]
    if spec.pd is not None:
        argv += ["--disaggregation-mode", spec.pd.role, "--disaggregation-transfer-backend", spec.pd.transfer]
        if spec.pd.role == "prefill":  # decode workers reach the prefill worker's bootstrap server
            flag.add("--disaggregation-bootstrap-port", spec.pd.port)


def _lora(spec: LaunchSpec, argv: list[str], flag: Flags) -> None:
    if not (spec.lora or spec.runtime_lora):
        if spec.max_lora_rank is not None or spec.max_loras is not None:
            raise InvalidOptions("max_lora_rank/max_loras need lora={name: path} or runtime_lora=True")
        return
    argv.append("--enable-lora")
    if spec.lora:
        argv += ["--lora-paths", *(f"{name}={path}" for name, path in spec.lora.items())]
    elif spec.max_lora_rank is None:
        # With no adapter at launch SGLang cannot infer the LoRA shapes it must reserve.
        raise InvalidOptions(
            "SGLang needs max_lora_rank=R to load adapters at runtime when none is "
            "given at launch (and targets every module it supports); pass "
            "max_lora_rank, or lora={name: path}"
        )
    else:
        argv += ["--lora-target-modules", "all"]
    flag.add("--max-lora-rank", spec.max_lora_rank)
    flag.add("--max-loras-per-batch", spec.max_loras)


def _speculative(spec: LaunchSpec, argv: list[str], flag: Flags, engine: str) -> None:
    s = spec.speculative
    if s is None:
        return
    algorithm = _ALGORITHM.get(s.method)
    if algorithm is None:
        raise UnsupportedFeature(
            engine,
            f"speculative method {s.method!r}",
            why="SGLang has EAGLE, EAGLE3, NEXTN (MTP), STANDALONE (draft model) and NGRAM",
            alternative='Use method="ngram"',
        )
    if s.lookup_max is not None or s.lookup_min is not None:
        raise UnsupportedFeature(
            engine,
            "speculative lookup_max/lookup_min",
            why="SGLang's NGRAM matches with a trie, not a lookup window",
            alternative="Tune it with extra_args=['--speculative-ngram-max-trie-depth', N]",
        )
    argv += ["--speculative-algorithm", algorithm]
    flag.add("--speculative-draft-model-path", s.draft_model)
    if algorithm == "NGRAM":
        flag.add("--speculative-num-draft-tokens", s.num_tokens)
    else:  # a chain of num_tokens draft steps (top-k 1) verified in one pass
        flag.add("--speculative-num-steps", s.num_tokens)
        flag.add("--speculative-eagle-topk", 1)
        flag.add("--speculative-num-draft-tokens", s.num_tokens + 1)


def cpu_recipe(spec: LaunchSpec, workdir: Path) -> CpuRecipe:
    """SGLang on a CPU (experimental, see ``CPU_EXPERIMENTAL``): pure-PyTorch backends, float32,
    a small static memory pool (4096 tokens), compact JSON, and no busy-polling when idle."""
    for wanted, feature in (
        (spec.lora or spec.runtime_lora, "LoRA"),
        (spec.speculative is not None, "speculative decoding"),
    ):
        if wanted:
            raise UnsupportedFeature(
                "sglang",
                f"{feature} on a CPU",
                why="SGLang runs them with CUDA kernels only",
                alternative="Drop cpu=True and run SGLang on a GPU, "
                'or use unillm.launch("vllm", ..., cpu=True)',
            )
    env = {"SGLANG_USE_CPU_ENGINE": "1", "TMPDIR": str(workdir / "tmp")}
    if spec.model.startswith(("/", "./", "../", "~")):
        env["HF_HUB_OFFLINE"] = "1"
    settings = {
        "dtype": "float32",
        "max_num_seqs": 8,
        "memory_fraction": 0.05,
        "env": env,
        "extra_args": [
            "--device",
            "cpu",
            "--attention-backend",
            "torch_native",
            "--sampling-backend",
            "pytorch",
            "--skip-server-warmup",
            "--max-total-tokens",
            "4096",
            # an idle scheduler otherwise busy-polls a whole core
            "--sleep-on-idle",
        ],
        "ready_timeout": 600,
        # compact JSON: fewer tokens to decode, and no model can loop on whitespace
        "compact_json": True,
    }
    return CpuRecipe(
        settings=settings, dirs=(workdir / "tmp",), engine_env=CPU_ENV, experimental=CPU_EXPERIMENTAL
    )
