"""TGI's error answers as unillm's typed errors, carrying TGI's own message.

TGI answers errors as ``{"error": "...", "error_type": "..."}``: 422 validation, 424 generation,
429 overloaded, 500 incomplete generation. A stream that already started reports them as an
SSE event instead (HTTP status 200): the native stream with ``error_type``, the OpenAI-style
streams as ``{"error": {"message": ..., "http_status_code": 422}}`` whatever the cause, so the
cause is read from the message prefix there.

    http_error(424, b'{"error":"Request failed during generation: OOM","error_type":"generation"}', None)
    # EngineInternalError('tgi answered 424: Request failed during generation: OOM ...')
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from unillm.adapter import (
    EngineError,
    EngineInternalError,
    Overloaded,
    Request,
    clip_message,
    error_for_status,
    error_message,
)

ENGINE = "tgi"

ERROR_TYPE_STATUS: dict[str, int] = {
    "validation": 422,
    "template_error": 422,
    "missing_template_variable": 422,
    "tool_error": 422,
    "generation": 424,
    "overloaded": 429,
    "incomplete_generation": 500,
    "incomplete_generation_stream": 500,
    "stream_serialization_error": 500,
    "healthcheck": 503,
}
# TGI's InferError display prefixes (router/src/infer/mod.rs), for streams that hide the type.
_PREFIX_STATUS: tuple[tuple[str, int], ...] = (
    ("Input validation error", 422),
    ("Template error", 422),
    ("Missing template", 422),
    ("Tool error", 422),
    ("Request failed during generation", 424),
    ("Model is overloaded", 429),
    ("Incomplete generation", 500),
    ("Stream event serialization error", 500),
)


def error_for(status: int, message: str, request: Request | None, *, streaming: bool = False) -> EngineError:
    """The typed error for a TGI status and message (424 is a failure inside the engine)."""
    message = clip_message(message)
    kw: dict[str, Any] = {"engine": ENGINE, "status": status, "engine_message": message}
    if status == 424:
        return EngineInternalError(
            f"{ENGINE} answered 424: {message}. The model failed while generating; see the server's log", **kw
        )
    if status == 429 and streaming:
        return Overloaded(
            f"{ENGINE} reported in its stream: {message} (a started stream is not retried; try again later)",
            **kw,
        )
    return error_for_status(ENGINE, status, message, request)


def http_error(status: int, body: bytes, request: Request | None) -> EngineError:
    """The typed error for an HTTP error answer (JSON ErrorResponse or a plain-text body)."""
    return error_for(status, error_message(body), request)


def is_error_event(event: Mapping[str, Any]) -> bool:
    """True when a stream event reports an error instead of tokens."""
    return "error" in event and "token" not in event and "choices" not in event


def event_error(event: Mapping[str, Any], request: Request | None) -> EngineError:
    """The typed error for an error event inside a stream."""
    err = event.get("error")
    if isinstance(err, Mapping):
        message = str(err.get("message", ""))
        code = err.get("http_status_code")
        status = _status_from_prefix(message) or (code if isinstance(code, int) else 500)
    else:
        message = str(err)
        kind = event.get("error_type")
        status = ERROR_TYPE_STATUS.get(kind, 0) if isinstance(kind, str) else 0
        status = status or _status_from_prefix(message) or 500
    return error_for(status, message, request, streaming=True)


def _status_from_prefix(message: str) -> int | None:
    return next((status for prefix, status in _PREFIX_STATUS if message.startswith(prefix)), None)
