"""vLLM look-alikes inside ``httpx.MockTransport``: discovery answers; a fixed answer, whole or streamed.

llm = unillm.LLM("vllm", "http://engine.invalid", http_transport=httpx.MockTransport(answering("Hi")))
"""

from __future__ import annotations

import json
from collections.abc import Callable

import httpx


def discovery(
    request: httpx.Request, *, version: str = "0.32.0", model: str = "tiny", max_model_len: int | None = 512
) -> httpx.Response | None:
    """vLLM's answer to a discovery request (``/version``, ``/v1/models``); None for any other.

    Args:
        request: The request the handler got.
        version: The vLLM version ``/version`` reports.
        model: The served model's id.
        max_model_len: Its context length (None: not listed).

    Returns:
        The answer, or None when ``request`` is not a discovery request.
    """
    if request.url.path == "/version":
        return httpx.Response(200, json={"version": version})
    if request.url.path == "/v1/models":
        card: dict[str, object] = {"id": model}
        if max_model_len is not None:
            card["max_model_len"] = max_model_len
        return httpx.Response(200, json={"data": [card]})
    return None


def answering(text: str, *cuts: int) -> Callable[[httpx.Request], httpx.Response]:
    """A handler that answers discovery as vLLM 0.11 serving ``tiny``, and every chat or
    completion request with ``text``: whole, or streamed in pieces cut at ``cuts``.

    Args:
        text: The answer (e.g. ``"<think>a thought</think>Hello"``).
        *cuts: Where the streamed pieces end (offsets into ``text``, ascending).

    Returns:
        The handler, for ``httpx.MockTransport``.
    """
    ends = [*cuts, len(text)]
    pieces = [text[start:end] for start, end in zip([0, *cuts], ends, strict=True)]

    def answer(request: httpx.Request) -> httpx.Response:
        if (found := discovery(request, version="0.11.0")) is not None:
            return found
        if json.loads(request.content).get("stream"):
            last = len(pieces) - 1
            events = [
                {
                    "id": "c",
                    "model": "tiny",
                    "choices": [
                        {"index": 0, "delta": {"content": c}, "finish_reason": "stop" if i == last else None}
                    ],
                }
                for i, c in enumerate(pieces)
            ]
            body = b"".join(f"data: {json.dumps(e)}\n\n".encode() for e in events) + b"data: [DONE]\n\n"
            return httpx.Response(200, content=body, headers={"content-type": "text/event-stream"})
        message = {"role": "assistant", "content": text}
        choice = {"index": 0, "message": message, "finish_reason": "stop"}
        return httpx.Response(200, json={"id": "c", "model": "tiny", "choices": [choice]})

    return answer


__all__ = ["answering", "discovery"]
