"""The llama.cpp adapter class: unified requests to llama-cpp-python's OpenAI-compatible server.

What the server takes and how unillm maps onto it is summed up in the package docstring; the
launch (command line, install, CPU recipe) is in ``unillm_llamacpp.launch``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from unillm.adapter import (
    LAYOUT_FEATURES,
    NATIVE,
    PRIORITY_ALTERNATIVE,
    SHAPE_ERRORS,
    Capabilities,
    Choice,
    Constraint,
    CpuRecipe,
    Feature,
    Grammar,
    InvalidOptions,
    InvalidRequest,
    JsonSchema,
    LaunchCommand,
    LaunchSpec,
    MalformedResponse,
    OpenAICompatAdapter,
    Regex,
    Request,
    Support,
    TokenizeRequest,
    Tokens,
    UnillmError,
    UnknownLora,
    UnsupportedFeature,
    discovered,
    error_for_status,
    error_message,
    malformed,
    model_cards,
    sampling_fields,
    unsupported,
)
from unillm.adapter.base import EngineInfo, EngineInstall, HttpCall
from unillm_llamacpp import launch
from unillm_llamacpp.launch import HEALTH_PATH, NO_SPEC, ONE_DEVICE

__all__ = ["LlamaCppAdapter", "LlamaCppInfo"]

# FastAPI's request-validation errors, which llama-cpp-python's error handler answers with 500.
_VALIDATION_MARKERS = ("validation error", "'loc': ('body'", '"loc": ["body"', "not found in tools")
_GBNF_ONLY = "Pass a GBNF grammar: unillm.Grammar('root ::= ...')"


def _string_contents(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``messages`` with each assistant message's null content sent as ``""``: llama-cpp-python's
    request model takes an assistant ``content`` as a string only, and answers a tool-call message
    with ``"content": null`` (``r.message()``'s, as OpenAI's API sends it) with a validation 500.

    Args:
        messages: The request body's chat messages.

    Returns:
        New messages where one changed (the others as they were).
    """
    return [
        {**m, "content": ""} if m.get("role") == "assistant" and m.get("content", "") is None else m
        for m in messages
    ]


@dataclass(frozen=True, slots=True)
class LlamaCppInfo(EngineInfo):
    """Discovery facts, plus every model name the server answers to (base model and LoRAs)."""

    aliases: tuple[str, ...] = ()


#: What llama-cpp-python's server does itself.
_NATIVE_FEATURES = (
    Feature.COMPLETION,
    Feature.CHAT,
    Feature.STREAM,
    Feature.GRAMMAR,
    Feature.LORA,
    Feature.TOP_K,
    Feature.MIN_P,
    Feature.REPETITION_PENALTY,
    Feature.PRESENCE_PENALTY,
    Feature.FREQUENCY_PENALTY,
    Feature.SEED,
    Feature.STOP,
    Feature.LOGPROBS,
    Feature.SPEC_NGRAM,
    Feature.TOKENIZE,
)


