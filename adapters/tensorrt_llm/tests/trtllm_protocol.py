"""TensorRT-LLM's serve protocol, written for the tests from its source: every body the adapter
sends is checked here, and what trtllm-serve would make of it (``to_sampling_params``).

Why written here: the ``tensorrt_llm`` wheel cannot be used. ``pip download tensorrt-llm``
(1.2.1 on PyPI) fails at metadata generation on a machine without ``nvidia-smi``, and
``tensorrt_llm/serve/openai_protocol.py`` imports ``torch``, ``xgrammar`` and the CUDA executor
at module level, so it cannot be imported without CUDA either.

Sources (github.com/NVIDIA/TensorRT-LLM), facts transcribed, not code:

* ``tensorrt_llm/serve/openai_protocol.py`` at commit 0076e9390e1ed11515f149eec356f5a03f4a00d8,
  read whole; modelled whole for the two generation routes unillm uses:

  - ``OpenAIBaseModel``: ``extra="forbid"`` (an unknown field is a 400, not ignored) and
    ``populate_by_name``; ``StreamOptions``, ``ResponseFormat`` (``format``, an xgrammar
    structural tag, is kept as an object), ``DisaggregatedParams``, ``ConversationParams``
    (``conversation_id`` stripped, non-empty), ``LoRARequest``.
  - ``CompletionRequest`` and ``ChatCompletionRequest``: every field with its type, default and
    bound (``priority`` in [0, 1], ``truncate_prompt_tokens`` >= 1; ``max_tokens`` read as
    ``max_completion_tokens`` on chat; ``reasoning_effort`` one of low/medium/high/max/none,
    default "low"; ``thinking``: the Kimi ``ChatCompletionThinkingParam``), and every validator:
    ``stream_options`` only with ``stream``, ``suffix`` refused, ``tool_choice`` defaulting to
    "auto" with tools and needing tools unless none/auto, message-level ``tools`` on system
    messages only, ``top_logprobs`` needing ``logprobs``, ``cache_salt`` non-empty, the
    ``FunctionDefinition`` cap of 1000 enum values, ``thinking_token_budget``.
  - ``to_sampling_params`` of both, as :class:`SamplingParams`: on a completion ``logprobs`` is
    an int and **0 means off** (the PyTorch backend, or ``gather_generation_logits``, returns
    that many; the TensorRT backend only 1); on chat ``logprobs`` is a bool and the count is
    ``top_logprobs`` or 1; temperature and top_p default to 1.0; ``top_p_min`` 0 means unset;
    ``early_stopping`` True/False/"never" is 1/0/2; ``response_format`` becomes one guide.
  - The answers: ``UsageInfo``, ``CompletionLogProbs``, ``CompletionResponse``(``Choice``),
    ``CompletionStreamResponse``, ``ChatMessage``, ``ChatCompletionLogProbs``,
    ``ChatCompletionResponse``, ``DeltaMessage``, ``ChatCompletionStreamResponse``,
    ``ErrorResponse``, ``ModelCard`` / ``ModelList``.
* ``check_logprobs_limit`` and ``validate_thinking_token_budget`` live in
  ``tensorrt_llm/sampling_params.py``, which is not readable at that commit here: modelled as a
  non-negative int for logprobs (the upper limit is the server's), and a non-negative int (or -1:
  unlimited) for the budget, a bool or a fraction refused.
* ``LoRARequest`` (``tensorrt_llm/executor/request.py``): ``lora_name``, ``lora_int_id``,
  ``lora_path``.
* ``tensorrt_llm/commands/serve.py`` at commit 00209af149e7774406881a37283dce303571eb11: the
  ``trtllm-serve serve`` flags in :data:`SERVE_FLAGS`.
* The ``/metrics`` iteration stats (``IterationStats.to_json_str`` field names, as in
  TensorRT-LLM's docs and tests): :class:`IterationStats`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

PROTOCOL_COMMIT = "0076e9390e1ed11515f149eec356f5a03f4a00d8"
SERVE_COMMIT = "00209af149e7774406881a37283dce303571eb11"
SERVE_FLAGS = frozenset(
    {
        "--tokenizer", "--custom_tokenizer", "--host", "--port", "--backend", "--custom_module_dirs",
        "--log_level", "--max_beam_width", "--max_batch_size", "--max_num_tokens", "--max_seq_len",
        "--tensor_parallel_size", "--tp_size", "--pipeline_parallel_size", "--pp_size",
        "--context_parallel_size", "--cp_size", "--moe_expert_parallel_size", "--ep_size",
        "--moe_cluster_parallel_size", "--cluster_size", "--gpus_per_node",
        "--free_gpu_memory_fraction", "--kv_cache_free_gpu_memory_fraction",
        "--num_postprocess_workers", "--trust_remote_code", "--revision", "--config",
        "--extra_llm_api_options", "--reasoning_parser", "--tool_parser",
        "--metadata_server_config_file", "--server_role", "--fail_fast_on_attention_window_too_large",
        "--otlp_traces_endpoint", "--disagg_cluster_uri", "--enable_chunked_prefill",
        "--media_io_kwargs", "--chat_template",
    }
)  # fmt: skip
BACKENDS = ("pytorch", "tensorrt", "_autodeploy", "trt")
TOOL_PARAM_MAX_ENUM_VALUES = 1000
REASONING_EFFORTS = ("low", "medium", "high", "max", "none")
EarlyStopping = bool | Literal["never"]
_SCHEMA_INSTANCE_KEYWORDS = frozenset({"default", "const", "examples"})
_SCHEMA_MAP_KEYWORDS = frozenset(
    {"properties", "patternProperties", "$defs", "definitions", "dependentSchemas"}
)


class _Base(BaseModel):
    """OpenAIBaseModel: no unknown field, fields by name or alias."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)


