"""The MLX adapter: unified requests to mlx_lm.server's OpenAI API, or to mlx-lm in this process.

Server mode speaks mlx_lm.server's OpenAI API and handles its quirks: per-request adapters only
apply with an explicit model path (``lora="name"`` sends both), a draft model needs the prompt
cache off, and constrained output is refused (the server silently ignores it). In-process mode
answers the same API from mlx-lm inside this process, with constraints enforced during decoding
by llguidance; its discovery reports the version ``<mlx-lm version>+in-process``.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from unillm.adapter import (
    COMPLETIONS_PATH,
    EXTRA_SAMPLING,
    LAYOUT_FEATURES,
    NATIVE,
    PRIORITY_ALTERNATIVE,
    Capabilities,
    Constraint,
    CpuRecipe,
    Feature,
    LaunchCommand,
    LaunchSpec,
    MetricNames,
    OpenAICompatAdapter,
    Request,
    RuntimeLoraEndpoints,
    Support,
    TokenizeEndpoint,
    UnillmError,
    UnknownLora,
    UnsupportedFeature,
    discovered,
    error_for_status,
    error_message,
    model_cards,
    structured_output,
    text_field,
    unsupported,
)
from unillm.adapter.base import EngineInfo, EngineInstall, HttpCall
from unillm.adapter.schemas import guidance_problem, schema_refusal
from unillm_mlx import launch
from unillm_mlx.launch import DRAFT_ONLY, MLX_LM_VERSION, NO_EMBEDDINGS, SINGLE_DEVICE, looks_like_path

if TYPE_CHECKING:
    import httpx

__all__ = ["DEFAULT_MODEL", "IN_PROCESS_SUFFIX", "MLXAdapter", "is_in_process"]

IN_PROCESS_SUFFIX = "+in-process"
DEFAULT_MODEL = "default_model"  # mlx_lm.server's name for the model given by --model
_IN_PROCESS_HINT = (
    'Run MLX in-process, where unillm enforces it: unillm.launch("mlx", model=..., in_process=True)'
)
_CONSTRAINTS = (Feature.JSON_SCHEMA, Feature.REGEX, Feature.CHOICE, Feature.GRAMMAR, Feature.GRAMMAR_LARK)
_COMMON = (
    Feature.COMPLETION,
    Feature.CHAT,
    Feature.STREAM,
    Feature.STREAM_USAGE,
    Feature.LORA,
    Feature.TOP_K,
    Feature.MIN_P,
    Feature.REPETITION_PENALTY,
    Feature.PRESENCE_PENALTY,
    Feature.FREQUENCY_PENALTY,
    Feature.SEED,
    Feature.STOP,
    Feature.SPEC_DRAFT,
)


def is_in_process(version: str | None) -> bool:
    """True for the version string that unillm's in-process MLX engine reports."""
    return bool(version) and str(version).endswith(IN_PROCESS_SUFFIX)


