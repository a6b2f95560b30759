"""SGLang passes unillm's adapter conformance kit (canned answers in SGLang 0.5's OpenAI-API layout)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from types import MappingProxyType
from typing import Any, ClassVar

from unillm_sglang import SGLangAdapter, SGLangInfo

from unillm.options import make_request
from unillm.testing.conformance import ERROR_STATUSES, AdapterConformance, delta_chunk, hello_stream

MODEL = "org/base-model"


def _chunk(content: str | None, finish: str | None = None) -> str:
    delta = {"role": "assistant", "content": content}
    return delta_chunk("c1", MODEL, delta, finish, choice={"matched_stop": None}, top={"usage": None})


# SGLang's ErrorResponse: {"object": "error", "message": ..., "type": ..., "param": null, "code": N}.
_ERRORS = {
    400: "Requested token count exceeds the model's maximum context length",
    401: "Unauthorized",
    403: "Forbidden",
    404: "The model `nope` does not exist.",
    422: "max_tokens: Input should be a valid integer",
    429: "The request queue is full.",
    500: "Internal server error",
    502: "Bad Gateway",
    503: "The server is draining",
}


ANSWER = {
    "id": "c0",
    "object": "text_completion",
    "created": 1,
    "model": MODEL,
    "choices": [
        {"index": 0, "text": " the sea", "logprobs": None, "finish_reason": "length", "matched_stop": None}
    ],
    "usage": {"prompt_tokens": 2, "total_tokens": 4, "completion_tokens": 2, "prompt_tokens_details": None},
}
ERROR_BODIES = {
    status: json.dumps(
        {"object": "error", "message": message, "type": "Error", "param": None, "code": status}
    ).encode()
    for status, message in _ERRORS.items()
}


class TestSGLangConformance(AdapterConformance):
    answer_body: ClassVar[Any]
    stream_events: ClassVar[Sequence[str]]

    adapter = SGLangAdapter()
    info = SGLangInfo(
        engine="sglang", model=MODEL, version="0.5.23", served_names=(MODEL,), lora_enabled=True
    )
    answer_body = ANSWER
    answer_text = " the sea"
    stream_events = hello_stream(_chunk, "c1", MODEL)
    stream_text = "Hello"
    error_bodies = ERROR_BODIES
    capability_versions = (None, "0.5.23", "0.4.9", "0.3.6")
    unchanged_launch_settings = MappingProxyType(
        {"prefix_caching=True": "SGLang's RadixAttention caches prefixes by default"}
    )


assert set(_ERRORS) == set(ERROR_STATUSES)


def _native_event(text: str, tokens: int, finish: dict[str, object] | None = None) -> str:
    return json.dumps(
        {
            "text": text,
            "output_ids": list(range(tokens)),
            "meta_info": {
                "id": "r1",
                "prompt_tokens": 2,
                "completion_tokens": tokens,
                "finish_reason": finish,
            },
        }
    )


NATIVE_ANSWER = {
    "text": " the sea",
    "output_ids": [5, 6],
    "meta_info": {
        "id": "r0",
        "prompt_tokens": 2,
        "completion_tokens": 2,
        "finish_reason": {"type": "length", "length": 2},
    },
}


class TestSGLangNativeConformance(TestSGLangConformance):
    """The same checks through SGLang's native /generate route (cumulative stream text)."""

    adapter = SGLangAdapter("native")
    answer_body = NATIVE_ANSWER
    stream_request = make_request("Hi", None, None, {"max_tokens": 8}, stream=True)
    refused_requests = MappingProxyType(
        {kind: "/generate takes a rendered prompt, not messages" for kind in ("chat", "chat-stream")}
    )
    stream_events = (
        _native_event("Hel", 1),
        _native_event("Hello", 2, {"type": "stop", "matched": 2}),
        "[DONE]",
    )