def check_logprobs_limit(name: str, value: Any) -> None:
    """sampling_params.check_logprobs_limit, as far as known: a non-negative int (or unset)."""
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
        raise ValueError(f"{name} must be a non-negative integer, got {value!r}")


def validate_thinking_token_budget(value: Any) -> int | None:
    """sampling_params.validate_thinking_token_budget, as far as known: -1 is unlimited (None)."""
    if value is None:
        return None
    if isinstance(value, (bool, float)) or not isinstance(value, int) or value < -1:
        raise ValueError("thinking_token_budget must be a non-negative integer or -1 for unlimited")
    return None if value == -1 else value


def _request_dict(data: Any) -> dict[str, Any]:
    return data if isinstance(data, dict) else {}


class StreamOptions(_Base):
    include_usage: bool | None = True
    continuous_usage_stats: bool | None = False


class ResponseFormat(_Base):
    type: Literal["text", "json", "json_schema", "json_object", "regex", "ebnf", "structural_tag"]
    schema_: dict[str, Any] | None = Field(None, alias="schema")
    json_schema: dict[str, Any] | None = None
    regex: str | None = None
    ebnf: str | None = None
    format: dict[str, Any] | None = None  # xgrammar.structural_tag.Format


class LoRARequest(_Base):
    lora_name: str
    lora_int_id: int
    lora_path: str = ""


class PromptTokensDetails(_Base):
    cached_tokens: int = 0


class UsageInfo(_Base):
    prompt_tokens: int = 0
    total_tokens: int = 0
    completion_tokens: int | None = 0
    prompt_tokens_details: PromptTokensDetails | None = None


class DisaggregatedParams(_Base):
    request_type: str
    first_gen_tokens: list[int] | None = None
    first_gen_log_probs: list[Any] | None = None
    first_gen_logits: list[Any] | None = None
    ctx_request_id: int | None = None
    encoded_opaque_state: str | None = None
    draft_tokens: list[int] | None = None
    disagg_request_id: int | None = None
    ctx_dp_rank: int | None = None
    ctx_info_endpoint: str | None = None
    schedule_style: Any = None  # DisaggScheduleStyle
    ctx_usage: UsageInfo | None = None
    return_prompt_token_ids_b64: bool = False
    resolved_thinking: bool | None = None


