"""SGLang adapter: picks, per request, the SGLang API that honours every option (pure).

    llm = unillm.connect("sglang", "http://127.0.0.1:30000")
    llm = unillm.LLM(SGLangAdapter(api="native"), "http://127.0.0.1:30000")   # force /generate

Routing (``api="auto"``, the default):

* chat messages -> ``/v1/chat/completions`` (only the OpenAI API applies the chat template);
* a prompt -> ``/v1/completions`` when the detected version's OpenAI API honours every option,
  else ``/generate``; ``extra_body`` keys only ``/generate`` knows (``sampling_params``,
  ``input_ids``, ``return_logprob``, ...) select ``/generate``.

Anything the chosen API cannot honour raises UnsupportedFeature before sending. An unknown
``model`` is ignored by SGLang (HTTP 200, served by the one loaded model), so unillm checks
the requested model against the served one at discovery and raises UnknownModel instead.

Health: ``llm.health()`` asks ``/health_generate``, which answers 200 only once the scheduler has
produced a token (it skips the probe while requests are running, so it costs nothing under load);
launch polls the cheaper ``/health`` (503 while starting) and then proves readiness with one
real request, like every engine.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

from unillm.adapter import (
    EXTRA_SAMPLING,
    Capabilities,
    Completion,
    Constraint,
    CpuRecipe,
    Feature,
    JsonSchema,
    LaunchCommand,
    LaunchSpec,
    LoraInfo,
    MalformedResponse,
    MetricNames,
    OpenAICompatAdapter,
    OpenAIEmbeddings,
    OpenAIStreamDecoder,
    Request,
    Support,
    TokenizeEndpoint,
    UnillmError,
    UnknownLora,
    UnknownModel,
    UnsupportedFeature,
    check_priority,
    discovered,
    error_message,
    features_of,
    model_cards,
    text_field,
)
from unillm.adapter.base import EngineInfo, EngineInstall, HttpCall
from unillm.adapter.schemas import (
    guidance_problem,
    portable_schema,
    schema_refusal,
    xgrammar_problem,
    xgrammar_strings,
)
from unillm_sglang.features import (
    COMPLETIONS_RESPONSE_FORMAT_SINCE,
    LORA_IN_MODEL_SINCE,
    Api,
    api_support,
    at_least,
    is_server_feature,
    parse_version,
    server_support,
)
from unillm_sglang.launch import (
    GRAMMAR_BACKENDS,
    REASONING_PARSERS,
    cpu_recipe,
    grammar_settings,
    launch_command,
)
from unillm_sglang.native import (
    GENERATE_PATH,
    NATIVE_ONLY_KEYS,
    NativeStreamDecoder,
    constraint_sampling,
    native_body,
    parse_native,
)

ApiChoice = Literal["auto", "openai", "native"]
#: ``unillm setup sglang`` on a GPU machine: since 0.5 the plain package is the full CUDA runtime
#: (sglang-kernel, flashinfer, ...); its ``[all]`` extra only adds diffusion and tracing.
GPU_PACKAGES = ("sglang",)
ABORT_PATH = "/abort_request"  # {"rid": ...} stops that request (its http_server.py)


@dataclass(frozen=True, slots=True)
class SGLangInfo(EngineInfo):
    """What discovery learnt about an SGLang server, beyond the common fields."""

    served_names: tuple[str, ...] = ()
    lora_enabled: bool | None = None  # None: unknown (no /get_server_info answer)
    max_lora_rank: int | None = None
    lora_target_modules: tuple[str, ...] | None = None
    incremental_stream: bool = False
    deterministic: bool | None = None  # --enable-deterministic-inference: the only mode using seeds
    tool_call_parser: str | None = None  # --tool-call-parser (None: none, or no /get_server_info)
    #: --enable-priority-scheduling with --schedule-low-priority-values-first (unillm's priority=,
    #: lower first); None: unknown (no /get_server_info)
    priority_scheduling: bool | None = None
    #: --grammar-backend (xgrammar, llguidance, outlines, none); None: no /get_server_info answer
    grammar_backend: str | None = None


class SGLangAdapter(OpenAIEmbeddings, TokenizeEndpoint, OpenAICompatAdapter):
    """SGLang (``python -m sglang.launch_server``): its OpenAI API and its native ``/generate``.

    ``api`` forces one API for every request ("openai" or "native"); "auto" picks per request.
    """

    name = "sglang"
    display_name = "SGLang"
    # The server runtime's kernel package: ``sglang`` alone may be the frontend-only install (the
    # DSL extra), which cannot serve, and finding ``sglang.srt`` would import all of torch.
    engine_module = "sgl_kernel"
    reasoning_parsers = REASONING_PARSERS  # --reasoning-parser NAME
    takes_tool_parser = True  # --tool-call-parser NAME
    missing_lora_routes = (
        "this server has no /load_lora_adapter endpoint",
        "Upgrade SGLang (>= 0.4.9), or pass lora={name: path} at launch",
    )
    structured_backends = GRAMMAR_BACKENDS  # --grammar-backend NAME
    takes_compact_json = True  # --constrained-json-disable-any-whitespace
    thinking_options = ("thinking", "reasoning_effort")  # chat_template_kwargs / request fields
    reasoning_message_field = "reasoning_content"  # handed to the chat template (protocol.py)
    extra_sampling_fields = EXTRA_SAMPLING

    def __init__(
        self,
        api: ApiChoice = "auto",
        *,
        structured_backend: str | None = None,
        compact_json: bool = False,
        after_thinking: bool | None = None,
    ) -> None:
        """``structured_backend``: the server's grammar backend when unillm started it (its JSON
        schemas are then checked before sending); None: unknown (connected). ``after_thinking``:
        whether its grammars start after the thought (launched with a reasoning parser)."""
        if api not in ("auto", "openai", "native"):
            raise ValueError(f"api must be 'auto', 'openai' or 'native', not {api!r}")
        self.api: ApiChoice = api
        self.structured_backend = structured_backend
        self.compact_json = compact_json
        self.constrains_after_thinking = after_thinking

    def __repr__(self) -> str:
        return f"SGLangAdapter(api={self.api!r})"

    def bind(self, spec: LaunchSpec) -> SGLangAdapter:
        """This adapter, knowing the grammar backend and reasoning parser the server was started
        with (with a parser, SGLang applies grammars to the answer after the thought)."""
        backend, compact = grammar_settings(spec)
        return SGLangAdapter(
            self.api,
            structured_backend=backend,
            compact_json=compact,
            after_thinking=spec.thinking_parser() is not None,
        )

    # -- capabilities ----------------------------------------------------------------------
    def capabilities(self, version: str | None = None) -> Capabilities:
        v = parse_version(version)
        features: dict[Feature, Support] = {}
        for f in Feature:
            if is_server_feature(f):
                features[f] = server_support(f, v)
            elif self.api == "auto":
                openai, native = api_support(f, "openai", v), api_support(f, "native", v)
                features[f] = openai if openai.level != "no" or native.level == "no" else native
            else:
                features[f] = api_support(f, self.api, v)
        if features[Feature.TOOL_CHOICE_AUTO].level != "no":
            features[Feature.TOOL_CHOICE_AUTO] = Support(
                why="needs the server started with --tool-call-parser (launch with tool_parser=...)"
            )
        for f in (Feature.TOOL_CHOICE_REQUIRED, Feature.TOOL_CHOICE_NAMED):
            if features[f].level != "no":
                features[f] = Support(
                    why="with a tool parser natively; without one unillm forces the call with a JSON schema"
                )
        if features[Feature.IMAGES].level != "no":
            features[Feature.IMAGES] = Support(why="vision-language models only")
        if features[Feature.SEED].level != "no":
            features[Feature.SEED] = Support(
                why="only on servers started with --enable-deterministic-inference (refused on others)"
            )
        return Capabilities(engine=self.name, version=version, features=features)

    # -- discovery -------------------------------------------------------------------------
    def discovery(self) -> Mapping[str, HttpCall]:
        return {
            "model_info": HttpCall("GET", "/get_model_info"),
            "server_info": HttpCall("GET", "/get_server_info"),
            "models": HttpCall("GET", "/v1/models"),
        }

    def parse_info(self, answers: Mapping[str, Any], model: str | None) -> SGLangInfo:
        model_info = discovered(answers, "model_info", self.name, "/get_model_info")
        server = discovered(answers, "server_info", self.name, "/get_server_info")
        bases = [m for m in model_cards(answers, self.name) if not m.get("parent")]

        def name(answer: Mapping[str, Any], field: str) -> str | None:
            where = "/get_model_info" if answer is model_info else "/get_server_info"
            return text_field(answer, field, self.name, where)

        served = (
            name(model_info, "served_model_name")
            or name(server, "served_model_name")
            or name(model_info, "model_path")
            or (bases[0]["id"] if bases else None)
        )
        if not served:
            raise MalformedResponse(
                "sglang: neither /get_model_info nor /v1/models names a model; is this an SGLang server?"
            )
        names = tuple(
            dict.fromkeys(
                n for n in (served, name(model_info, "model_path"), name(server, "model_path")) if n
            )
        )
        if model is not None and model not in names:
            raise UnknownModel(
                f"sglang serves {names[0]!r}, not {model!r}. SGLang would silently answer with "
                f"{names[0]!r}; connect with model={names[0]!r} (or omit model), and use lora= for "
                "an adapter",
                engine=self.name,
                status=None,
                engine_message="",
            )
        limit = next((m.get("max_model_len") for m in bases), None) or server.get("context_length")
        targets = server.get("lora_target_modules")
        return SGLangInfo(
            engine=self.name,
            model=names[0],
            version=name(server, "version"),
            max_model_len=int(limit) if isinstance(limit, int) else None,
            served_names=names,
            lora_enabled=bool(server.get("enable_lora") or server.get("lora_paths")) if server else None,
            max_lora_rank=rank if isinstance(rank := server.get("max_lora_rank"), int) else None,
            lora_target_modules=tuple(targets) if isinstance(targets, (list, tuple)) else None,
            incremental_stream=bool(server.get("incremental_streaming_output")),
            deterministic=bool(server.get("enable_deterministic_inference")) if server else None,
            tool_call_parser=_str_or_none(server.get("tool_call_parser")),
            priority_scheduling=_low_priority_first(server) if server else None,
            grammar_backend=_str_or_none(server.get("grammar_backend")),
        )

    # -- routing ---------------------------------------------------------------------------
    def route(self, request: Request, info: EngineInfo) -> Api:
        """The API that will carry ``request``; raises UnsupportedFeature if none honours it."""
        v = parse_version(info.version)
        used = [f for f in features_of(request) if not is_server_feature(f)]
        api: Api
        if self.api != "auto":
            api = self.api
        elif request.messages is not None:
            api = "openai"
        elif request.extra_body and NATIVE_ONLY_KEYS & set(request.extra_body):
            api = "native"
        else:
            api = "openai" if all(api_support(f, "openai", v).level != "no" for f in used) else "native"
        for f in used:
            s = api_support(f, api, v)
            if s.level == "no":
                raise UnsupportedFeature(
                    self.name, f.value, version=info.version, why=s.why, alternative=s.alternative
                )
        self._check_lora(request, info)
        self._check_tools(request, info)
        if isinstance(info, SGLangInfo):
            check_priority(request, self.name, info.priority_scheduling, version=info.version)
        if request.seed is not None and isinstance(info, SGLangInfo) and info.deterministic is False:
            raise UnsupportedFeature(
                self.name,
                Feature.SEED.value,
                version=info.version,
                why="SGLang uses a seed only when started with --enable-deterministic-inference "
                "(otherwise it ignores it)",
                alternative="Launch with extra_args=['--enable-deterministic-inference'], or drop seed",
            )
        return api

    def _check_tools(self, request: Request, info: EngineInfo) -> None:
        choice = request.tool_choice
        if choice is None or choice.mode != "auto" or not isinstance(info, SGLangInfo):
            return
        if info.tool_call_parser is None and info.lora_enabled is not None:  # server info known
            raise self.no_tool_parser(
                info,
                "this server runs without --tool-call-parser, so SGLang would answer with text "
                "and never a call",
                "a JSON schema",
            )

    def forces_by_constraint(self, request: Request, info: EngineInfo) -> bool:
        """Without a tool parser SGLang neither forces nor reads calls, and after a thought its
        forcing does not hold: unillm forces them with a JSON schema."""
        choice = request.tool_choice
        parser = isinstance(info, SGLangInfo) and info.tool_call_parser
        forced = choice is not None and choice.forces_call
        return forced and (not parser or self.forced_call_after_a_thought(request))

    def _check_lora(self, request: Request, info: EngineInfo) -> None:
        if request.lora is not None and isinstance(info, SGLangInfo) and info.lora_enabled is False:
            raise self._without_lora(
                info,
                Feature.LORA,
                "--enable-lora / --lora-paths",
                "Launch it with lora={name: path} (or runtime_lora=True, max_lora_rank=R)",
            )

    def _without_lora(
        self, info: EngineInfo, feature: Feature, flags: str, alternative: str
    ) -> UnsupportedFeature:
        """The refusal of a LoRA feature on a server started without LoRA (``flags`` enable it)."""
        why = f"this server was started without LoRA ({flags})"
        return UnsupportedFeature(
            self.name, feature.value, version=info.version, why=why, alternative=alternative
        )

    # -- requests --------------------------------------------------------------------------
    def build(self, request: Request, info: EngineInfo) -> HttpCall:
        v = parse_version(info.version)
        if isinstance(request.output, JsonSchema):
            schema = self._checked_schema(request.output.schema, info)
            request = replace(request, output=replace(request.output, schema=schema))
        if self.route(request, info) == "native":
            body = native_body(request, lora=request.lora)
            return HttpCall("POST", GENERATE_PATH, body, request.stream)
        call = super().build(request, info)
        body = dict(call.json or {})
        if request.lora is not None and not at_least(v, LORA_IN_MODEL_SINCE):
            body["lora_path"] = request.lora
        if (
            isinstance(request.output, JsonSchema)
            and request.messages is None
            and not at_least(v, COMPLETIONS_RESPONSE_FORMAT_SINCE)
        ):
            del body["response_format"]  # /v1/completions read only a JSON-string field then
            body["json_schema"] = json.dumps(dict(request.output.schema))
        if request.extra_body:
            body.update(request.extra_body)
        return HttpCall(call.method, call.path, body, call.stream)

    def abortable(self, call: HttpCall) -> tuple[HttpCall, HttpCall] | None:
        """A non-streamed request tagged with a request id (``rid``; the caller's own if it set
        one), and ``POST /abort_request`` for it: SGLang notices a non-streamed request's gone
        client only every few seconds. Not for n > 1 (SGLang aborts each sample by its own id)."""
        body = call.json
        if call.stream or body is None:
            return None
        params = body.get("sampling_params") if call.path == GENERATE_PATH else body
        samples = params.get("n") if isinstance(params, Mapping) else None
        rid = body["rid"] if "rid" in body else uuid.uuid4().hex
        if samples not in (None, 1) or not isinstance(rid, str):
            return None
        return replace(call, json={**body, "rid": rid}), HttpCall("POST", ABORT_PATH, {"rid": rid})

    def _checked_schema(self, schema: Mapping[str, Any], info: EngineInfo) -> Mapping[str, Any]:
        """``schema`` as the grammar backend can honour it (exactly rewritten for xgrammar, its
        length-bounded strings as patterns that admit no raw control character), or
        UnsupportedFeature before sending (SGLang itself ignores what xgrammar cannot do).

        The backend is the launch's, else the one ``/get_server_info`` names. With neither (an
        unknown backend) nothing is refused, and only the rewrites that mean the same to every
        backend apply."""
        backend = self.structured_backend or (info.grammar_backend if isinstance(info, SGLangInfo) else None)
        if backend is None:
            return xgrammar_strings(schema)  # a pattern of the same counts: JSON's own strings
        problem = None
        if backend == "xgrammar":
            schema = xgrammar_strings(portable_schema(schema))
            problem = xgrammar_problem(schema)
        elif backend == "llguidance":
            problem = guidance_problem(schema, compact=self.compact_json)
        if problem is None:
            return schema
        other = "llguidance" if backend == "xgrammar" else "xgrammar"
        raise schema_refusal(
            self.name,
            backend,
            problem,
            version=info.version,
            alternative=f"Launch with structured_backend={other!r}, use another engine, or drop output= "
            "and validate the answer yourself (e.g. Model.model_validate_json(r.text))",
        )

    def model_field(self, request: Request, info: EngineInfo) -> str:
        if request.lora is not None and at_least(parse_version(info.version), LORA_IN_MODEL_SINCE):
            return f"{info.model}:{request.lora}"
        return info.model

    def constraint_fields(self, output: Constraint, info: EngineInfo) -> dict[str, Any]:
        if isinstance(output, JsonSchema):
            return {
                "response_format": {
                    "type": "json_schema",
                    "json_schema": {"name": output.name, "schema": dict(output.schema)},
                }
            }
        return constraint_sampling(output)  # regex / ebnf: the same fields as /generate's

    # -- answers ---------------------------------------------------------------------------
    def parse(
        self, body: Any, request: Request, info: EngineInfo, call: HttpCall | None = None
    ) -> Completion[Any]:
        call = call or self.build(request, info)
        if call.path == GENERATE_PATH:
            return parse_native(body, self.name, info.version, info.model)
        return super().parse(body, request, info, call)

    def decoder(  # type: ignore[override]  # the base only knows its OpenAI decoder
        self, request: Request, info: EngineInfo, call: HttpCall | None = None
    ) -> NativeStreamDecoder | OpenAIStreamDecoder:
        call = call or self.build(request, info)
        if call.path == GENERATE_PATH:
            incremental = isinstance(info, SGLangInfo) and info.incremental_stream
            return NativeStreamDecoder(self.name, incremental=incremental)
        return super().decoder(request, info, call)

    def parse_error(
        self, status: int, body: bytes, request: Request | None, info: EngineInfo | None
    ) -> UnillmError:
        message = error_message(body)
        if request is not None and request.lora and "not loaded" in message and request.lora in message:
            return UnknownLora(
                f"sglang answered {status}: {message}. The LoRA adapter {request.lora!r} is not "
                "loaded: see llm.loras.list(), or load it with llm.loras.load(name, path)",
                engine=self.name,
                status=status,
                engine_message=message,
            )
        return super().parse_error(status, body, request, info)

    # -- metrics ---------------------------------------------------------------------------
    def metric_names(self, version: str | None) -> MetricNames:
        """SGLang's names (as of 0.5.x; served with ``--enable-metrics``, which launch passes).

        The prefix-cache ratio comes from cached / prompt token counters (the
        ``sglang:cache_hit_rate`` gauge when the counter is missing); speculative acceptance
        comes from SGLang's own gauges (it counts verification steps, not draft tokens).
        """
        return MetricNames(
            ttft="sglang:time_to_first_token_seconds",
            itl="sglang:inter_token_latency_seconds",
            tpot="sglang:request_time_per_output_token_seconds",
            e2e="sglang:e2e_request_latency_seconds",
            queue="sglang:queue_time_seconds",
            running="sglang:num_running_reqs",
            waiting="sglang:num_queue_reqs",
            kv_cache_usage="sglang:token_usage",
            prefix_cache_hits="sglang:cached_tokens_total",
            prefix_cache_queries="sglang:prompt_tokens_total",
            prefix_cache_hit_ratio="sglang:cache_hit_rate",
            spec_drafts="sglang:spec_verify_calls_total",
            spec_acceptance_rate="sglang:spec_accept_rate",
            spec_acceptance_length="sglang:spec_accept_length",
            prompt_tokens="sglang:prompt_tokens_total",
            generation_tokens="sglang:generation_tokens_total",
        )

    # -- health, LoRA ----------------------------------------------------------------------
    def health_path(self) -> str:
        """``/health_generate``: answers 200 only once the scheduler has produced a token."""
        return "/health_generate"

    def check_lora(self, name: str, config: Mapping[str, Any] | None, info: EngineInfo) -> None:
        """Refuse an adapter beyond the launch-time limits (rank, target modules) before sending."""
        if not isinstance(info, SGLangInfo):
            return
        if info.lora_enabled is False:
            raise self._without_lora(
                info,
                Feature.LORA_RUNTIME,
                "--enable-lora",
                "Launch it with runtime_lora=True and max_lora_rank=R (or lora={...})",
            )
        if not config:
            return
        rank = config.get("r")
        if isinstance(rank, int) and info.max_lora_rank is not None and rank > info.max_lora_rank:
            raise UnsupportedFeature(
                self.name,
                f"LoRA adapter {name!r} of rank {rank}",
                version=info.version,
                why=f"the server reserved rank {info.max_lora_rank} at launch (--max-lora-rank)",
                alternative=f"Relaunch with max_lora_rank={rank} or more",
            )
        wanted = normalized_modules(config.get("target_modules"))
        allowed = normalized_modules(info.lora_target_modules)
        if wanted and allowed and "all" not in allowed and not wanted <= allowed:
            raise UnsupportedFeature(
                self.name,
                f"LoRA adapter {name!r} on {sorted(wanted - allowed)}",
                version=info.version,
                why=f"the server reserved LoRA weights for {sorted(allowed)} at launch "
                "(--lora-target-modules)",
                alternative="Relaunch with those modules in --lora-target-modules (extra_args), "
                "or pass the adapter in lora={...} at launch",
            )

    def load_lora(self, name: str, path: str) -> HttpCall:
        return HttpCall("POST", "/load_lora_adapter", {"lora_name": name, "lora_path": path})

    def unload_lora(self, name: str) -> HttpCall:
        return HttpCall("POST", "/unload_lora_adapter", {"lora_name": name})

    def list_loras(self) -> HttpCall:
        return HttpCall("GET", "/v1/models")

    def parse_loras(self, body: Any) -> list[LoraInfo]:
        return [
            LoraInfo(name=str(m["id"]), path=m.get("root"))
            for m in _mapping(body).get("data") or []
            if isinstance(m, Mapping) and m.get("parent")
        ]

    # -- launch ----------------------------------------------------------------------------
    def install(self, *, gpu: bool) -> EngineInstall:
        if not gpu:
            raise UnsupportedFeature(
                self.name,
                "CPU install",
                why="SGLang's PyPI wheels need CUDA kernels (sglang-kernel, "
                "flashinfer); the CPU kernel build is not on PyPI",
                alternative="Run `unillm setup sglang --gpu` on a CUDA machine, or install SGLang's "
                "CPU build yourself and pass python=<its interpreter> to unillm.launch",
            )
        return EngineInstall(packages=GPU_PACKAGES)

    def command(self, spec: LaunchSpec) -> LaunchCommand:
        return launch_command(spec, self.name)

    def cpu_recipe(self, spec: LaunchSpec, workdir: Path) -> CpuRecipe:
        """SGLang on a CPU: **experimental** (runs from the test suite's ``sglang-cpu`` env)."""
        return cpu_recipe(spec, workdir)

    def kv_events_args(self, endpoint: str, replay_endpoint: str) -> list[str] | None:
        """``--kv-events-config``: SGLang's ZMQ publisher (vLLM's event format), bound to
        ``endpoint``, with its replay."""
        config = {"publisher": "zmq", "endpoint": endpoint, "replay_endpoint": replay_endpoint}
        return ["--kv-events-config", json.dumps(config)]


# SGLang stores LoRA weights per fused projection (lora/utils.py get_normalized_target_modules).
_FUSED = {
    "q_proj": "qkv_proj",
    "k_proj": "qkv_proj",
    "v_proj": "qkv_proj",
    "gate_proj": "gate_up_proj",
    "up_proj": "gate_up_proj",
    "all-linear": "all",
}


def normalized_modules(modules: Any) -> set[str]:
    """Target modules as SGLang names them internally (q/k/v_proj -> qkv_proj, ...)."""
    if isinstance(modules, str):
        modules = [modules]
    if not isinstance(modules, (list, tuple, set)):
        return set()
    return {_FUSED.get(str(m).rsplit(".", 1)[-1], str(m).rsplit(".", 1)[-1]) for m in modules}


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _str_or_none(value: Any) -> str | None:
    return str(value) if value is not None else None


def _low_priority_first(server: Mapping[str, Any]) -> bool:
    """Whether the server schedules by priority with lower values first (as unillm's priority=)."""
    return (
        server.get("enable_priority_scheduling") is True
        and server.get("schedule_low_priority_values_first") is True
    )
