"""The vLLM adapter: unified requests to vLLM's OpenAI-compatible server (pure translation).

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

JSON schemas: when unillm launched the server (``bind(spec)``) it knows the structured-outputs
backend (``structured_backend=``; the CPU recipe picks ``guidance``) and checks each schema
before sending (:mod:`unillm.adapter.schemas`): on ``xgrammar`` exact rewrites first (merged
``allOf``, declared ``required``), then its rules; on ``guidance`` llguidance itself (on the
schema as sent, as vLLM's request check reads it, and as its backend compiles it); on
``auto`` what vLLM would do (xgrammar, or guidance for what vLLM's own check sends there).
A connected server's backend is unknown, so nothing is refused there; answers are validated
everywhere.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from unillm.adapter import (
    EXTRA_SAMPLING,
    NATIVE,
    Capabilities,
    Constraint,
    CpuRecipe,
    Feature,
    InvalidOptions,
    LaunchCommand,
    LaunchSpec,
    MalformedResponse,
    MetricNames,
    OpenAICompatAdapter,
    OpenAIEmbeddings,
    Request,
    RuntimeLoraEndpoints,
    Support,
    TokenizeEndpoint,
    UnillmError,
    UnsupportedFeature,
    at_least,
    discovered,
    error_message,
    model_cards,
    parse_version,
    structured_output,
    text_field,
    unsupported,
)
from unillm.adapter.base import EngineInfo, EngineInstall, HttpCall
from unillm.adapter.schemas import (
    SchemaProblem,
    guidance_problem,
    portable_schema,
    schema_refusal,
    vllm_refusal,
    xgrammar_miscompile,
    xgrammar_problem,
    xgrammar_strings,
)
from unillm.adapter.schemas.walk import nodes
from unillm_vllm import launch
from unillm_vllm.inprocess.translate import IN_PROCESS_SUFFIX

if TYPE_CHECKING:
    import httpx

__all__ = ["VLLMAdapter"]

STRUCTURED_OUTPUTS_SINCE = (0, 10, 2)
KV_CACHE_METRICS_SINCE = (0, 9, 2)  # vllm:kv_cache_usage_perc, vllm:prefix_cache_* (gpu_* before)
ITL_METRIC_SINCE = (0, 11, 0)
#: Why a schema vLLM's auto backend would hand to outlines is refused (see _outlines_fallback).
_OUTLINES_WHY = (
    "beside a keyword xgrammar refuses, vLLM's auto picks outlines (not guidance) for it, which unillm "
    "cannot check and which answered HTTP 400 on every such JSONSchemaBench schema"
)
# vllm:inter_token_latency_seconds (time_per_output_token before)
#: What to do about a oneOf llguidance refuses (see _guidance_problem).
_ONE_OF_WAY = (
    'Write "anyOf" in place of "oneOf", or give each branch "additionalProperties": false so the '
    "branches cannot overlap. Or: "
)


#: What in-process vLLM (one engine in a worker, text in and out) does not do, and what to do.
_SERVER = "Launch vLLM as a server for it (drop in_process / --in-process)"
_IN_PROCESS_LACKS = {
    Feature.STREAM: unsupported("in-process vLLM answers whole (a batch writes whole answers)", _SERVER),
    Feature.LOGPROBS: unsupported("the in-process worker returns no logprobs", _SERVER),
    Feature.IMAGES: unsupported("the in-process worker takes text only", _SERVER),
    Feature.EMBEDDINGS: unsupported("the in-process worker generates only", _SERVER),
    Feature.TOKENIZE: unsupported("the in-process worker serves no /tokenize", _SERVER),
    Feature.LORA: unsupported("the in-process worker loads no adapters", _SERVER),
    Feature.LORA_RUNTIME: unsupported("the in-process worker loads no adapters", _SERVER),
    **{
        f: unsupported("the in-process worker runs no tool-call parser", _SERVER)
        for f in (
            Feature.TOOLS,
            Feature.TOOL_CHOICE_AUTO,
            Feature.TOOL_CHOICE_REQUIRED,
            Feature.TOOL_CHOICE_NAMED,
        )
    },
}


#: 400 answers that mean a feature this server cannot honour: (words in vLLM's message, the
#: feature, why, what to do instead).
_UNSUPPORTED_400 = (
    (
        "--tool-call-parser",
        Feature.TOOL_CHOICE_AUTO,
        "the server was started without a tool parser",
        "Restart vLLM with --enable-auto-tool-choice --tool-call-parser NAME "
        "(unillm.launch(..., tool_parser=NAME)), or pass tool_choice='required' or a tool's name",
    ),
    (
        "is not a multimodal model",
        Feature.IMAGES,
        "the served model is text-only",
        "Serve a vision-language model, or send text only",
    ),
)


class VLLMAdapter(RuntimeLoraEndpoints, OpenAIEmbeddings, TokenizeEndpoint, OpenAICompatAdapter):
    """vLLM's OpenAI-compatible server (``vllm serve`` / ``vllm.entrypoints.openai.api_server``)."""

    name = "vllm"
    display_name = "vLLM"
    engine_module = "vllm"
    in_process_worker = True  # in_process=True: vLLM's engine in a worker on the vLLM env's python
    reasoning_parsers = launch.REASONING_PARSERS  # --reasoning-parser NAME
    takes_tool_parser = True  # --enable-auto-tool-choice --tool-call-parser NAME
    missing_lora_routes = (
        "this server does not expose runtime LoRA endpoints",
        "Start it with VLLM_ALLOW_RUNTIME_LORA_UPDATING=True (unillm.launch(..., runtime_lora=True)), "
        "or pass lora={name: path} at launch",
    )
    structured_backends = launch.STRUCTURED_BACKENDS
    takes_compact_json = True  # --structured-outputs-config '{"disable_any_whitespace": true}'
    ray_executor = True  # --distributed-executor-backend ray (ray_address=)
    thinking_options = (
        "thinking",
        "thinking_budget",
        "reasoning_effort",
    )  # chat_template_kwargs / request fields
    extra_sampling_fields = EXTRA_SAMPLING
    #: read from an assistant message and handed to the chat template (with ``reasoning_content``,
    #: its older name) since the interleaved-thinking support (vllm#28531); earlier servers drop it
    reasoning_message_field = "reasoning"

    def replay_field(self, info: EngineInfo) -> str | None:
        """``reasoning`` from vLLM 0.12 on; None before (the server dropped the field silently).

        Args:
            info: What discovery learnt about the engine (model, version, limits).
        """
        return self.reasoning_message_field if at_least(parse_version(info.version), (0, 12, 0)) else None

    def __init__(
        self,
        *,
        tool_parser: str | None = None,
        launched: bool = False,
        structured_backend: str | None = None,
        compact_json: bool = False,
        closed_objects: bool = False,
        after_thinking: bool | None = None,
        priority_scheduling: bool | None = None,
    ) -> None:
        self.tool_parser = tool_parser
        self.launched = launched  # True: tool_parser is known (unillm started the server)
        # the structured-outputs backend the server was started with; None: unknown (connected)
        self.structured_backend = structured_backend
        self.compact_json = compact_json
        self.closed_objects = closed_objects  # guidance's disable_additional_properties
        # True: launched with a reasoning parser, so structured outputs start after the thought
        self.constrains_after_thinking = after_thinking
        self.priority_scheduling = priority_scheduling  # launched with scheduling="priority"; None: unknown

    def bind(self, spec: LaunchSpec) -> VLLMAdapter:
        """This adapter, knowing the tool parser and structured-outputs backend the server was
        started with (:func:`unillm_vllm.launch.structured_settings`)."""
        backend, compact, closed = launch.structured_settings(spec)
        return VLLMAdapter(
            tool_parser=spec.parser(),
            launched=True,
            structured_backend=backend,
            compact_json=compact,
            closed_objects=closed,
            after_thinking=launch.constrains_after_thinking(spec),
            priority_scheduling=launch.schedules_by_priority(spec),
        )

    def capabilities(self, version: str | None = None) -> Capabilities:
        v = parse_version(version)
        features = {f: NATIVE for f in Feature}
        if version is not None and str(version).endswith(IN_PROCESS_SUFFIX):
            return Capabilities(engine=self.name, version=version, features={**features, **_IN_PROCESS_LACKS})
        forced = Support(
            why="with a tool parser natively; without one unillm forces the call "
            "with a structured-outputs JSON schema"
        )
        features[Feature.TOOL_CHOICE_REQUIRED] = features[Feature.TOOL_CHOICE_NAMED] = forced
        features[Feature.TOOL_CHOICE_AUTO] = Support(
            why="needs the server started with a tool parser (launch with tool_parser=...)"
        )
        features[Feature.IMAGES] = Support(why="vision-language models only")
        if v is not None and v < (0, 6, 0):
            old = unsupported("constrained output needs vLLM >= 0.6", "Upgrade vLLM")
            for f in (
                Feature.JSON_SCHEMA,
                Feature.REGEX,
                Feature.CHOICE,
                Feature.GRAMMAR,
                Feature.GRAMMAR_LARK,
            ):
                features[f] = old
        return Capabilities(engine=self.name, version=version, features=features)

    # -- discovery -------------------------------------------------------------------------
    def discovery(self) -> Mapping[str, HttpCall]:
        return {"version": HttpCall("GET", "/version"), "models": HttpCall("GET", "/v1/models")}

    def parse_info(self, answers: Mapping[str, Any], model: str | None) -> EngineInfo:
        version = text_field(
            discovered(answers, "version", self.name, "/version"), "version", self.name, "/version"
        )
        bases = [m for m in model_cards(answers, self.name) if not m.get("parent")]
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
        if key == "json" and self.structured_backend is not None:
            value = self._checked_schema(value, info)
        if legacy:
            return {f"guided_{key}": value}
        return {"structured_outputs": {key: value}}

    def _checked_schema(self, schema: Mapping[str, Any], info: EngineInfo) -> Mapping[str, Any]:
        """``schema`` as the server's backend can honour it (exactly rewritten where it helps),
        or UnsupportedFeature before sending."""
        backend = self.structured_backend or "auto"
        problem: SchemaProblem | None = None
        if backend in ("xgrammar", "auto"):
            schema = portable_schema(schema)
        if backend == "xgrammar":
            schema = xgrammar_strings(schema)  # its length-bounded strings admit raw control characters
            problem = xgrammar_problem(schema)
        elif backend == "guidance":
            problem = _guidance_problem(schema, compact=self.compact_json, closed=self.closed_objects)
        elif backend == "auto":  # vLLM's own check sends a schema to guidance, else xgrammar
            if vllm_refusal(schema) is not None and (outlines := _outlines_fallback(schema)):
                backend, problem = "outlines (vLLM's auto fell back to it)", outlines
            elif vllm_refusal(schema) is not None:
                backend, problem = (
                    "guidance (vLLM's auto fell back to it)",
                    _guidance_problem(schema, compact=self.compact_json, closed=False),
                )
            else:
                schema = xgrammar_strings(schema)
                backend, problem = "xgrammar (vLLM's auto chose it)", xgrammar_miscompile(schema)
        if problem is None:
            return schema
        other = "xgrammar" if backend.startswith("guidance") else "guidance"
        raise schema_refusal(
            self.name,
            backend,
            problem,
            version=info.version,
            alternative=(_ONE_OF_WAY if problem.keyword == "oneOf" else "")
            + f"Launch with structured_backend={other!r} (JSONSchemaBench coverage differs: see "
            "docs/guide/structured-output.md), use another engine, or drop output= and validate the "
            "answer yourself (e.g. Model.model_validate_json(r.text))",
        )

    def forces_by_constraint(self, request: Request, info: EngineInfo) -> bool:
        """unillm forces a call with a JSON schema without a tool parser, and after a thought."""
        choice = request.tool_choice
        forced = choice is not None and choice.forces_call
        return forced and (self.tool_parser is None or self.forced_call_after_a_thought(request))

    def build(self, request: Request, info: EngineInfo) -> HttpCall:
        choice = request.tool_choice
        if self.launched and self.tool_parser is None and choice is not None and choice.mode == "auto":
            raise self.no_tool_parser(
                info,
                "this server was started without a tool parser, so vLLM cannot find calls in "
                "free text (it answers HTTP 400)",
                "structured outputs",
            )
        return super().build(request, info)

    def parse_error(
        self, status: int, body: bytes, request: Request | None, info: EngineInfo | None
    ) -> UnillmError:
        message = error_message(body)
        for marker, feature, why, alternative in _UNSUPPORTED_400:
            if status == 400 and marker in message:
                return UnsupportedFeature(
                    self.name,
                    feature.value,
                    version=info.version if info else None,
                    why=f"{why} ({message})",
                    alternative=alternative,
                )
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

    # -- launch (unillm_vllm.launch) -------------------------------------------------------
    def install(self, *, gpu: bool) -> EngineInstall:
        return launch.install(gpu=gpu)

    def cpu_recipe(self, spec: LaunchSpec, workdir: Path) -> CpuRecipe:
        """vLLM's CPU build within a small memory budget (see :func:`unillm_vllm.launch.cpu_recipe`)."""
        return launch.cpu_recipe(spec, workdir)

    def launch_hints(self) -> Mapping[str, str]:
        return launch.LAUNCH_HINTS

    def kv_events_args(self, endpoint: str, replay_endpoint: str) -> list[str] | None:
        """``--kv-events-config``: vLLM's ZMQ publisher, bound to ``endpoint``, with its replay."""
        config = {
            "enable_kv_cache_events": True,
            "publisher": "zmq",
            "endpoint": endpoint,
            "replay_endpoint": replay_endpoint,
        }
        return ["--kv-events-config", json.dumps(config)]

    def command(self, spec: LaunchSpec) -> LaunchCommand:
        return launch.command(spec)

    def in_process(self, spec: LaunchSpec) -> httpx.AsyncBaseTransport:
        """vLLM's engine in a worker on the vLLM env's interpreter, fed without HTTP
        (:mod:`unillm_vllm.inprocess`); settings it cannot honour are refused first.

        Args:
            spec: The resolved launch settings (``python`` is the vLLM env's interpreter).

        Raises:
            InvalidOptions: A setting the in-process worker cannot honour, or no vLLM env.
        """
        from unillm_vllm.inprocess import settings
        from unillm_vllm.inprocess.transport import WorkerTransport

        settings.refuse(spec)
        if spec.python is None:
            raise InvalidOptions(
                "in-process vLLM runs in the vLLM env's interpreter, and none was found: run "
                "`unillm setup vllm`, or pass python=<the interpreter of an env that has vLLM>"
            )
        argv, env = settings.worker_argv(spec), settings.worker_env(spec)
        return WorkerTransport(spec.python, argv, env, spec.served_name or spec.model)

    def in_process_refusal(self, call: HttpCall) -> UnillmError | None:
        """The in-process worker's refusal of ``call`` (a body field it has no use for), or None.

        Args:
            call: The call :meth:`build` made for a request.
        """
        from unillm_vllm.inprocess.translate import Refused, job

        try:
            job(call.path, call.json or {}, "check")
        except Refused as e:
            return InvalidOptions(str(e))
        return None

    def expected_version(self, spec: LaunchSpec) -> str | None:
        """``<newest>+in-process`` for an in-process launch (its capabilities differ), else None.

        Args:
            spec: The launch settings.
        """
        return IN_PROCESS_SUFFIX if spec.in_process else None