class ConversationParams(_Base):
    conversation_id: str
    subagent_affinity_id: str | None = None

    @field_validator("conversation_id", mode="before")
    @classmethod
    def _non_empty(cls, value: Any) -> str:
        if value is None or not str(value).strip():
            raise ValueError("conversation_id must be non-empty")
        return str(value).strip()


@dataclass(frozen=True)
class SamplingParams:
    """What ``to_sampling_params`` hands the engine, for the fields the adapter can affect."""

    logprobs: int | None
    return_log_probs: bool
    max_tokens: int | None
    n: int
    best_of: int | None
    temperature: float
    top_p: float
    top_k: int
    top_p_min: float | None
    min_p: float
    repetition_penalty: float
    presence_penalty: float | None
    frequency_penalty: float | None
    seed: int | None
    stop: str | list[str] | None
    stop_token_ids: list[int] | None
    early_stopping: int | None
    guided_decoding: (
        tuple[str, Any] | None
    )  # (kind, value): json / json_object / regex / grammar / structural_tag
    thinking_token_budget: int | None


def _guide(response_format: ResponseFormat | None) -> tuple[str, Any] | None:
    """_response_format_to_guided_decoding_params without a reasoning parser."""
    if response_format is None or response_format.type == "text":
        return None
    kind = response_format.type
    if kind == "json":
        if response_format.schema_ is None:
            raise ValueError("response_format.schema is required for response_format.type == 'json'")
        return "json", response_format.schema_
    if kind == "json_schema":
        if response_format.json_schema is None:
            raise ValueError("response_format.json_schema is required for 'json_schema'")
        schema = response_format.json_schema
        return "json", schema.get("schema", schema)
    if kind == "json_object":
        return "json_object", True
    if kind == "regex":
        if response_format.regex is None:
            raise ValueError("response_format.regex is required for 'regex'")
        return "regex", response_format.regex
    if kind == "ebnf":
        if response_format.ebnf is None:
            raise ValueError("response_format.ebnf is required for 'ebnf'")
        return "grammar", response_format.ebnf
    return "structural_tag", response_format.model_dump(by_alias=True, exclude_none=True)


def _early_stopping(value: EarlyStopping | None) -> int | None:
    return None if value is None else 2 if value == "never" else int(value)


class _Sampling(_Base):
    """The sampling and extra fields CompletionRequest and ChatCompletionRequest share."""

    model: str
    frequency_penalty: float | None = 0.0
    logit_bias: dict[str, float] | None = None
    n: int = 1
    presence_penalty: float | None = 0.0
    seed: int | None = None
    stop: str | list[str] | None = Field(default_factory=list)
    stream: bool | None = False
    stream_options: StreamOptions | None = None
    temperature: float | None = None
    top_p: float | None = None
    user: str | None = None
    lora_request: LoRARequest | None = None
    prompt_ignore_length: int | None = 0
    best_of: int | None = None
    use_beam_search: bool = False
    top_k: int = 0
    top_p_min: float = 0.0
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    length_penalty: float | None = None
    early_stopping: EarlyStopping | None = None
    stop_token_ids: list[int] | None = Field(default_factory=list)
    include_stop_str_in_output: bool = False
    ignore_eos: bool = False
    min_tokens: int = 0
    skip_special_tokens: bool = True
    spaces_between_special_tokens: bool = True
    truncate_prompt_tokens: Annotated[int, Field(ge=1)] | None = None
    thinking_token_budget: int | None = None
    response_format: ResponseFormat | None = None
    disaggregated_params: DisaggregatedParams | None = None
    priority: float | None = Field(None, ge=0.0, le=1.0)
    conversation_params: ConversationParams | None = None

    @field_validator("thinking_token_budget", mode="before")
    @classmethod
    def _budget(cls, value: Any) -> int | None:
        return validate_thinking_token_budget(value)

    @model_validator(mode="before")
    @classmethod
    def _no_suffix(cls, data: Any) -> Any:
        if _request_dict(data).get("suffix"):
            raise ValueError("suffix is not supported")
        return data

    def _sampling(
        self, max_tokens: int | None, count: int | None, refused: str | None, backend: str, gather: bool
    ) -> SamplingParams:
        """``count`` log-probabilities per token: any on the PyTorch backend (or with gathered
        logits); elsewhere one (``return_log_probs``), and ``refused`` (the error) when more."""
        logprobs, return_log_probs = None, False
        if count and (backend == "pytorch" or gather):
            logprobs = count
        elif count and refused:
            raise ValueError(refused)
        elif count:
            return_log_probs = True
        return SamplingParams(
            logprobs=logprobs,
            return_log_probs=return_log_probs,
            max_tokens=max_tokens,
            n=self.n,
            best_of=self.best_of,
            temperature=self.temperature if self.temperature is not None else 1.0,
            top_p=self.top_p if self.top_p is not None else 1.0,
            top_k=self.top_k,
            top_p_min=self.top_p_min if self.top_p_min > 0 else None,
            min_p=self.min_p,
            repetition_penalty=self.repetition_penalty,
            presence_penalty=self.presence_penalty,
            frequency_penalty=self.frequency_penalty,
            seed=self.seed,
            stop=self.stop,
            stop_token_ids=self.stop_token_ids,
            early_stopping=_early_stopping(self.early_stopping),
            guided_decoding=_guide(self.response_format),
            thinking_token_budget=self.thinking_token_budget,
        )


