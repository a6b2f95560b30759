"""Ollama's API types, transcribed for the tests: every body the adapter sends is validated here.

Source: github.com/ollama/ollama, ``api/types.go`` at commit
fb30760996871fa9460115c753afd2c60d4ab0f7 (2026-08-21, after v0.32.15): GenerateRequest,
ChatRequest, Message, ToolCall, ToolCallFunction, Tool, ToolFunction, Options (with Runner),
EmbedRequest, PullRequest, CopyRequest, and the answers GenerateResponse, ChatResponse,
Metrics, Logprob, EmbedResponse, ProgressResponse, ListResponse; the error body is
``StatusError``'s ``{"error": ...}``. The streamed content type ``application/x-ndjson`` is from
``server/routes.go``. Facts transcribed (field names, JSON types, which are optional), not code.

Go's JSON decoder ignores unknown fields, and Ollama ignores unknown ``options`` keys with a
warning: a misspelt field would be silently dropped. So these models forbid extra fields: a
field the adapter sends that Ollama does not read fails the test instead.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

NDJSON = "application/x-ndjson"
SOURCE_COMMIT = "fb30760996871fa9460115c753afd2c60d4ab0f7"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class Options(_Strict):
    """Options (api/types.go), runtime part and Runner part; every field optional."""

    num_keep: int | None = None
    seed: int | None = None
    num_predict: int | None = None
    top_k: int | None = None
    top_p: float | None = None
    min_p: float | None = None
    typical_p: float | None = None
    repeat_last_n: int | None = None
    temperature: float | None = None
    repeat_penalty: float | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    stop: list[str] | None = None
    num_ctx: int | None = None
    num_batch: int | None = None
    num_gpu: int | None = None
    main_gpu: int | None = None
    use_mmap: bool | None = None
    num_thread: int | None = None
    draft_num_predict: int | None = None


class ToolCallFunction(_Strict):
    index: int | None = None
    name: str
    arguments: dict[str, Any]  # an object (ordered map), not a JSON string


class ToolCall(_Strict):
    id: str | None = None
    function: ToolCallFunction


class Message(_Strict):
    role: str
    content: str
    thinking: str | None = None
    images: list[str] | None = None  # ImageData: []byte, base64 in JSON
    tool_calls: list[ToolCall] | None = None
    tool_name: str | None = None
    tool_call_id: str | None = None


class ToolFunction(_Strict):
    name: str
    description: str | None = None
    parameters: dict[str, Any]


class Tool(_Strict):
    type: str
    items: Any = None
    function: ToolFunction


Think = bool | Literal["high", "medium", "low", "max"]


class GenerateRequest(_Strict):
    model: str
    prompt: str = ""
    suffix: str = ""
    system: str = ""
    template: str = ""
    context: list[int] | None = None
    stream: bool | None = None
    raw: bool | None = None
    format: Literal["json"] | dict[str, Any] | None = None
    keep_alive: str | int | None = None
    images: list[str] | None = None
    options: Options | None = None
    think: Think | None = None
    truncate: bool | None = None
    shift: bool | None = None
    logprobs: bool | None = None
    top_logprobs: int | None = Field(None, ge=0, le=20)


class ChatRequest(_Strict):
    model: str
    messages: list[Message]
    stream: bool | None = None
    format: Literal["json"] | dict[str, Any] | None = None
    keep_alive: str | int | None = None
    tools: list[Tool] | None = None
    options: Options | None = None
    think: Think | None = None
    truncate: bool | None = None
    shift: bool | None = None
    logprobs: bool | None = None
    top_logprobs: int | None = Field(None, ge=0, le=20)


class EmbedRequest(_Strict):
    model: str
    input: str | list[str]
    keep_alive: str | int | None = None
    truncate: bool | None = None
    dimensions: int | None = None
    options: Options | None = None


class PullRequest(_Strict):
    model: str
    insecure: bool | None = None
    stream: bool | None = None


class CopyRequest(_Strict):
    source: str
    destination: str


class TokenLogprob(_Strict):
    token: str
    logprob: float
    bytes: list[int] | None = None


class Logprob(TokenLogprob):
    top_logprobs: list[TokenLogprob] | None = None


class _Metrics(_Strict):
    total_duration: int | None = None
    load_duration: int | None = None
    prompt_eval_count: int | None = None
    prompt_eval_duration: int | None = None
    eval_count: int | None = None
    eval_duration: int | None = None


class GenerateResponse(_Metrics):
    model: str
    created_at: str
    response: str
    thinking: str | None = None
    done: bool
    done_reason: str | None = None
    context: list[int] | None = None
    tool_calls: list[ToolCall] | None = None
    logprobs: list[Logprob] | None = None


class ChatResponse(_Metrics):
    model: str
    created_at: str
    message: Message
    done: bool
    done_reason: str | None = None
    logprobs: list[Logprob] | None = None


class EmbedResponse(_Strict):
    model: str
    embeddings: list[list[float]]
    total_duration: int | None = None
    load_duration: int | None = None
    prompt_eval_count: int | None = None


class ProgressResponse(_Strict):
    status: str
    digest: str | None = None
    total: int | None = None
    completed: int | None = None


class ErrorResponse(_Strict):
    error: str


REQUESTS: dict[str, type[BaseModel]] = {
    "/api/generate": GenerateRequest,
    "/api/chat": ChatRequest,
    "/api/embed": EmbedRequest,
    "/api/pull": PullRequest,
    "/api/copy": CopyRequest,
}
ANSWERS: dict[str, type[BaseModel]] = {
    "/api/generate": GenerateResponse,
    "/api/chat": ChatResponse,
    "/api/embed": EmbedResponse,
    "/api/pull": ProgressResponse,
}


def check_request(path: str, body: Any) -> BaseModel:
    """``body`` validated as Ollama's request type for ``path`` (pydantic ValidationError if not)."""
    return REQUESTS[path].model_validate(body)


def check_answer(path: str, body: Any) -> BaseModel:
    """An answer (or one stream line) validated as Ollama's response type for ``path``."""
    if isinstance(body, dict) and "error" in body:
        return ErrorResponse.model_validate(body)
    return ANSWERS[path].model_validate(body)