def _outlines_fallback(schema: Mapping[str, Any]) -> SchemaProblem | None:
    """The first ``patternProperties``, which makes vLLM's auto use outlines for a schema xgrammar
    refuses (``has_guidance_unsupported_json_features``: anywhere in the document)."""
    where = next((at for at, node, _ in nodes(schema) if "patternProperties" in node), None)
    return (
        None
        if where is None
        else SchemaProblem("patternProperties", f"{where}/patternProperties", _OUTLINES_WHY)
    )


def _guidance_problem(schema: Mapping[str, Any], *, compact: bool, closed: bool) -> SchemaProblem | None:
    """What vLLM refuses on guidance. Its request check (``validate_guidance_grammar``) compiles the
    schema as sent, objects open and whitespace flexible, whatever the server's settings; the
    backend then compiles it as configured (``closed``, ``compact``). Both must pass: a ``oneOf``
    whose branches overlap only while objects are open passes the second and fails the first
    (HTTP 400, "oneOf constraints are not supported")."""
    sent = guidance_problem(schema, compact=False)
    if sent is not None and sent.keyword == "oneOf":
        why = f"vLLM's request check reads the schema as sent (objects still open), where {sent.why}"
        return replace(sent, why=why)
    if sent is None and (compact or closed):
        return guidance_problem(schema, compact=compact, closed=closed)
    return sent
