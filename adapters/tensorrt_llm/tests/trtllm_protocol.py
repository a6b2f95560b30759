"""TensorRT-LLM's serve protocol, transcribed for the tests: every body the adapter sends is checked.

Why transcribed: the ``tensorrt_llm`` wheel cannot be used here. ``pip download tensorrt-llm``
(1.2.1 on PyPI) fails at metadata generation on a machine without ``nvidia-smi``, and
``tensorrt_llm/serve/openai_protocol.py`` imports ``torch``, ``xgrammar`` and the CUDA executor
at module level, so it cannot be imported without CUDA either.

Sources (github.com/NVIDIA/TensorRT-LLM), facts transcribed, not code:

* ``tensorrt_llm/serve/openai_protocol.py`` at commit 0076e9390e1ed11515f149eec356f5a03f4a00d8:
  ``OpenAIBaseModel`` (``extra="forbid"``: an unknown field is a 400/422, not ignored),
  ``StreamOptions``, ``ResponseFormat`` (type json / json_schema / json_object / regex / ebnf /
  structural_tag, with schema / json_schema / regex / ebnf), ``CompletionRequest``,
  ``ChatCompletionRequest`` (``max_tokens`` is accepted as ``max_completion_tokens``),
  ``FunctionDefinition``, ``ChatCompletionToolsParam``, ``ChatCompletionNamedToolChoiceParam``,
  the responses, stream chunks and ``ErrorResponse``.
* ``LoRARequest`` (``tensorrt_llm/executor/request.py``): ``lora_name``, ``lora_int_id``,
  ``lora_path``.
* ``tensorrt_llm/commands/serve.py`` at commit 00209af149e7774406881a37283dce303571eb11: the
  ``trtllm-serve serve`` flags in :data:`SERVE_FLAGS`.
* The ``/metrics`` iteration stats (``IterationStats.to_json_str`` field names, as in
  TensorRT-LLM's docs and tests): :class:`IterationStats`.

Only the fields unillm can send are modelled with their types; ``extra="forbid"`` as upstream.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

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


class _Base(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class StreamOptions(_Base):
    include_usage: bool | None = True
    continuous_usage_stats: bool | None = False


class ResponseFormat(_Base):
    type: Literal["text", "json", "json_schema", "json_object", "regex", "ebnf", "structural_tag"]
    schema_: dict[str, Any] | None = Field(None, alias="schema")
    json_schema: dict[str, Any] | None = None
    regex: str | None = None
    ebnf: str | None = None


class LoRARequest(_Base):
    lora_name: str
    lora_int_id: int
    lora_path: str = ""


class _Sampling(_Base):
    model: str
    frequency_penalty: float | None = 0.0
    presence_penalty: float | None = 0.0
    seed: int | None = None
    stop: str | list[str] | None = None
    stream: bool | None = False
    stream_options: StreamOptions | None = None
    temperature: float | None = None
    top_p: float | None = None
    n: int = 1
    best_of: int | None = None
    top_k: int = 0
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    response_format: ResponseFormat | None = None
    lora_request: LoRARequest | None = None


class CompletionRequest(_Sampling):
    prompt: list[int] | list[list[int]] | str | list[str]
    max_tokens: int | None = None
    logprobs: int | None = None


class FunctionDefinition(_Base):
    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class ChatCompletionToolsParam(_Base):
    type: Literal["function"] = "function"
    function: FunctionDefinition


class NamedFunction(_Base):
    name: str


class NamedToolChoice(_Base):
    function: NamedFunction
    type: Literal["function"] = "function"


class ChatCompletionRequest(_Sampling):
    messages: list[dict[str, Any]]
    max_completion_tokens: int | None = Field(None, validation_alias="max_tokens")
    logprobs: bool | None = False
    top_logprobs: int | None = 0
    tools: list[ChatCompletionToolsParam] | None = None
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = "none"


class UsageInfo(_Base):
    prompt_tokens: int = 0
    total_tokens: int = 0
    completion_tokens: int | None = 0
    prompt_tokens_details: dict[str, Any] | None = None


class CompletionResponseChoice(_Base):
    index: int
    text: str
    token_ids: list[int] | None = None
    logprobs: dict[str, Any] | None = None
    context_logits: Any = None
    finish_reason: str | None = None
    stop_reason: int | str | None = None
    disaggregated_params: Any = None
    avg_decoded_tokens_per_iter: float | None = None


class CompletionResponse(_Base):
    id: str
    object: str = "text_completion"
    created: int
    model: str
    choices: list[CompletionResponseChoice]
    usage: UsageInfo
    prompt_token_ids: Any = None


class DeltaMessage(_Base):
    role: str | None = None
    content: str | None = None
    reasoning_content: str | None = None
    reasoning: str | None = None
    tool_calls: list[dict[str, Any]] | None = None


class ChatStreamChoice(_Base):
    index: int
    delta: DeltaMessage
    logprobs: dict[str, Any] | None = None
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


REQUESTS: dict[str, type[BaseModel]] = {
    "/v1/completions": CompletionRequest,
    "/v1/chat/completions": ChatCompletionRequest,
}


def check_request(path: str, body: Any) -> BaseModel:
    """``body`` validated as trtllm-serve's request model for ``path`` (ValidationError if not)."""
    return REQUESTS[path].model_validate(body)
