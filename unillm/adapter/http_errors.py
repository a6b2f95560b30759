"""An engine's HTTP error answer as unillm's typed errors: status and message, read once."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from unillm.capabilities import Feature
from unillm.errors import (
    EngineError,
    EngineInternalError,
    InvalidRequest,
    NotFound,
    Overloaded,
    Unauthorized,
    UnknownLora,
    UnknownModel,
    UnsupportedFeature,
    clip_message,
)
from unillm.options import Request


def raise_stream_error(engine: str, event: Mapping[str, Any]) -> None:
    """Raise the typed error an OpenAI-layout ``{"error": {...}}`` stream event carries.

    Args:
        engine: The adapter's name, for the error message.
        event: One decoded stream event.

    Raises:
        EngineError: The event holds an ``error`` (the subclass for its status).
    """
    if "error" in event:
        raise error_for_status(engine, _status_of(event), error_message(event), None, retried=False)


def error_message(body: bytes | Mapping[str, Any]) -> str:
    """The engine's own message from the common error layouts (or the raw text), cut to
    :data:`~unillm.errors.ENGINE_MESSAGE_LIMIT` characters.

    Args:
        body: The raw error body, or an already decoded JSON object.
    """
    if isinstance(body, (bytes, bytearray)):
        try:
            data: Any = json.loads(body)
        except (json.JSONDecodeError, UnicodeDecodeError, RecursionError):
            return clip_message(body.decode("utf-8", "replace").strip())
    else:
        data = body
    if isinstance(data, Mapping):
        err = data.get("error", data)
        if isinstance(err, str):
            return clip_message(err)
        if isinstance(err, Mapping):
            for key in ("message", "detail", "error"):
                if isinstance(err.get(key), str):
                    return clip_message(str(err[key]))
            if isinstance(err.get("detail"), list):
                return clip_message(json.dumps(err["detail"]))
    return clip_message(json.dumps(data))


def _status_of(chunk: Mapping[str, Any]) -> int:
    err = chunk.get("error")
    code = err.get("code") if isinstance(err, Mapping) else None
    return code if isinstance(code, int) else 500


def error_for_status(
    engine: str,
    status: int,
    message: str,
    request: Request | None,
    retry_after: float | None = None,
    *,
    retried: bool = True,
) -> EngineError:
    """Map an HTTP status and the engine's message (cut to a bounded length) to unillm's typed errors.

    Args:
        engine: The adapter's name, for the error message.
        status: The HTTP status code.
        message: The engine's own message (cut to a bounded length).
        request: The request that failed; None outside a request.
        retry_after: Seconds from a ``Retry-After`` header; None: none sent.
        retried: False for an error inside a stream that had started (never retried): an
            ``Overloaded`` then says to retry later instead of "retries exhausted".

    Returns:
        The EngineError subclass for the status (Overloaded, NotFound, InvalidRequest, ...).
    """
    message = clip_message(message)
    text = f"{engine} answered {status}: {message.rstrip('.')}"
    kw: dict[str, Any] = {"engine": engine, "status": status, "engine_message": message}
    if status in (400, 422):
        return InvalidRequest(text, **kw)
    if status in (401, 403):
        return Unauthorized(f"{text}. Check the api_key passed to unillm.connect()", **kw)
    if status == 404:
        lowered = message.lower()
        if request is not None and request.lora and request.lora in message:
            return UnknownLora(
                f"{text}. The LoRA adapter {request.lora!r} is not loaded: see "
                "llm.loras.list(), or load it with llm.loras.load(name, path)",
                **kw,
            )
        if "model" in lowered:
            return UnknownModel(f"{text}. See the served models with llm.info()", **kw)
        return NotFound(text, **kw)
    if status in (429, 503):
        hint = "retries exhausted" if retried else "inside a started stream, not retried: retry later"
        return Overloaded(f"{text} ({hint})", retry_after=retry_after, **kw)
    if status >= 500:
        return EngineInternalError(text, **kw)
    return EngineError(text, **kw)


def missing_route(
    engine: str,
    status: int,
    body: bytes,
    feature: Feature,
    version: str | None,
    *,
    why: str,
    alternative: str,
) -> UnsupportedFeature | None:
    """The refusal for an endpoint this server lacks: a 404 whose message is the web framework's
    bare ``Not Found`` (not the engine's 404 naming a model or adapter). None for other answers.
    :meth:`Adapter.lora_error <unillm.adapter.base.Adapter.lora_error>` uses it for an adapter's
    ``missing_lora_routes``.

    Args:
        engine: The adapter's name, for the error message.
        status: The HTTP status code.
        body: The raw answer body.
        feature: The feature the endpoint serves.
        version: The engine's version string; None: unknown.
        why: What the refusal says is missing.
        alternative: What the caller can do instead.
    """
    from unillm.adapter.http_errors import error_message

    if status != 404 or error_message(body) != "Not Found":
        return None
    return UnsupportedFeature(engine, feature.value, version=version, why=why, alternative=alternative)