class CompletionRequest(_Sampling):
    prompt: list[int] | list[list[int]] | str | list[str]
    echo: bool | None = False
    logprobs: int | None = None
    max_tokens: int | None = None
    suffix: str | None = None
    return_context_logits: bool = False
    detokenize: bool = True
    add_special_tokens: bool = True

    @model_validator(mode="before")
    @classmethod
    def _checks(cls, data: Any) -> Any:
        body = _request_dict(data)
        check_logprobs_limit("logprobs", body.get("logprobs"))
        if body.get("stream_options") and not body.get("stream"):
            raise ValueError("Stream options can only be defined when stream is true.")
        return data

    def to_sampling_params(
        self, backend: str = "pytorch", gather_generation_logits: bool = False
    ) -> SamplingParams:
        """What trtllm-serve runs: ``logprobs`` 0 or unset is off."""
        refused = "`logprobs` must be 1 or `gather_generation_logits` must be `True`"
        too_many = refused if (self.logprobs or 0) > 1 else None
        return self._sampling(self.max_tokens, self.logprobs, too_many, backend, gather_generation_logits)


class FunctionDefinition(_Base):
    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None

    @model_validator(mode="after")
    def _enum_cap(self) -> FunctionDefinition:
        count = _enum_values(self.parameters) if self.parameters is not None else 0
        if count > TOOL_PARAM_MAX_ENUM_VALUES:
            raise ValueError(f"tool function {self.name!r} declares {count} enum values; the maximum is 1000")
        return self


def _enum_values(schema: Any) -> int:
    """The enum constraint values in a schema (not enum keys inside instance data or names)."""
    if isinstance(schema, list):
        return sum(_enum_values(item) for item in schema)
    if not isinstance(schema, dict):
        return 0
    count = 0
    for key, value in schema.items():
        if key == "enum" and isinstance(value, list):
            count += len(value)
        elif key in _SCHEMA_MAP_KEYWORDS and isinstance(value, dict):
            count += sum(_enum_values(sub) for sub in value.values())
        elif key not in _SCHEMA_INSTANCE_KEYWORDS:
            count += _enum_values(value)
    return count


class ChatCompletionToolsParam(_Base):
    type: Literal["function"] = "function"
    function: FunctionDefinition


class NamedFunction(_Base):
    name: str


class NamedToolChoice(_Base):
    function: NamedFunction
    type: Literal["function"] = "function"


class ChatCompletionThinkingParam(_Base):
    type: Literal["enabled", "disabled"] = "enabled"
    keep: Literal["all"] | None = None
    effort: Literal["low", "high", "max"] | None = None


