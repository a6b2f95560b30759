"""The TGI adapter: unified requests to Hugging Face TGI, and TGI launch commands.

llm = unillm.connect("tgi", "http://127.0.0.1:8080")
async with unillm.launch("tgi", model="Qwen/Qwen2.5-0.5B-Instruct") as llm: ...
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any, Literal

from unillm.adapter import (
    NATIVE,
    PRIORITY_ALTERNATIVE,
    SHAPE_ERRORS,
    Capabilities,
    Completion,
    Feature,
    InvalidRequest,
    LaunchCommand,
    LaunchSpec,
    MalformedResponse,
    MetricNames,
    Request,
    Support,
    TokenizeRequest,
    Tokens,
    UnillmError,
    UnknownLora,
    UnsupportedFeature,
    Usage,
    Version,
    malformed,
    parse_version,
    replay_messages,
    replayed,
    since,
    text_field,
    thinking_fields,
    unsupported,
)
from unillm.adapter.base import Adapter, EngineInfo, EngineInstall, HttpCall
from unillm_tgi import requests as wire
from unillm_tgi.errors import http_error
from unillm_tgi.launch import (
    EMBED_ALTERNATIVE,
    IMAGE,
    Runtime,
    RuntimeName,
    command,
    detect_runtime,
    hub_cache,
)
from unillm_tgi.requests import TGIInfo
from unillm_tgi.responses import GenerateStreamDecoder, OpenAIRouteDecoder, parse_generate, parse_openai

ENGINE = "tgi"


def _since(v: Version | None, minimum: Version, why: str = "") -> Support:
    return since(v, minimum, "TGI", why)


_NO_GRAMMAR = "TGI has no context-free grammars (only JSON schemas and regular expressions)"
_GRAMMAR_ALT = "Use output=unillm.Regex(...) or a JSON schema, or an engine with grammars (vLLM, SGLang)"
_CHAT_ONLY = "prompts only (/generate); refused with chat messages"
_SPEC_ALT = "Use Speculative(method='ngram') or a Medusa model"

#: The features whose support does not depend on TGI's version (the others: ``capabilities``).
_FIXED_FEATURES: dict[Feature, Support] = {
    Feature.COMPLETION: NATIVE,
    Feature.STREAM: NATIVE,
    Feature.STREAM_USAGE: NATIVE,
    Feature.GRAMMAR: unsupported(_NO_GRAMMAR, _GRAMMAR_ALT),
    Feature.GRAMMAR_LARK: unsupported(_NO_GRAMMAR, _GRAMMAR_ALT),
    Feature.LORA_RUNTIME: unsupported(
        "TGI loads LoRA adapters only at launch (--lora-adapters)", "Launch it with lora={name: path}"
    ),
    Feature.N: Support(why="prompts only, not streamed, without seed: TGI's best_of (n <= --max-best-of)"),
    Feature.LOGPROBS: NATIVE,
    Feature.TOP_K: Support(why=_CHAT_ONLY),
    Feature.MIN_P: unsupported("TGI has no min_p", "Use top_p or top_k"),
    Feature.REPETITION_PENALTY: Support(why=_CHAT_ONLY),
    Feature.PRESENCE_PENALTY: unsupported(
        "TGI has no presence penalty (its chat API turns presence_penalty p into repetition_penalty p + 2)",
        "Use frequency_penalty or repetition_penalty",
    ),
    Feature.SEED: NATIVE,
    Feature.STOP: NATIVE,
    Feature.PRIORITY: unsupported("TGI has no request priority", PRIORITY_ALTERNATIVE),
    Feature.SPEC_NGRAM: Support(why="--speculate N; Medusa heads of a model are used automatically"),
    Feature.SPEC_DRAFT: unsupported("TGI has no draft-model speculation", _SPEC_ALT),
    Feature.SPEC_EAGLE: unsupported("TGI has no EAGLE speculation", _SPEC_ALT),
    Feature.SPEC_MTP: unsupported("TGI has no MTP speculation", _SPEC_ALT),
    Feature.TENSOR_PARALLEL: Support(why="--num-shard"),
    Feature.PIPELINE_PARALLEL: unsupported("TGI only shards tensors", "Use Parallel(tensor=N)"),
    Feature.DATA_PARALLEL: unsupported(
        "one TGI serves one replica", "Launch one TGI per replica behind a router"
    ),
    Feature.EXPERT_PARALLEL: unsupported("TGI has no expert parallelism", "Use Parallel(tensor=N)"),
    Feature.MULTI_NODE: unsupported(
        "TGI shards a model over the GPUs of one machine only", "Use vLLM or SGLang for multi-node serving"
    ),
    Feature.PD_DISAGGREGATION: unsupported(
        "TGI has no prefill/decode disaggregation", "Use vLLM or SGLang with unillm.Disaggregation(...)"
    ),
    Feature.IMAGES: Support(why="chat messages to vision-language models only"),
    Feature.EMBEDDINGS: unsupported(
        "TGI serves generative models only; embeddings are a separate server, "
        "Text Embeddings Inference (TEI)",
        EMBED_ALTERNATIVE,
    ),
    Feature.TOKENIZE: Support(why="texts through /tokenize, messages through /chat_tokenize"),
}


class TGIAdapter(Adapter):
    """Talk to or start Hugging Face TGI: ``unillm.connect("tgi", "http://host:8080")``.

    Per request the API that honours every option is chosen (see ``unillm_tgi.requests``):
    prompts go to ``/generate`` / ``/generate_stream`` (grammar, ``adapter_id``, ``top_k``,
    logprobs, ``best_of`` for ``n``), chat messages to ``/v1/chat/completions`` (constraints in
    ``response_format``, LoRA in ``model``). Choice becomes an escaped regex alternation; JSON
    schemas get their local ``$ref`` inlined (recursive ones are refused). Refused before
    sending: grammars (EBNF/Lark), runtime LoRA loading, ``min_p``, ``presence_penalty`` (TGI's
    chat API would turn it into ``repetition_penalty = p + 2``), and ``top_k`` /
    ``repetition_penalty`` / ``n > 1`` with chat messages, and (when unillm launched TGI) a
    LoRA name it was not launched with, which TGI would silently serve with the base model.
    Prompts whose UTF-8 size may
    exceed ``/info``'s limits are counted with ``/tokenize`` first and refused if too long.
    Answers drop the stop string TGI leaves at the end, and its finish reasons become
    ``stop`` / ``length``.

    Launch form: ``runtime="auto"`` picks ``$UNILLM_TGI_RUNTIME``, else the launcher on PATH,
    else docker, else podman (one PATH look-up, here); pass ``runtime="docker"`` to pin it::

        unillm.Launch(TGIAdapter(runtime="podman"), unillm.LaunchSpec(model="..."))
    """

    name = "tgi"
    display_name = "TGI"
    engine_module = None  # a Rust launcher, not a Python module

    def __init__(
        self,
        *,
        runtime: RuntimeName | Literal["auto"] = "auto",
        image: str = IMAGE,
        cache_dir: str | None = None,
        gpus: str | None = "all",
        shm_size: str = "1g",
    ) -> None:
        name: RuntimeName = detect_runtime() if runtime == "auto" else runtime
        self.runtime = Runtime(
            name=name, image=image, cache_dir=cache_dir or hub_cache(), gpus=gpus, shm_size=shm_size
        )
        self.loras: frozenset[str] | None = None  # known only for a TGI unillm launched (bind)

    def bind(self, spec: LaunchSpec) -> TGIAdapter:
        """A copy that knows the LoRA adapters ``spec`` launched, so it can refuse other names.

        TGI answers an ``adapter_id`` it has not loaded with the base model and no error; a
        bound adapter refuses such a name before sending (a connected one cannot know).
        """
        bound = copy.copy(self)
        bound.loras = frozenset(spec.lora)
        return bound

    def __repr__(self) -> str:
        return f"TGIAdapter(runtime={self.runtime.name!r})"

    # -- capabilities ----------------------------------------------------------------------
    def capabilities(self, version: str | None = None) -> Capabilities:
        v = parse_version(version)
        features: dict[Feature, Support] = {
            Feature.CHAT: _since(v, (1, 4, 0)),
            Feature.JSON_SCHEMA: _since(v, (1, 4, 1), "local $ref inlined; recursive schemas refused"),
            Feature.REGEX: _since(v, (1, 4, 1)),
            Feature.CHOICE: _since(v, (1, 4, 1), "as an escaped regex alternation"),
            Feature.LORA: _since(
                v,
                (2, 1, 0),
                "adapters given at launch; TGI answers an unknown "
                "adapter id with the base model, so unknown names "
                "are refused when unillm launched it",
            ),
            Feature.FREQUENCY_PENALTY: _since(v, (1, 4, 0)),
            Feature.TOOLS: _since(
                v, (2, 0, 0), "chat messages; TGI constrains calls with its grammar (local $ref inlined)"
            ),
            Feature.TOOL_CHOICE_AUTO: _since(
                v, (2, 0, 0), "grammar-based: TGI adds a no-tool option the model may pick"
            ),
            Feature.TOOL_CHOICE_NAMED: _since(v, (2, 0, 0)),
            Feature.TOOL_CHOICE_REQUIRED: _since(v, (3, 0, 0)),
        }
        return Capabilities(engine=self.name, version=version, features={**_FIXED_FEATURES, **features})

    # -- metrics ---------------------------------------------------------------------------
    def metric_names(self, version: str | None) -> MetricNames:
        """TGI's documented names (docs/source/reference/metrics.md, TGI 3.x).

        TGI measures no time to first token nor per-token gaps (use the client timings);
        ``tgi_request_mean_time_per_token_duration`` is its per-request TPOT. Token totals are
        the sums of its per-request histograms; ``tgi_request_skipped_tokens`` counts the
        tokens speculation produced, with no count of proposals, so no acceptance rate.
        """
        return MetricNames(
            tpot="tgi_request_mean_time_per_token_duration",
            e2e="tgi_request_duration",
            queue="tgi_request_queue_duration",
            running="tgi_batch_current_size",
            waiting="tgi_queue_size",
            spec_accepted_tokens="tgi_request_skipped_tokens_sum",
            prompt_tokens="tgi_request_input_length_sum",
            generation_tokens="tgi_request_generated_tokens_sum",
        )

    # -- discovery -------------------------------------------------------------------------
    def discovery(self) -> Mapping[str, HttpCall]:
        return {"info": HttpCall("GET", "/info")}

    def parse_info(self, answers: Mapping[str, Any], model: str | None) -> EngineInfo:
        info = answers.get("info")
        if not isinstance(info, Mapping) or not isinstance(info.get("model_id"), str):
            raise MalformedResponse(
                "tgi: GET /info did not answer with TGI's Info (model_id, "
                "version, limits); is this a TGI server?"
            )

        def number(*keys: str) -> int | None:
            value = next((info[k] for k in keys if isinstance(info.get(k), int)), None)
            return int(value) if value is not None else None

        return TGIInfo(
            engine=self.name,
            model=model or info["model_id"],
            version=text_field(info, "version", self.name, "/info"),
            max_model_len=number("max_total_tokens"),
            model_id=info["model_id"],
            max_input_tokens=number("max_input_tokens", "max_input_length"),
            max_best_of=number("max_best_of"),
            max_stop_sequences=number("max_stop_sequences"),
            max_client_batch_size=number("max_client_batch_size"),
        )

    # -- requests --------------------------------------------------------------------------
    def build(self, request: Request, info: EngineInfo) -> HttpCall:
        if request.lora is not None and self.loras is not None and request.lora not in self.loras:
            launched = ", ".join(sorted(self.loras)) or "none"
            raise UnknownLora(
                f"tgi: LoRA adapter {request.lora!r} was not given at launch (launched: {launched}); "
                "TGI would silently answer with the base model. Use one of those names, or relaunch "
                "with lora={name: path}",
                engine=self.name,
            )
        thinking_fields(request, self.name, ())  # TGI reads none of the thinking options: refused
        return wire.build_call(replayed(request, self.replay_field(info), self.name, info.version), info)

    def preflight(self, request: Request, info: EngineInfo) -> HttpCall | None:
        return wire.preflight_call(request, info)

    def check_preflight(self, answer: Any, request: Request, info: EngineInfo) -> None:
        count = wire.prompt_tokens(answer)
        if count is None or not isinstance(info, TGIInfo):
            return  # no tokenizer on the server: TGI itself still validates the length
        limit, total = info.max_input_tokens, info.max_model_len
        if limit is not None and count > limit:
            raise InvalidRequest(
                f"tgi: the prompt is {count} tokens; this server accepts at most {limit} "
                "(its --max-input-tokens). Shorten the prompt, or relaunch TGI with a larger "
                "max_model_len",
                engine=self.name,
            )
        if request.max_tokens and total and count + min(request.max_tokens, wire.CHUNK) > total:
            raise InvalidRequest(
                f"tgi: the prompt ({count} tokens) plus max_tokens={request.max_tokens} do not fit "
                f"in this server's {total} tokens (its --max-total-tokens). Lower max_tokens or "
                "shorten the prompt",
                engine=self.name,
            )

    def tokenize_call(self, request: TokenizeRequest, info: EngineInfo) -> HttpCall:
        messages = request.messages
        if messages is not None:
            messages = tuple(
                replay_messages(
                    messages, request.replay_reasoning, None, engine=self.name, version=info.version
                )
            )
        return wire.tokenize_call(request.text, messages)

    def parse_tokens(self, body: Any, request: TokenizeRequest, info: EngineInfo) -> Tokens:
        ids = wire.token_ids(body)
        if ids is None:
            raise MalformedResponse(f"tgi: unexpected tokenize answer: {str(body)[:200]}")
        return Tokens(ids=ids, max_model_len=info.max_model_len, engine=self.name, model=info.model)

    # -- answers ---------------------------------------------------------------------------
    def parse(
        self, body: Any, request: Request, info: EngineInfo, call: HttpCall | None = None
    ) -> Completion[Any]:
        path = call.path if call is not None else wire.route(request, info)
        try:
            if path == wire.GENERATE:
                return parse_generate(body, request, info.model, info.version)
            return parse_openai(body, request, info.model, info.version)
        except UnillmError:
            raise
        except SHAPE_ERRORS as e:
            raise malformed(self.name, "answer body", e) from e

    def parse_headers(self, headers: Mapping[str, str], completion: Completion[Any]) -> Completion[Any]:
        """``/generate`` sends the prompt's token count only as the ``x-prompt-tokens`` header."""
        value = headers.get("x-prompt-tokens")
        if completion.usage.prompt_tokens == 0 and value and value.isdigit():
            completion.usage = Usage(
                prompt_tokens=int(value), completion_tokens=completion.usage.completion_tokens
            )
        return completion

    def decoder(
        self, request: Request, info: EngineInfo, call: HttpCall | None = None
    ) -> GenerateStreamDecoder | OpenAIRouteDecoder:
        path = call.path if call is not None else wire.route(request, info)
        if path == wire.GENERATE_STREAM:
            return GenerateStreamDecoder(request)
        return OpenAIRouteDecoder(request)

    def parse_error(
        self, status: int, body: bytes, request: Request | None, info: EngineInfo | None
    ) -> UnillmError:
        return http_error(status, body, request)

    # -- launch ----------------------------------------------------------------------------
    def command(self, spec: LaunchSpec) -> LaunchCommand:
        return command(spec, self.runtime)

    def install(self, *, gpu: bool) -> EngineInstall:
        raise UnsupportedFeature(
            self.name,
            "unillm setup",
            why="TGI is not a pip package (a Rust launcher plus a CUDA Python server)",
            alternative="Install docker or podman (unillm then runs TGI's official image), or "
            "build text-generation-launcher from source: "
            "https://github.com/huggingface/text-generation-inference",
        )
