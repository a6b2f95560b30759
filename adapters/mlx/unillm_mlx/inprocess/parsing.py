"""Requests to the in-process engine: JSON bodies read, checked and turned into a :class:`Job`.

Everything here runs on the event loop, before the worker sees the request.
"""

from __future__ import annotations

import json
import math
import threading
from dataclasses import dataclass, field
from typing import Any

from unillm.adapter import SAMPLING_FIELDS
from unillm_mlx import DEFAULT_MODEL

__all__ = [
    "DEFAULT_MAX_TOKENS",
    "Job",
    "RequestError",
    "number",
    "parse_job",
    "read_body",
    "require_str",
    "tokenize_is_chat",
]

FIELDS = frozenset(
    {
        "model",
        "messages",
        "prompt",
        *SAMPLING_FIELDS,  # max_tokens, temperature, ..., logprobs, top_logprobs
        "max_completion_tokens",
        "stream",
        "stream_options",
        "structured_outputs",
        "response_format",
        "adapters",
        "logit_bias",
        "tools",
        "tool_choice",
        "chat_template_kwargs",  # e.g. enable_thinking, for the chat template
    }
)
DEFAULT_MAX_TOKENS = 512  # as mlx_lm.server
_FLOATS = ("temperature", "top_p", "min_p", "presence_penalty", "frequency_penalty", "repetition_penalty")