class ChatCompletionRequest(_Sampling):
    messages: list[dict[str, Any]]  # OpenAI message params, custom roles and extra keys allowed
    prompt_token_ids: list[int] | None = None
    prompt_token_ids_b64: str | None = None
    logprobs: bool | None = False
    top_logprobs: int | None = 0
    max_completion_tokens: int | None = Field(None, validation_alias="max_tokens")
    tools: list[ChatCompletionToolsParam] | None = None
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = "none"
    parallel_tool_calls: bool | None = None
    reasoning_effort: Literal["low", "medium", "high", "max", "none"] | None = "low"
    thinking: ChatCompletionThinkingParam | None = None
    echo: bool = False
    add_generation_prompt: bool = True
    add_special_tokens: bool = False
    documents: list[dict[str, str]] | None = None
    chat_template: str | None = None
    chat_template_kwargs: dict[str, Any] | None = None
    injected_chat_template_kwargs: list[str] | None = None
    media_io_kwargs: dict[Literal["image", "video", "audio"], dict[str, Any]] | None = None
    cache_salt: str | None = None
    agent_hierarchy: dict[str, Any] | None = None  # AgentHierarchy
    mm_processor_kwargs: dict[str, Any] | None = None

    @model_validator(mode="before")
    @classmethod
    def _checks(cls, data: Any) -> Any:
        body = _request_dict(data)
        if body.get("stream_options") is not None and not body.get("stream"):
            raise ValueError("stream_options can only be set if stream is true")
        messages = [m for m in body.get("messages") or [] if isinstance(m, dict)]
        if any("role" not in m for m in messages):
            raise ValueError("every message needs a role")
        if any(m.get("tools") is not None and m.get("role") != "system" for m in messages):
            raise ValueError("Message-level `tools` are only allowed on system messages.")
        dynamic = any(m.get("role") == "system" and m.get("tools") for m in messages)
        if "tool_choice" not in body and (body.get("tools") or dynamic):
            body["tool_choice"] = "auto"
        choice = body.get("tool_choice")
        needs_tools = "tool_choice" in body and choice not in ("none", "auto")
        if needs_tools and not (body.get("tools") or (choice == "required" and dynamic)):
            raise ValueError("When using `tool_choice`, `tools` must be set.")
        if (top := body.get("top_logprobs")) is not None:
            check_logprobs_limit("top_logprobs", top)
            if not body.get("logprobs"):
                raise ValueError("logprobs must be true when using top_logprobs")
        return data

    @field_validator("cache_salt")
    @classmethod
    def _salt(cls, value: str | None) -> str | None:
        if value is not None and not value.strip():
            raise ValueError("Parameter 'cache_salt' must be a non-empty string if provided.")
        return value

    def to_sampling_params(
        self, backend: str = "pytorch", gather_generation_logits: bool = False
    ) -> SamplingParams:
        """What trtllm-serve runs: with ``logprobs``, ``top_logprobs`` or 1 per token."""
        count = (self.top_logprobs or 1) if self.logprobs else None
        refused = (
            "`gather_generation_logits` must be `True` to use `top_logprobs`" if self.top_logprobs else None
        )
        return self._sampling(self.max_completion_tokens, count, refused, backend, gather_generation_logits)


# -- answers ------------------------------------------------------------------------------------
class CompletionLogProbs(_Base):
    text_offset: list[int] = []
    token_logprobs: list[float | None] = []
    tokens: list[str] = []
    top_logprobs: list[dict[str, float] | None] = []


class CompletionResponseChoice(_Base):
    index: int
    text: str
    token_ids: list[int] | None = None
    logprobs: CompletionLogProbs | None = None
    context_logits: list[float] | list[list[float]] | None = None
    finish_reason: str | None = None
    stop_reason: int | str | None = None
    disaggregated_params: DisaggregatedParams | None = None
    avg_decoded_tokens_per_iter: float | None = None


class CompletionResponse(_Base):
    id: str
    object: str = "text_completion"
    created: int
    model: str
    choices: list[CompletionResponseChoice]
    usage: UsageInfo
    prompt_token_ids: list[list[int]] | list[int] | None = None


class CompletionResponseStreamChoice(_Base):
    index: int
    text: str
    token_ids: list[int] | None = None
    logprobs: CompletionLogProbs | None = None
    finish_reason: str | None = None
    stop_reason: int | str | None = None
    avg_decoded_tokens_per_iter: float | None = None