class LlamaCppAdapter(OpenAICompatAdapter):
    """llama-cpp-python's server: ``unillm.launch("llamacpp", model=...)`` or ``connect``.

    ``unillm.launch`` binds the launched LoRA names; after ``connect`` they are read from
    ``/v1/models`` (every served name but the model's own).
    """

    name = "llamacpp"
    display_name = "llama.cpp"
    engine_module = "llama_cpp"
    #: True: with ``thinking=True`` unillm sends a constraint as one GBNF grammar whose root is an
    #: optional thought, then the answer (``after_thought``): the constraint binds the answer only.
    #: ``thinking=True`` sends nothing else (llama-cpp-python takes no per-request template
    #: arguments: the template thinks as it does by default); ``thinking=False`` is refused.
    constrains_after_thinking = True

    def __init__(self, *, loras: Mapping[str, str] | None = None) -> None:
        self.loras = dict(loras or {})

    def bind(self, spec: LaunchSpec) -> LlamaCppAdapter:
        """This adapter, knowing the LoRA names the server was launched with."""
        return LlamaCppAdapter(loras=spec.lora)

    # -- capabilities ----------------------------------------------------------------------
    def capabilities(self, version: str | None = None) -> Capabilities:
        features: dict[Feature, Support] = dict.fromkeys(_NATIVE_FEATURES, NATIVE)
        features[Feature.JSON_SCHEMA] = Support(
            why="with chat messages (response_format, converted to GBNF by the server); bounded "
            "integers are sent as enums; a prompt with a schema, and keywords the server's "
            "converter ignores (number bounds, uniqueItems, not, ...), are refused; with "
            "thinking=True unillm converts the schema itself (outlines-core's regex, then GBNF) and sends a "
            "grammar with room for the thought"
        )
        features[Feature.REGEX] = Support(
            why="unillm translates the regex to GBNF; lookarounds, backreferences and word "
            "boundaries are refused"
        )
        features[Feature.CHOICE] = Support(why="unillm sends the options as a GBNF alternation")
        features[Feature.GRAMMAR_LARK] = unsupported("llama.cpp reads GBNF grammars only", _GBNF_ONLY)
        features[Feature.LORA_RUNTIME] = unsupported(
            "llama-cpp-python loads LoRA adapters with the model, at launch",
            "Pass lora={name: path} to unillm.launch (each is served under its name)",
        )
        features[Feature.N] = unsupported("llama-cpp-python's server ignores n", "Send n requests")
        features[Feature.STREAM_USAGE] = unsupported(
            "llama-cpp-python's server has no stream_options: its streams carry no token counts",
            "Use generate() (its answer counts tokens), or count the streamed text with llm.tokenize(...)",
        )
        features[Feature.PRIORITY] = unsupported(
            "llama-cpp-python's server has no request priority", PRIORITY_ALTERNATIVE
        )
        forced = Support(level="emulated", why="unillm forces the call with a JSON-schema constraint")
        features[Feature.TOOLS] = features[Feature.TOOL_CHOICE_REQUIRED] = forced
        features[Feature.TOOL_CHOICE_NAMED] = forced
        features[Feature.TOOL_CHOICE_AUTO] = unsupported(
            "llama-cpp-python's generic chat handler does not read calls out of free text",
            "Pass tool_choice='required' or a tool's name (forced by unillm)",
        )
        features[Feature.IMAGES] = unsupported(
            "unillm launches text models only (llama-cpp-python needs a CLIP model and chat format)",
            "Use vLLM or SGLang with a vision-language model",
        )
        features[Feature.EMBEDDINGS] = unsupported(
            "a generating llama-cpp-python server does not embed",
            'Serve an embedding model with unillm.launch("vllm", ..., task="embed")',
        )
        for f in (Feature.SPEC_DRAFT, Feature.SPEC_EAGLE, Feature.SPEC_MTP):
            features[f] = NO_SPEC
        features.update(dict.fromkeys(LAYOUT_FEATURES, ONE_DEVICE))
        return Capabilities(engine=self.name, version=version, features=features)

    # -- discovery -------------------------------------------------------------------------
    def discovery(self) -> Mapping[str, HttpCall]:
        return {"models": HttpCall("GET", "/v1/models"), "openapi": HttpCall("GET", HEALTH_PATH)}

    def parse_info(self, answers: Mapping[str, Any], model: str | None) -> LlamaCppInfo:
        aliases = tuple(str(m["id"]) for m in model_cards(answers, self.name))
        if model is None:
            if not aliases:
                raise MalformedResponse(
                    "llamacpp: /v1/models lists no model; is this a llama-cpp-python server?"
                )
            model = aliases[0]  # the default model comes first
        info = discovered(answers, "openapi", self.name, HEALTH_PATH).get("info")
        version = info.get("version") if isinstance(info, Mapping) else None
        return LlamaCppInfo(
            engine=self.name, model=model, version=str(version) if version else None, aliases=aliases
        )

    def health_path(self) -> str:
        return HEALTH_PATH

    # -- requests --------------------------------------------------------------------------
    def model_field(self, request: Request, info: EngineInfo) -> str:
        """The served name: the model, or a LoRA's name (refused unless the server serves it)."""
        if request.lora is None:
            return info.model
        served = set(getattr(info, "aliases", ())) or set(self.loras)
        if request.lora not in served or request.lora == info.model:
            known = ", ".join(sorted(served - {info.model})) or "none"
            raise UnknownLora(
                f"llamacpp: no LoRA adapter named {request.lora!r} (served: {known}). "
                "llama-cpp-python would answer with its default model; name adapters at launch "
                "with lora={name: path}",
                engine=self.name,
                status=None,
                engine_message="",
            )
        return request.lora

    def extra_sampling(self, request: Request) -> dict[str, Any]:
        """top_k and min_p as they are; repetition_penalty under llama.cpp's name."""
        fields = sampling_fields(request, ("top_k", "min_p"))
        if request.repetition_penalty is not None:
            fields["repeat_penalty"] = request.repetition_penalty
        return fields

    def constraint_fields(self, output: Constraint, info: EngineInfo) -> dict[str, Any]:
        from unillm_llamacpp.grammar import (
            GrammarError,
            RegexNotExpressible,
            check_gbnf,
            choice_gbnf,
            regex_gbnf,
        )

        if isinstance(output, JsonSchema):
            from unillm_llamacpp.schema import SchemaNotEnforced, server_schema

            try:
                schema = server_schema(dict(output.schema))
            except SchemaNotEnforced as e:
                raise UnsupportedFeature(
                    self.name,
                    Feature.JSON_SCHEMA.value,
                    version=info.version,
                    why=str(e),
                    alternative="Drop that keyword (unillm still validates the answer against your "
                    "schema), or pass a GBNF unillm.Grammar",
                ) from None
            return {"response_format": {"type": "json_object", "schema": schema}}
        if isinstance(output, Regex):
            try:
                return {"grammar": regex_gbnf(output.pattern)}
            except RegexNotExpressible as e:
                raise UnsupportedFeature(
                    self.name,
                    Feature.REGEX.value,
                    version=info.version,
                    why=f"{output.pattern!r}: {e}",
                    alternative=_GBNF_ONLY,
                ) from None
        if isinstance(output, Choice):
            return {"grammar": choice_gbnf(output.options)}
        assert isinstance(output, Grammar)
        try:
            check_gbnf(output.text)
        except GrammarError as e:
            raise InvalidOptions(
                f"llamacpp: {e}. Nothing was sent (llama.cpp's server crashes on a grammar it cannot parse)"
            ) from None
        return {"grammar": output.text}

    def forces_by_constraint(self, request: Request, info: EngineInfo) -> bool:
        choice = request.tool_choice
        return choice is not None and choice.forces_call

    def build(self, request: Request, info: EngineInfo) -> HttpCall:
        if isinstance(request.output, JsonSchema) and request.messages is None:
            raise UnsupportedFeature(
                self.name,
                f"{Feature.JSON_SCHEMA.value} with a prompt",
                version=info.version,
                why="llama-cpp-python applies JSON schemas only to chat (response_format); its "
                "completions API has no schema field",
                alternative="Send messages=[...] instead of a prompt, or pass a GBNF unillm.Grammar",
            )
        thinks = request.thinking is True  # no field for it: only the constraint changes
        call = super().build(replace(request, thinking=None) if thinks else request, info)
        body = dict(call.json or {})
        body.pop("stream_options", None)  # not a field of its request models
        if "messages" in body:
            body["messages"] = _string_contents(body["messages"])
        if request.logprobs and request.messages is not None:
            body.setdefault("top_logprobs", 0)  # chat logprobs are computed only with top_logprobs set
        if thinks:
            self._constrain_after_thought(body, request, info)
        return HttpCall(call.method, call.path, body, call.stream)

    def _constrain_after_thought(self, body: dict[str, Any], request: Request, info: EngineInfo) -> None:
        """Rewrite ``body``'s constraint (a GBNF ``grammar``, or a ``response_format`` schema
        converted here: outlines-core's regex, then GBNF) as one grammar that lets the model think
        first (in place); refused before sending where the grammar cannot be built."""
        from unillm_llamacpp.after_thought import SchemaNotConverted, after_thought, schema_gbnf
        from unillm_llamacpp.grammar import GrammarError

        if request.output is None and not self.forces_by_constraint(request, info):
            return
        response_format = body.pop("response_format", None)
        try:
            answer = schema_gbnf(response_format["schema"]) if response_format else body["grammar"]
            body["grammar"] = after_thought(answer)
        except (SchemaNotConverted, GrammarError) as e:
            raise UnsupportedFeature(
                self.name,
                "thinking=True with " + ("output=" if request.output is not None else "a forced tool call"),
                version=info.version,
                why=f"the constraint cannot be sent as a GBNF grammar after a thought: {e}",
                alternative="Drop thinking=True (the server then converts a schema itself, and the "
                "constraint binds from the first token), or pass a GBNF unillm.Grammar",
            ) from None

    def parse_error(
        self, status: int, body: bytes, request: Request | None, info: EngineInfo | None
    ) -> UnillmError:
        message = error_message(body)
        if status == 500 and any(m in message for m in _VALIDATION_MARKERS):
            return InvalidRequest(
                f"{self.name} answered {status} (a rejected request): {message}",
                engine=self.name,
                status=status,
                engine_message=message,
            )
        return error_for_status(self.name, status, message, request)

    # -- tokenize --------------------------------------------------------------------------
    def tokenize_call(self, request: TokenizeRequest, info: EngineInfo) -> HttpCall:
        if request.messages is not None:
            raise UnsupportedFeature(
                self.name,
                "tokenize(messages=...)",
                version=info.version,
                why="llama-cpp-python's /extras/tokenize takes text only",
                alternative="Tokenize the rendered prompt text",
            )
        return HttpCall("POST", "/extras/tokenize", {"model": info.model, "input": request.text})

    def parse_tokens(self, body: Any, request: TokenizeRequest, info: EngineInfo) -> Tokens:
        try:
            return Tokens(
                ids=body["tokens"], max_model_len=info.max_model_len, engine=self.name, model=info.model
            )
        except SHAPE_ERRORS as e:
            raise malformed(self.name, "tokenize body", e) from e

    # -- launch (unillm_llamacpp.launch) -------------------------------------------------
    def install(self, *, gpu: bool) -> EngineInstall:
        return launch.install(gpu=gpu)

    def command(self, spec: LaunchSpec) -> LaunchCommand:
        return launch.command(spec)

    def cpu_recipe(self, spec: LaunchSpec, workdir: Path) -> CpuRecipe:
        return launch.cpu_recipe(spec, workdir)