class MLXAdapter(RuntimeLoraEndpoints, TokenizeEndpoint, OpenAICompatAdapter):
    """mlx-lm: ``mlx_lm.server`` (server mode) or mlx-lm in this process (``in_process=True``).

    ``unillm.launch`` binds the adapter to its launch settings (model path, LoRA names). To use
    LoRA names with a server you did not start, bind them yourself::

        llm = unillm.LLM(MLXAdapter(model_path="/m", loras={"sql": "/a/sql"}), "http://127.0.0.1:8080")
    """

    name = "mlx"
    display_name = "MLX"
    engine_module = "mlx_lm"
    thinking_options = ("thinking",)  # chat_template_kwargs / request fields
    #: in process and mlx_lm.server hand a message's keys to the chat template as they are; Qwen3's
    #: and DeepSeek's templates read this one
    reasoning_message_field = "reasoning_content"
    #: in process, unillm's llguidance grammar allows one thought before the constrained answer
    #: (after_thought; its markers named as tokens where the tokenizer has them as added tokens,
    #: which text cannot spell); server mode takes no constraint (refused by capabilities)
    constrains_after_thinking = True
    extra_sampling_fields = EXTRA_SAMPLING

    def __init__(self, *, model_path: str | None = None, loras: Mapping[str, str] | None = None) -> None:
        self.model_path = model_path
        self.loras = dict(loras or {})

    def bind(self, spec: LaunchSpec) -> MLXAdapter:
        """This adapter, knowing the launched model path and LoRA names."""
        return MLXAdapter(model_path=spec.model, loras=spec.lora)

    def modes(self) -> dict[str, str | None]:
        """Capability-table columns: the server, and the engine inside your process."""
        return {"MLX": None, "MLX in-proc": MLX_LM_VERSION + IN_PROCESS_SUFFIX}

    # -- capabilities ----------------------------------------------------------------------
    def capabilities(self, version: str | None = None) -> Capabilities:
        features: dict[Feature, Support] = {f: NATIVE for f in _COMMON}
        features[Feature.PRIORITY] = unsupported(
            "mlx-lm serves requests in arrival order (no request priority)", PRIORITY_ALTERNATIVE
        )
        if is_in_process(version):
            by_unillm = Support(level="emulated", why="enforced during decoding by unillm (llguidance)")
            features.update({f: by_unillm for f in _CONSTRAINTS})
            features[Feature.N] = Support(level="emulated", why="unillm generates the answers one by one")
            features[Feature.LOGPROBS] = NATIVE
            features[Feature.LORA_RUNTIME] = Support(
                level="emulated", why="unillm loads mlx-lm adapters by name"
            )
            forced = Support(level="emulated", why="the call is forced by unillm (llguidance)")
            features[Feature.TOOLS] = features[Feature.TOOL_CHOICE_REQUIRED] = forced
            features[Feature.TOOL_CHOICE_NAMED] = forced
            features[Feature.TOOL_CHOICE_AUTO] = unsupported(
                "in-process MLX does not read calls out of free text",
                "Pass tool_choice='required' or a tool's name (forced by unillm), or use server mode "
                "with a model whose template mlx-lm has a tool parser for",
            )
            features[Feature.IMAGES] = unsupported(
                "in-process MLX runs text models only", "Use vLLM or SGLang with a vision-language model"
            )
            features[Feature.TOKENIZE] = NATIVE
        else:
            refused = unsupported(
                "mlx_lm.server has no constrained decoding (it silently ignores response_format)",
                _IN_PROCESS_HINT,
            )
            features.update({f: refused for f in _CONSTRAINTS})
            features[Feature.N] = unsupported(
                "mlx_lm.server ignores n", "Send n requests, or run MLX in-process (in_process=True)"
            )
            features[Feature.LOGPROBS] = unsupported(
                "mlx_lm.server reports logprobs without the token text and top_logprobs unsorted",
                "Run MLX in-process (in_process=True)",
            )
            features[Feature.LORA_RUNTIME] = unsupported(
                "mlx_lm.server has no adapter endpoints",
                "Pass lora={name: path} to unillm.launch, or run MLX in-process (in_process=True)",
            )
            features[Feature.TOOLS] = NATIVE
            features[Feature.TOOL_CHOICE_AUTO] = Support(
                why="tools go to the chat template; calls are read only when mlx-lm has a tool "
                "parser for the model's template, otherwise it answers with text (no error)"
            )
            no_choice = unsupported("mlx_lm.server ignores tool_choice", _IN_PROCESS_HINT)
            features[Feature.TOOL_CHOICE_REQUIRED] = features[Feature.TOOL_CHOICE_NAMED] = no_choice
            features[Feature.IMAGES] = Support(
                why="only models mlx-lm has an image processor for; others answer an error"
            )
            features[Feature.TOKENIZE] = unsupported(
                "mlx_lm.server has no tokenize endpoint", "Run MLX in-process (in_process=True)"
            )
        features[Feature.EMBEDDINGS] = NO_EMBEDDINGS
        for f in (Feature.SPEC_NGRAM, Feature.SPEC_EAGLE, Feature.SPEC_MTP):
            features[f] = DRAFT_ONLY
        features.update(dict.fromkeys(LAYOUT_FEATURES, SINGLE_DEVICE))
        return Capabilities(engine=self.name, version=version, features=features)

    # -- metrics ---------------------------------------------------------------------------
    def metric_names(self, version: str | None) -> MetricNames:
        """In-process: unillm's own counters. Server mode: refused (mlx_lm.server has no /metrics)."""
        if not is_in_process(version):
            raise UnsupportedFeature(
                self.name,
                "engine metrics (/metrics)",
                version=version,
                why="mlx_lm.server has no metrics endpoint",
                alternative="Use the client timings every answer carries (r.timings: ttft_s, itl_s, "
                "tpot_s), or run MLX in-process (in_process=True), which serves request "
                "and token counters",
            )
        return MetricNames(
            running="mlx:num_requests_running",  # queued or running: one worker decodes
            spec_accepted_tokens="mlx:spec_decode_num_accepted_tokens_total",
            prompt_tokens="mlx:prompt_tokens_total",
            generation_tokens="mlx:generation_tokens_total",
        )

    # -- discovery -------------------------------------------------------------------------
    def discovery(self) -> Mapping[str, HttpCall]:
        return {"models": HttpCall("GET", "/v1/models"), "version": HttpCall("GET", "/version")}

    def parse_info(self, answers: Mapping[str, Any], model: str | None) -> EngineInfo:
        # mlx_lm.server has no /version (None = server mode); its /v1/models may be an empty body.
        # The in-process engine lists its context limit in /v1/models, as vLLM does (the server has none).
        answer = discovered(answers, "version", self.name, "/version")
        version = text_field(answer, "version", self.name, "/version")
        served = model or self.model_path or DEFAULT_MODEL
        cards = model_cards(answers, self.name)
        limit = next((m.get("max_model_len") for m in cards if m["id"] == served), None)
        return EngineInfo(engine=self.name, model=served, version=version, max_model_len=limit)

    # -- requests --------------------------------------------------------------------------
    def model_field(self, request: Request, info: EngineInfo) -> str:
        """The served model; with a LoRA, the model *path* (the server ignores adapters otherwise)."""
        if request.lora is None or is_in_process(info.version):
            return info.model
        path = self.model_path or (info.model if info.model != DEFAULT_MODEL else None)
        if path is None:
            raise UnsupportedFeature(
                self.name,
                Feature.LORA.value,
                why="mlx_lm.server applies per-request adapters only with an explicit model path",
                alternative="Pass model=<the server's --model path> to unillm.connect, or use "
                "unillm.LLM(MLXAdapter(model_path=..., loras={...}), url)",
            )
        return path

    def constraint_fields(self, output: Constraint, info: EngineInfo) -> dict[str, Any]:
        # Only reached in-process: capabilities refuse constraints in server mode before this.
        key, value = structured_output(output, lark_key="lark")
        if key == "json":
            from unillm_mlx.grammar import strict_schema

            problem = guidance_problem(strict_schema(value), compact=True)
            if problem is not None:
                raise schema_refusal(
                    self.name,
                    "llguidance (in process)",
                    problem,
                    version=info.version,
                    alternative="Use an engine whose backend implements it (see "
                    "docs/guide/structured-output.md), or drop output= and validate the answer yourself "
                    "(e.g. Model.model_validate_json(r.text))",
                )
        return {"structured_outputs": {key: value}}

    def forces_by_constraint(self, request: Request, info: EngineInfo) -> bool:
        choice = request.tool_choice
        return choice is not None and choice.forces_call and is_in_process(info.version)

    def build(self, request: Request, info: EngineInfo) -> HttpCall:
        call = super().build(request, info)
        body = dict(call.json or {})
        if request.logprobs and call.path == COMPLETIONS_PATH:
            body["logprobs"] = True  # mlx validates logprobs as a bool on both routes
            if request.top_logprobs is not None:
                body["top_logprobs"] = request.top_logprobs
        if request.lora is not None:
            body["adapters"] = self._adapter_field(request.lora, info)
        return HttpCall(call.method, call.path, body, call.stream)

    def _adapter_field(self, lora: str, info: EngineInfo) -> str:
        if is_in_process(info.version):
            return lora  # the in-process engine resolves names (and paths) itself
        path = self.loras.get(lora) or (lora if looks_like_path(lora) else None)
        if path is None:
            known = ", ".join(sorted(self.loras)) or "none"
            raise UnknownLora(
                f"mlx: no LoRA adapter named {lora!r} (known: {known}). mlx_lm.server has no adapter "
                "names: pass lora={name: path} to unillm.launch, or lora=<adapter path>",
                engine=self.name,
                status=None,
                engine_message="",
            )
        return path

    def parse_error(
        self, status: int, body: bytes, request: Request | None, info: EngineInfo | None
    ) -> UnillmError:
        message = error_message(body)
        if status == 404 and request is not None and request.lora is not None:
            return UnknownLora(
                f"mlx answered 404: {message}. Name adapters at launch (lora={{name: path}}; in-process "
                "also llm.loras.load(name, path)); mlx_lm.server needs mlx-lm's layout "
                "(unillm_mlx.convert_peft_adapter converts PEFT adapters)",
                engine=self.name,
                status=status,
                engine_message=message,
            )
        return error_for_status(self.name, status, message, request)

    def lora_error(self, status: int, body: bytes, info: EngineInfo | None) -> UnillmError:
        if info is None or not is_in_process(info.version):
            return UnsupportedFeature(
                self.name,
                Feature.LORA_RUNTIME.value,
                version=info.version if info else None,
                why="mlx_lm.server has no adapter endpoints",
                alternative="Pass lora={name: path} to unillm.launch, or run MLX in-process",
            )
        return self.parse_error(status, body, None, info)

    # -- launch (unillm_mlx.launch) --------------------------------------------------------
    def install(self, *, gpu: bool) -> EngineInstall:
        return launch.install(gpu=gpu)

    def command(self, spec: LaunchSpec) -> LaunchCommand:
        """``mlx_lm server`` (through ``SERVER_MAIN``) with the spec's flags."""
        return launch.command(spec)

    def cpu_recipe(self, spec: LaunchSpec, workdir: Path) -> CpuRecipe:
        """mlx-lm on a CPU (see :func:`unillm_mlx.launch.cpu_recipe`)."""
        return launch.cpu_recipe(spec, workdir)

    def expected_version(self, spec: LaunchSpec) -> str | None:
        """In-process mode reports ``<mlx-lm version>+in-process``; a server reports none."""
        return MLX_LM_VERSION + IN_PROCESS_SUFFIX if spec.in_process else None

    def in_process(self, spec: LaunchSpec) -> httpx.AsyncBaseTransport:
        """mlx-lm inside this process, answering this adapter's HTTP API (needs unillm-mlx[inprocess])."""
        try:
            from unillm_mlx.inprocess import InProcessTransport
        except ImportError as e:
            raise UnsupportedFeature(
                self.name,
                "in-process mode",
                why=f"mlx-lm is not importable here ({e})",
                alternative="pip install 'unillm-mlx[inprocess]'",
            ) from None
        return InProcessTransport(spec)
