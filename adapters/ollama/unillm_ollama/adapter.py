"""The Ollama adapter: unified requests to Ollama's native API, and ``ollama serve`` launches.

llm = unillm.connect("ollama", "http://127.0.0.1:11434", model="llama3.2:1b")
async with unillm.launch("ollama", model="llama3.2:1b") as llm: ...
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from unillm.adapter import (
    NATIVE,
    PRIORITY_ALTERNATIVE,
    SHAPE_ERRORS,
    Capabilities,
    Completion,
    EmbedBatch,
    EmbedRequest,
    Feature,
    LaunchCommand,
    LaunchSpec,
    MetricNames,
    Request,
    Support,
    UnillmError,
    UnknownModel,
    UnsupportedFeature,
    Version,
    at_least,
    error_for_status,
    error_message,
    malformed,
    parse_version,
    replayed,
    since,
    text_field,
    unsupported,
)
from unillm.adapter.base import Adapter, EngineInfo, EngineInstall, HttpCall
from unillm_ollama import launch
from unillm_ollama import requests as wire
from unillm_ollama.responses import NDJSONDecoder, parse_answer

ENGINE = "ollama"
NO_GRAMMAR = "Ollama constrains output to JSON schemas only (format=)"
GRAMMAR_ALT = "Use output=<JSON schema>, or an engine with grammars (vLLM, SGLang, llama.cpp)"
NO_SPEC = "Ollama's server has no speculative decoding setting"
SPEC_ALT = "Use vLLM, SGLang or TensorRT-LLM for speculative decoding"
ONE_MACHINE = "Ollama places a model on the GPUs it finds by itself; it has no parallel layouts"


def _since(v: Version | None, minimum: Version, why: str = "") -> Support:
    return since(v, minimum, "Ollama", why)


_TOOL_CHOICE = Support(
    level="emulated", why="Ollama has no tool choice: unillm sends the call's JSON schema as format"
)

#: The features whose support does not depend on Ollama's version (the others: ``capabilities``).
_FIXED_FEATURES: dict[Feature, Support] = {
    Feature.COMPLETION: Support(why="/api/generate with raw=true: the prompt is continued as is"),
    Feature.CHAT: NATIVE,
    Feature.STREAM: Support(why="newline-delimited JSON (application/x-ndjson)"),
    Feature.STREAM_USAGE: Support(why="the last line counts the tokens (prompt_eval_count, eval_count)"),
    Feature.REGEX: unsupported(NO_GRAMMAR, GRAMMAR_ALT),
    Feature.CHOICE: unsupported(NO_GRAMMAR, "Use a JSON schema with an enum, or vLLM, SGLang, TGI"),
    Feature.GRAMMAR: unsupported(NO_GRAMMAR, GRAMMAR_ALT),
    Feature.GRAMMAR_LARK: unsupported(NO_GRAMMAR, GRAMMAR_ALT),
    Feature.LORA: Support(
        why="a LoRA is a model of its own in Ollama (ollama create with ADAPTER); lora= names it"
    ),
    Feature.LORA_RUNTIME: unsupported(
        "Ollama cannot load LoRA adapters into a running model", launch.LORA_ALTERNATIVE
    ),
    Feature.N: unsupported(
        "Ollama answers one choice per request", "Send n requests (e.g. with asyncio.gather)"
    ),
    Feature.TOP_K: NATIVE,
    Feature.MIN_P: NATIVE,
    Feature.REPETITION_PENALTY: Support(why="options.repeat_penalty"),
    Feature.PRESENCE_PENALTY: NATIVE,
    Feature.FREQUENCY_PENALTY: NATIVE,
    Feature.SEED: NATIVE,
    Feature.STOP: NATIVE,
    Feature.PRIORITY: unsupported(
        "Ollama serves requests in arrival order (no request priority)", PRIORITY_ALTERNATIVE
    ),
    Feature.SPEC_NGRAM: unsupported(NO_SPEC, SPEC_ALT),
    Feature.SPEC_DRAFT: unsupported(NO_SPEC, SPEC_ALT),
    Feature.SPEC_EAGLE: unsupported(NO_SPEC, SPEC_ALT),
    Feature.SPEC_MTP: unsupported(NO_SPEC, SPEC_ALT),
    Feature.TENSOR_PARALLEL: unsupported(ONE_MACHINE, "Leave parallel unset, or use vLLM or SGLang"),
    Feature.PIPELINE_PARALLEL: unsupported(ONE_MACHINE, "Leave parallel unset, or use vLLM or SGLang"),
    Feature.DATA_PARALLEL: unsupported(
        "one Ollama serves one replica of a model", "Launch one Ollama per replica behind a router"
    ),
    Feature.EXPERT_PARALLEL: unsupported(ONE_MACHINE, "Use vLLM or SGLang"),
    Feature.MULTI_NODE: unsupported(
        "Ollama runs on one machine", "Use vLLM or SGLang for multi-node serving"
    ),
    Feature.PD_DISAGGREGATION: unsupported(
        "Ollama has no prefill/decode disaggregation", "Use vLLM or SGLang with unillm.Disaggregation(...)"
    ),
    Feature.TOOL_CHOICE_REQUIRED: _TOOL_CHOICE,
    Feature.TOOL_CHOICE_NAMED: _TOOL_CHOICE,
    Feature.IMAGES: Support(why="chat messages to vision models; images inline (data URLs), not by URL"),
    Feature.TOKENIZE: unsupported(
        "Ollama has no tokenize endpoint", "Use the model's tokenizer (e.g. Hugging Face tokenizers) locally"
    ),
}


class OllamaAdapter(Adapter):
    """Talk to or start Ollama: ``unillm.connect("ollama", "http://host:11434", model="llama3.2")``.

    Prompts go to ``/api/generate`` with ``raw: true`` (the prompt is continued as is, like every
    engine's completion API), chat messages to ``/api/chat``; sampling options go under
    ``options`` with Ollama's names (``max_tokens`` -> ``num_predict``, ``repetition_penalty`` ->
    ``repeat_penalty``), a JSON schema is ``format``, images travel as base64 on the message,
    ``thinking=`` / ``reasoning_effort=`` are ``think`` (the thought is read into ``r.reasoning``),
    a tool's parameters carry only what Ollama's tool types keep (a keyword they would drop is
    refused), and ``extra_body`` reaches the body as is (``{"keep_alive": "10m"}``). A
    forced tool call (``required`` or a name) is sent as the call's JSON schema in ``format``,
    since Ollama's ``/api/chat`` has no tool choice. Refused before sending: regular expressions,
    choices, grammars, ``n > 1``, ``thinking_budget``, ``top_logprobs`` above 20, runtime LoRA
    loading, and speculative decoding at launch. A
    LoRA is a model of its own in Ollama (``ollama create`` with ``ADAPTER``): ``lora=`` names it.

    Launch: ``ollama serve`` (the binary the user installs; ``binary=`` gives another path), then
    the model is pulled with progress, and the launch is ready when it answers a first request.
    """

    name = "ollama"
    display_name = "Ollama"
    engine_module = None  # a Go program, not a Python module

    def __init__(self, *, binary: str = launch.BINARY) -> None:
        self.binary = binary
        self.model: str | None = None  # the launched model, the default of requests (bind)

    def bind(self, spec: LaunchSpec) -> OllamaAdapter:
        """A copy whose requests default to the model ``spec`` pulled (Ollama serves many at once)."""
        bound = copy.copy(self)
        bound.model = spec.served_name or spec.model
        return bound

    def __repr__(self) -> str:
        return f"OllamaAdapter(binary={self.binary!r})"

    # -- capabilities ----------------------------------------------------------------------
    #: an earlier thought in a message, handed to the model's template (``.Thinking``)
    reasoning_message_field = "thinking"

    def replay_field(self, info: EngineInfo) -> str | None:
        """``thinking`` from Ollama 0.9 on (its thinking support); None before.

        Args:
            info: What discovery learnt about the engine (model, version, limits).
        """
        return self.reasoning_message_field if at_least(parse_version(info.version), (0, 9, 0)) else None

    def capabilities(self, version: str | None = None) -> Capabilities:
        v = parse_version(version)
        features: dict[Feature, Support] = {
            **_FIXED_FEATURES,
            Feature.JSON_SCHEMA: _since(v, (0, 5, 0), "format=<schema>"),
            Feature.LOGPROBS: _since(v, (0, 12, 11)),
            Feature.TOOLS: _since(v, (0, 3, 0), "chat messages only (/api/chat)"),
            Feature.TOOL_CHOICE_AUTO: _since(v, (0, 3, 0)),
            Feature.EMBEDDINGS: _since(v, (0, 3, 0), "/api/embed"),
        }
        if v is not None and v < (0, 5, 0):
            features[Feature.TOOL_CHOICE_REQUIRED] = features[Feature.TOOL_CHOICE_NAMED] = features[
                Feature.JSON_SCHEMA
            ]
        return Capabilities(engine=self.name, version=version, features=features)

    def metric_names(self, version: str | None) -> MetricNames:
        """Ollama serves no metrics endpoint: ``llm.metrics()`` refuses before sending."""
        raise UnsupportedFeature(
            self.name,
            "metrics()",
            why="Ollama has no metrics endpoint",
            alternative="Use the client-side timings (completion.timings) or unillm's observe hooks",
        )

    # -- discovery -------------------------------------------------------------------------
    def discovery(self) -> Mapping[str, HttpCall]:
        return {"version": HttpCall("GET", "/api/version"), "tags": HttpCall("GET", "/api/tags")}

    def parse_info(self, answers: Mapping[str, Any], model: str | None) -> EngineInfo:
        version = answers.get("version")
        tags = answers.get("tags")
        names = [
            str(m.get("name") or m.get("model"))
            for m in (tags or {}).get("models") or ()
            if isinstance(m, Mapping)
        ]
        chosen = model or self.model or (names[0] if names else None)
        if chosen is None:
            raise UnknownModel(
                "ollama: this server has no model yet (GET /api/tags lists none). Pull one "
                "(`ollama pull llama3.2:1b`) or launch with unillm.launch('ollama', model=...)",
                engine=self.name,
            )
        return EngineInfo(
            engine=self.name,
            model=chosen,
            version=text_field(version, "version", self.name, "/api/version")
            if isinstance(version, Mapping)
            else None,
        )

    # -- requests --------------------------------------------------------------------------
    def build(self, request: Request, info: EngineInfo) -> HttpCall:
        return wire.build_call(
            replayed(request, self.replay_field(info), self.name, info.version), info.model
        )

    def parse(
        self, body: Any, request: Request, info: EngineInfo, call: HttpCall | None = None
    ) -> Completion[Any]:
        path = call.path if call is not None else wire.route(request)
        try:
            return parse_answer(body, request, info.model, info.version, chat=path == wire.CHAT)
        except UnillmError:
            raise
        except SHAPE_ERRORS as e:
            raise malformed(self.name, "answer body", e) from e

    def decoder(self, request: Request, info: EngineInfo, call: HttpCall | None = None) -> NDJSONDecoder:
        path = call.path if call is not None else wire.route(request)
        return NDJSONDecoder(request, chat=path == wire.CHAT)

    def parse_error(
        self, status: int, body: bytes, request: Request | None, info: EngineInfo | None
    ) -> UnillmError:
        return error_for_status(self.name, status, error_message(body) if body.strip() else "", request)

    def embed_call(self, request: EmbedRequest, info: EngineInfo) -> HttpCall:
        return HttpCall(
            "POST", wire.EMBED, wire.embed_body(list(request.texts), info.model, request.dimensions)
        )

    def parse_embeddings(self, body: Any, request: EmbedRequest, info: EngineInfo) -> EmbedBatch:
        vectors = [[float(x) for x in v] for v in body["embeddings"]]
        return EmbedBatch(vectors=vectors, prompt_tokens=int(body.get("prompt_eval_count") or 0))

    # -- launch ----------------------------------------------------------------------------
    def health_path(self) -> str:
        return launch.HEALTH_PATH

    def command(self, spec: LaunchSpec) -> LaunchCommand:
        return launch.command(spec, self.binary)

    def install(self, *, gpu: bool) -> EngineInstall:
        raise UnsupportedFeature(
            self.name,
            "unillm setup",
            why="Ollama is a program of its own, not a pip package",
            alternative=launch.INSTALL,
        )
