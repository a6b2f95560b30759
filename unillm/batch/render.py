"""unillm results as OpenAI Batch output lines (pure: no I/O).

Each line is ``{"id", "custom_id", "response": {"status_code", "request_id", "body"}, "error"}``,
the layout OpenAI's batch API and ``vllm run-batch`` write, so the files move between them.
``body`` is the OpenAI answer object (``chat.completion``, ``text_completion`` or the
embeddings ``list``). A failed request has ``error: {"code": <unillm error type>, "message"}``
and, when the engine answered with an error status, ``response.status_code`` set to it.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

from unillm.batch.lines import BatchItem
from unillm.errors import EngineError, UnillmError
from unillm.results import Completion, CompletionChoice, Embeddings, TokenLogprob, Usage


def success_line(item: BatchItem, result: Completion[Any] | Embeddings) -> dict[str, Any]:
    """The output line of a request that succeeded.

    Args:
        item: The request.
        result: What the engine answered (a Completion, or Embeddings for /v1/embeddings).
    """
    body = embeddings_body(result) if isinstance(result, Embeddings) else completion_body(item, result)
    return _line(item, {"status_code": 200, "request_id": _id("req"), "body": body}, None)


def failure_line(item: BatchItem, error: UnillmError) -> dict[str, Any]:
    """The output line of a request that failed for good (after the retry policy's tries).

    Args:
        item: The request.
        error: The typed error it ended with.
    """
    status = error.status if isinstance(error, EngineError) else None
    response = None
    if status is not None:
        body = {"error": {"message": str(error), "type": type(error).__name__, "param": None, "code": status}}
        response = {"status_code": status, "request_id": _id("req"), "body": body}
    return _line(item, response, {"code": type(error).__name__, "message": str(error)})


def encode(line: dict[str, Any]) -> bytes:
    """One output line as UTF-8 JSON bytes, newline-terminated (the newline marks it whole)."""
    return (json.dumps(line, ensure_ascii=False, separators=(",", ":")) + "\n").encode()


def failed(line: dict[str, Any]) -> bool:
    """Whether an output line (ours, OpenAI's or vllm run-batch's) records a failure."""
    response = line.get("response")
    status = response.get("status_code", 200) if isinstance(response, dict) else None
    return line.get("error") is not None or not isinstance(status, int) or status >= 400


def completion_body(item: BatchItem, result: Completion[Any]) -> dict[str, Any]:
    """The OpenAI ``chat.completion`` (chat requests) or ``text_completion`` object of a result."""
    chat = item.endpoint == "chat"
    choices = [_chat_choice(c) if chat else _text_choice(c) for c in result.choices]
    return {
        "id": result.id or _id("chatcmpl" if chat else "cmpl"),
        "object": "chat.completion" if chat else "text_completion",
        "created": int(time.time()),
        "model": result.model,
        "choices": choices,
        "usage": _usage(result.usage),
    }


def embeddings_body(result: Embeddings) -> dict[str, Any]:
    """The OpenAI embeddings ``list`` object of a result."""
    return {
        "object": "list",
        "data": [{"object": "embedding", "index": i, "embedding": v} for i, v in enumerate(result.vectors)],
        "model": result.model,
        "usage": {"prompt_tokens": result.usage.prompt_tokens, "total_tokens": result.usage.total_tokens},
    }


def _chat_choice(choice: CompletionChoice[Any]) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": choice.text or None}
    if choice.tool_calls:
        message["tool_calls"] = [c.to_openai() for c in choice.tool_calls]
    logprobs = None
    if choice.logprobs is not None:
        logprobs = {"content": [_chat_logprob(t) for t in choice.logprobs]}
    return {
        "index": choice.index,
        "message": message,
        "logprobs": logprobs,
        "finish_reason": choice.finish_reason,
    }


def _chat_logprob(t: TokenLogprob) -> dict[str, Any]:
    top = [{"token": a.token, "logprob": a.logprob} for a in t.top]
    return {"token": t.token, "logprob": t.logprob, "top_logprobs": top}


def _text_choice(choice: CompletionChoice[Any]) -> dict[str, Any]:
    logprobs = None
    if choice.logprobs is not None:
        logprobs = {
            "tokens": [t.token for t in choice.logprobs],
            "token_logprobs": [t.logprob for t in choice.logprobs],
            "top_logprobs": [{a.token: a.logprob for a in t.top} for t in choice.logprobs],
        }
    return {
        "index": choice.index,
        "text": choice.text,
        "logprobs": logprobs,
        "finish_reason": choice.finish_reason,
    }


def _usage(usage: Usage) -> dict[str, int]:
    return {
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "total_tokens": usage.total_tokens,
    }


def _line(item: BatchItem, response: dict[str, Any] | None, error: dict[str, Any] | None) -> dict[str, Any]:
    return {"id": _id("batch_req"), "custom_id": item.custom_id, "response": response, "error": error}


def _id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"