class RequestError(Exception):
    """A request the engine refuses, answered with ``status`` and the message as ``{"error": ...}``."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass(eq=False)
class Job:
    """One generation request, parsed and validated on the event loop."""

    chat: bool
    body: dict[str, Any]
    stream: bool
    n: int
    max_tokens: int
    stop: tuple[str, ...]
    logprobs: bool
    top_logprobs: int
    structured: dict[str, Any] | None
    adapter: str | None
    include_usage: bool
    cancelled: threading.Event = field(default_factory=threading.Event)


def read_body(raw: bytes) -> dict[str, Any]:
    """The request body as a JSON object.

    Raises:
        RequestError: The body is not JSON, or not an object.
    """
    try:
        body = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise RequestError(400, f"Invalid JSON in request body: {e}") from None
    if not isinstance(body, dict):
        raise RequestError(400, "Request should be a JSON object")
    return body


def require_str(body: dict[str, Any], key: str) -> str:
    """``body[key]``, which must be a non-empty string (else a RequestError)."""
    value = body.get(key)
    if not isinstance(value, str) or not value:
        raise RequestError(400, f"{key} must be a non-empty string")
    return value


def number(
    body: dict[str, Any],
    key: str,
    kind: type | tuple[type, ...],
    default: Any,
    lo: float = -math.inf,
    hi: float = math.inf,
) -> Any:
    """``body[key]`` checked to be a ``kind`` number in [lo, hi]; ``default`` when absent or null."""
    value: Any = body.get(key, default)
    if value is None:
        return default
    ok = not isinstance(value, bool) and isinstance(value, (int, float)) and lo <= value <= hi
    if not ok or not isinstance(value, kind):
        raise RequestError(400, f"{key} must be a number in [{lo}, {hi}], got {value!r}")
    return value


def tokenize_is_chat(body: dict[str, Any]) -> bool:
    """Whether a ``/tokenize`` body holds ``messages`` (True) or a ``prompt`` (False), checked."""
    chat = body.get("messages") is not None
    if chat == (body.get("prompt") is not None):
        raise RequestError(400, "pass exactly one of prompt or messages")
    if chat and (not isinstance(body["messages"], list) or not body["messages"]):
        raise RequestError(400, "messages must be a non-empty list")
    if not chat and not isinstance(body["prompt"], str):
        raise RequestError(400, "prompt must be a string")
    return chat


def parse_job(body: dict[str, Any], *, chat: bool, model_id: str, model_path: str) -> Job:
    """A completions (``chat=False``) or chat completions body as a Job, every field checked.

    Args:
        body: The request's JSON object.
        chat: Whether it came to the chat API.
        model_id: The name the model is served under.
        model_path: The model's path (accepted as its name too).

    Returns:
        The request, ready for the worker.

    Raises:
        RequestError: A field is unknown, malformed or not supported in process.
    """
    unknown = sorted(set(body) - FIELDS)
    if unknown:
        raise RequestError(400, f"unsupported field(s) {unknown} for in-process MLX")
    model = body.get("model", DEFAULT_MODEL)
    if model not in (model_id, model_path, DEFAULT_MODEL):
        raise RequestError(404, f"model {model!r} is not served here (serving {model_id!r})")
    _check_input(body, chat=chat)
    stop = _stops(body)
    _check_logit_bias(body.get("logit_bias"))
    logprobs = body.get("logprobs", False)
    if not isinstance(logprobs, bool):
        raise RequestError(400, "logprobs must be a boolean")
    structured = _structured(body)
    adapter = body.get("adapters")
    if adapter is not None and not isinstance(adapter, str):
        raise RequestError(400, "adapters must be a string (a LoRA name or path)")
    options = body.get("stream_options") or {}
    max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
    for key in _FLOATS:
        number(body, key, (int, float), None)
    number(body, "top_k", int, None, 0)
    number(body, "seed", int, None)
    return Job(
        chat=chat,
        body=body,
        stream=bool(body.get("stream", False)),
        n=number(body, "n", int, 1, 1, 64),
        max_tokens=number({"max_tokens": max_tokens}, "max_tokens", int, DEFAULT_MAX_TOKENS, 1),
        stop=stop,
        logprobs=logprobs or body.get("top_logprobs") is not None,
        top_logprobs=number(body, "top_logprobs", int, 0, 0, 20),
        structured=structured,
        adapter=adapter,
        include_usage=bool(isinstance(options, dict) and options.get("include_usage")),
    )


def _check_input(body: dict[str, Any], *, chat: bool) -> None:
    """The messages (chat) or the prompt (completions) are there, and no free-text tool calls."""
    if not chat:
        if not isinstance(body.get("prompt"), str):
            raise RequestError(400, "prompt must be a string")
        return
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise RequestError(400, "messages must be a non-empty list")
    if body.get("tool_choice", "none") != "none" and body.get("tools"):
        raise RequestError(
            400,
            "in-process MLX reads no calls from free text: send tool_choice "
            "'none' with structured_outputs forcing the call (unillm does)",
        )


def _check_logit_bias(bias: Any) -> None:
    """``logit_bias`` is None or token-id strings to numbers (as OpenAI's, which mlx-lm applies)."""
    if bias is None:
        return
    if not isinstance(bias, dict) or not all(
        isinstance(k, str) and k.isdigit() and isinstance(v, int | float) and not isinstance(v, bool)
        for k, v in bias.items()
    ):
        raise RequestError(400, "logit_bias must map token ids (as strings) to numbers")


def _stops(body: dict[str, Any]) -> tuple[str, ...]:
    stop = body.get("stop") or ()
    stops = (stop,) if isinstance(stop, str) else tuple(stop) if isinstance(stop, list | tuple) else (None,)
    if not all(isinstance(s, str) and s for s in stops):
        raise RequestError(400, "stop must be a string or a list of non-empty strings")
    return stops


def _structured(body: dict[str, Any]) -> dict[str, Any] | None:
    """The output constraint, from ``structured_outputs`` or a json_schema ``response_format``."""
    structured = body.get("structured_outputs")
    response_format = body.get("response_format")
    if isinstance(response_format, dict) and response_format.get("type") == "json_schema":
        if structured is not None:
            raise RequestError(400, "pass either structured_outputs or response_format, not both")
        structured = {"json": (response_format.get("json_schema") or {}).get("schema", {})}
    elif response_format not in (None, {"type": "text"}):
        raise RequestError(400, f"unsupported response_format {response_format!r}")
    if structured is not None and not isinstance(structured, dict):
        raise RequestError(400, "structured_outputs must be an object")
    return structured
