"""The TensorRT-LLM adapter: unified requests to ``trtllm-serve`` (OpenAI-compatible), and its launch.

llm = unillm.connect("tensorrt_llm", "http://gpu-box:8000")
async with unillm.launch("tensorrt_llm", model="Qwen/Qwen2.5-0.5B-Instruct") as llm: ...
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from typing import Any

from unillm.adapter import (
    EXTRA_SAMPLING,
    NATIVE,
    PRIORITY_ALTERNATIVE,
    Capabilities,
    Choice,
    Constraint,
    Feature,
    Grammar,
    JsonSchema,
    LaunchCommand,
    LaunchSpec,
    MalformedResponse,
    MetricNames,
    OpenAICompatAdapter,
    Regex,
    Request,
    Sample,
    Support,
    UnknownLora,
    UnsupportedFeature,
    discovered,
    model_cards,
    text_field,
    unsupported,
)
from unillm.adapter.base import EngineInfo, EngineInstall, HttpCall
from unillm.adapter.schemas import guidance_problem, portable_schema, schema_refusal, xgrammar_problem
from unillm_tensorrt_llm import launch, metrics

ENGINE = "tensorrt_llm"
#: ChatCompletionRequest.reasoning_effort's values that unillm's efforts can be.
REASONING_EFFORTS = ("none", "low", "medium", "high")
ONE_SERVER = "Run trtllm-serve under mpirun/srun as TensorRT-LLM's docs describe, or use vLLM or SGLang"
LORA_HOW = "Pass lora={name: path} at launch, or TensorRTLLMAdapter(loras={name: path}) when connecting"
NO_GUIDE = (
    "needs the server started with guided_decoding_backend (unillm's launch sets xgrammar in its "
    "YAML options); a server without one answers an error"
)


class TensorRTLLMAdapter(OpenAICompatAdapter):
    """Talk to or start NVIDIA TensorRT-LLM: ``unillm.connect("tensorrt_llm", "http://host:8000")``.

    Requests follow ``trtllm-serve``'s protocol models (``tensorrt_llm/serve/openai_protocol.py``):
    ``top_k``, ``min_p`` and ``repetition_penalty`` under unillm's names; a JSON schema, a regex or
    an EBNF grammar in ``response_format`` (``json_schema`` / ``regex`` / ``ebnf``; a Choice becomes
    an escaped regex alternation); a LoRA as ``lora_request`` (name, integer id and *path*: the
    server loads it on the request, so the adapter must know the paths: from the launch, or
    ``loras=`` when connecting). A forced tool call is sent as the call's JSON schema. Logprobs
    on a prompt completion are a count of at least 1 (trtllm-serve reads 0 as off). Thinking:
    ``thinking=`` is ``chat_template_kwargs.enable_thinking``, ``thinking_budget=`` is
    ``thinking_token_budget``, ``reasoning_effort=`` is ``reasoning_effort`` (no "minimal"). Lark
    grammars and runtime LoRA loading are refused before sending, and so is ``thinking=True`` with a
    constraint on a launched server (launched without a reasoning parser, its guide binds from the
    first token).

    Launch: ``trtllm-serve serve`` with its flags (parallel sizes, batch, sequence length, KV
    memory share) and a YAML options file unillm writes next to the command (speculative
    decoding, LoRA, prefix reuse, guided decoding, iteration stats). Launching needs an NVIDIA
    driver: without one it is refused with ``UnsupportedFeature`` when it starts (``--dry-run``
    still prints the command and the file).
    """

    name = "tensorrt_llm"
    display_name = "TensorRT-LLM"
    engine_module = "tensorrt_llm"
    extra_sampling_fields = EXTRA_SAMPLING
    thinking_options = ("thinking", "thinking_budget", "reasoning_effort")  # ChatCompletionRequest fields
    structured_backends = launch.BACKENDS  # guided_decoding_backend in the YAML options

    def __init__(
        self, *, loras: Mapping[str, str] | None = None, structured_backend: str | None = None
    ) -> None:
        """``structured_backend``: the server's guided-decoding backend when known (schemas it
        cannot honour are then refused before sending); None: unknown (a connected server)."""
        self.loras = dict(loras or {})
        self.structured_backend = structured_backend

    def bind(self, spec: LaunchSpec) -> TensorRTLLMAdapter:
        """A copy that knows the LoRA paths and the guided-decoding backend ``spec`` launched with.

        unillm launches trtllm-serve without a reasoning parser, and without one its guided
        decoding binds from the first token (``_response_format_to_guided_decoding_params`` in
        openai_protocol.py at 0076e93 puts the constraint after a thought only with a parser):
        ``thinking=True`` with a constraint is refused before sending (a connected server, whose
        parser is unknown, is sent it).
        """
        bound = copy.copy(self)
        bound.loras = dict(spec.lora)
        bound.structured_backend = spec.structured_backend or launch.DEFAULT_BACKEND
        bound.constrains_after_thinking = False
        return bound

    def __repr__(self) -> str:
        return f"TensorRTLLMAdapter(loras={sorted(self.loras)!r})"

    # -- capabilities ----------------------------------------------------------------------
    def capabilities(self, version: str | None = None) -> Capabilities:
        spec_note = "rendered into the YAML options' speculative_config"
        features: dict[Feature, Support] = {f: NATIVE for f in Feature}
        features.update(
            {
                Feature.JSON_SCHEMA: Support(why=NO_GUIDE),
                Feature.REGEX: Support(why=NO_GUIDE),
                Feature.GRAMMAR: Support(why=NO_GUIDE),
                Feature.CHOICE: Support(level="emulated", why="as an escaped regex alternation; " + NO_GUIDE),
                Feature.GRAMMAR_LARK: unsupported(
                    "TensorRT-LLM's guided decoding reads EBNF, not Lark", "Use Grammar(..., syntax='ebnf')"
                ),
                Feature.PRIORITY: unsupported(
                    "unillm maps no request priority for trtllm-serve", PRIORITY_ALTERNATIVE
                ),
                Feature.LORA: Support(why="lora_request with the adapter's path: " + LORA_HOW),
                Feature.LORA_RUNTIME: unsupported(
                    "trtllm-serve has no LoRA load endpoint: the request naming an adapter's path loads it",
                    LORA_HOW,
                ),
                Feature.SPEC_NGRAM: Support(why=spec_note),
                Feature.SPEC_DRAFT: Support(why=spec_note),
                Feature.SPEC_EAGLE: Support(why="EAGLE-3 (method='eagle3'); " + spec_note),
                Feature.SPEC_MTP: Support(why=spec_note),
                Feature.DATA_PARALLEL: unsupported(
                    "one trtllm-serve serves one replica", "Launch one per replica behind a router"
                ),
                Feature.MULTI_NODE: unsupported(
                    "unillm does not launch TensorRT-LLM over several machines", ONE_SERVER
                ),
                Feature.PD_DISAGGREGATION: unsupported(
                    "unillm does not launch trtllm-serve's disaggregated mode",
                    "Use vLLM or SGLang with unillm.Disaggregation(...)",
                ),
                Feature.TOOL_CHOICE_AUTO: Support(
                    why="needs the server started with a tool parser: extra_args=['--tool_parser', NAME]"
                ),
                Feature.TOOL_CHOICE_REQUIRED: Support(
                    level="emulated", why="the call's JSON schema as response_format"
                ),
                Feature.TOOL_CHOICE_NAMED: Support(
                    level="emulated", why="the call's JSON schema as response_format"
                ),
                Feature.IMAGES: Support(why="vision-language models only"),
                Feature.EMBEDDINGS: unsupported(
                    "unillm launches and talks to trtllm-serve for generation only",
                    'Use unillm.launch("vllm", ..., task="embed") or "sglang" for embeddings',
                ),
                Feature.TOKENIZE: unsupported(
                    "trtllm-serve's tokenize route is internal (/_internal/tokenize)",
                    "Use the model's tokenizer locally (Hugging Face tokenizers)",
                ),
            }
        )
        return Capabilities(engine=self.name, version=version, features=features)

    # -- metrics ---------------------------------------------------------------------------
    def metric_names(self, version: str | None) -> MetricNames:
        """The iteration stats' fields (see ``unillm_tensorrt_llm.metrics``); no latency histograms."""
        return metrics.NAMES

    def metric_samples(self, text: str) -> list[Sample] | None:
        return metrics.samples(text)

    # -- discovery -------------------------------------------------------------------------
    def discovery(self) -> Mapping[str, HttpCall]:
        return {"version": HttpCall("GET", "/version"), "models": HttpCall("GET", "/v1/models")}

    def parse_info(self, answers: Mapping[str, Any], model: str | None) -> EngineInfo:
        version = text_field(
            discovered(answers, "version", self.name, "/version"), "version", self.name, "/version"
        )
        cards = model_cards(answers, self.name)
        if model is None:
            if not cards:
                raise MalformedResponse("tensorrt_llm: /v1/models lists no model; is this trtllm-serve?")
            model = str(cards[0]["id"])
        return EngineInfo(engine=self.name, model=model, version=version)

    # -- requests --------------------------------------------------------------------------
    def model_field(self, request: Request, info: EngineInfo) -> str:
        return info.model  # a LoRA goes in lora_request, not in model

    def constraint_fields(self, output: Constraint, info: EngineInfo) -> dict[str, Any]:
        if isinstance(output, JsonSchema):
            schema = self._checked_schema(output.schema, info)
            return {
                "response_format": {
                    "type": "json_schema",
                    "json_schema": {"name": output.name, "schema": schema},
                }
            }
        if isinstance(output, Regex):
            return {"response_format": {"type": "regex", "regex": output.pattern}}
        if isinstance(output, Choice):
            return {
                "response_format": {"type": "regex", "regex": "|".join(re.escape(o) for o in output.options)}
            }
        assert isinstance(output, Grammar)  # Lark is refused by the capabilities before this
        return {"response_format": {"type": "ebnf", "ebnf": output.text}}

    def _checked_schema(self, schema: Mapping[str, Any], info: EngineInfo) -> dict[str, Any]:
        """The schema to send: for a known xgrammar server exactly rewritten and checked against
        its rules, for llguidance checked by llguidance itself (where installed); as given else."""
        backend = self.structured_backend
        if backend == "xgrammar":
            schema = portable_schema(schema)
        problem = (
            xgrammar_problem(schema)
            if backend == "xgrammar"
            else guidance_problem(schema, compact=False)
            if backend == "llguidance"
            else None
        )
        if problem is not None:
            other = "llguidance" if backend == "xgrammar" else "xgrammar"
            raise schema_refusal(
                self.name,
                str(backend),
                problem,
                version=info.version,
                alternative=f"Launch with structured_backend={other!r}, or drop output= and validate the "
                "answer yourself (e.g. Model.model_validate_json(r.text))",
            )
        return dict(schema)

    def forces_by_constraint(self, request: Request, info: EngineInfo) -> bool:
        choice = request.tool_choice
        return choice is not None and choice.forces_call

    def build(self, request: Request, info: EngineInfo) -> HttpCall:
        if request.reasoning_effort is not None and request.reasoning_effort not in REASONING_EFFORTS:
            raise UnsupportedFeature(
                self.name,
                f"reasoning_effort={request.reasoning_effort!r}",
                version=info.version,
                why="trtllm-serve's reasoning_effort is one of " + ", ".join(REASONING_EFFORTS),
                alternative="Use reasoning_effort='low'",
            )
        call = super().build(request, info)
        body = dict(call.json or {})
        if request.logprobs and request.messages is None:
            body["logprobs"] = max(1, request.top_logprobs or 0)  # to_sampling_params: 0 is off
        call = HttpCall(call.method, call.path, body, call.stream)
        if request.lora is None:
            return call
        if request.lora not in self.loras:
            known = ", ".join(sorted(self.loras)) or "none"
            raise UnknownLora(
                f"tensorrt_llm: LoRA {request.lora!r} has no known path (known: {known}); trtllm-serve "
                f"loads an adapter from the path each request names. {LORA_HOW}",
                engine=self.name,
            )
        ids = launch.lora_ids(self.loras)
        lora = {
            "lora_name": request.lora,
            "lora_int_id": ids[request.lora],
            "lora_path": self.loras[request.lora],
        }
        return HttpCall(call.method, call.path, {**(call.json or {}), "lora_request": lora}, call.stream)

    # -- launch ----------------------------------------------------------------------------
    def command(self, spec: LaunchSpec) -> LaunchCommand:
        return launch.command(spec)

    def install(self, *, gpu: bool) -> EngineInstall:
        if not gpu:
            raise UnsupportedFeature(
                self.name,
                "unillm setup without a GPU",
                why="TensorRT-LLM runs on NVIDIA GPUs only",
                alternative=launch.GPU_INSTALL,
            )
        return EngineInstall(packages=("tensorrt_llm",), python="3.12")