class CompletionStreamResponse(_Base):
    id: str
    object: str = "text_completion"
    created: int
    model: str
    choices: list[CompletionResponseStreamChoice]
    usage: UsageInfo | None = None


class FunctionCall(_Base):
    name: str
    arguments: str


class DeltaFunctionCall(_Base):
    name: str | None = None
    arguments: str | None = None


class ToolCall(_Base):
    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


class DeltaToolCall(_Base):
    id: str | None = None
    type: Literal["function"] = "function"
    index: int
    function: DeltaFunctionCall | None = None


class ChatMessage(_Base):
    role: str
    content: str | None = None
    reasoning_content: str | None = None
    reasoning: str | None = None
    tool_calls: list[ToolCall] = []


class ChatCompletionLogProb(_Base):
    token: str
    logprob: float = -9999.0
    bytes: list[int] | None = None


class ChatCompletionLogProbsContent(ChatCompletionLogProb):
    top_logprobs: list[ChatCompletionLogProb] | None = None


class ChatCompletionLogProbs(_Base):
    content: list[ChatCompletionLogProbsContent] | None = None


class ChatCompletionResponseChoice(_Base):
    index: int
    message: ChatMessage
    logprobs: ChatCompletionLogProbs | None = None
    finish_reason: str | None = None
    stop_reason: int | str | None = None
    mm_embedding_handle: dict[str, Any] | None = None
    disaggregated_params: DisaggregatedParams | None = None
    avg_decoded_tokens_per_iter: float | None = None


class ChatCompletionResponse(_Base):
    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str
    choices: list[ChatCompletionResponseChoice]
    usage: UsageInfo
    prompt_token_ids: list[int] | None = None
    prompt_token_ids_b64: str | None = None


class DeltaMessage(_Base):
    role: str | None = None
    content: str | None = None
    reasoning_content: str | None = None
    reasoning: str | None = None
    tool_calls: list[DeltaToolCall] | None = None


class ChatStreamChoice(_Base):
    index: int
    delta: DeltaMessage
    logprobs: ChatCompletionLogProbs | None = None
    finish_reason: str | None = None
    stop_reason: int | str | None = None
    avg_decoded_tokens_per_iter: float | None = None


class ChatCompletionStreamResponse(_Base):
    id: str
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    created: int
    model: str
    choices: list[ChatStreamChoice]
    usage: UsageInfo | None = None


class ErrorResponse(_Base):
    object: str = "error"
    message: str
    type: str
    param: str | None = None
    code: int


class ModelCard(_Base):
    id: str
    object: str = "model"
    created: int
    owned_by: str = "tensorrt_llm"


class ModelList(_Base):
    object: str = "list"
    data: list[ModelCard] = []


class KvCacheStats(BaseModel):
    maxNumBlocks: int
    freeNumBlocks: int
    usedNumBlocks: int
    tokensPerBlock: int
    cacheHitRate: float | None = None


class IterationStats(BaseModel):
    """The fields of one ``/metrics`` element unillm reads (the engine sends more)."""

    iter: int
    iterLatencyMS: float
    numActiveRequests: int
    numQueuedRequests: int | None = None
    gpuMemUsage: int
    kvCacheStats: KvCacheStats | None = None
    specDecodingStats: dict[str, float] | None = None


REQUESTS: dict[str, type[CompletionRequest] | type[ChatCompletionRequest]] = {
    "/v1/completions": CompletionRequest,
    "/v1/chat/completions": ChatCompletionRequest,
}


def check_request(path: str, body: Any) -> CompletionRequest | ChatCompletionRequest:
    """``body`` validated as trtllm-serve's request model for ``path`` (ValidationError if not)."""
    return REQUESTS[path].model_validate(body)


def request_problem(path: str, body: Any) -> str | None:
    """What trtllm-serve would answer 400 to in ``body`` (None: it would run it), for look-alikes."""
    if path not in REQUESTS:
        return None
    try:
        check_request(path, body).to_sampling_params()
    except ValueError as e:  # pydantic's ValidationError is a ValueError
        return str(e)
    return None
