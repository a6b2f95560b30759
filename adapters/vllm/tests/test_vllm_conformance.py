"""vLLM passes unillm's adapter conformance kit (canned answers in vLLM 0.32's OpenAI-server layout)."""

from __future__ import annotations

import json

from unillm_vllm import VLLMAdapter

from unillm.adapter import EngineInfo
from unillm.testing.conformance import ERROR_STATUSES, AdapterConformance

MODEL = "/models/tiny"


def _chunk(content: str | None, finish: str | None = None) -> str:
    delta = {} if content is None else {"content": content}
    return json.dumps({"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": MODEL,
                       "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]})


# vLLM's error layout (FastAPI's {"detail": ...} only for unknown routes).
_ERRORS = {
    400: ("BadRequestError", "max_tokens must be at least 1, got 0."),
    401: ("Unauthorized", "Unauthorized"),
    403: ("Forbidden", "Forbidden"),
    404: ("NotFoundError", "The model `nope` does not exist."),
    422: ("BadRequestError", "1 validation error: temperature must be a number"),
    429: ("TooManyRequests", "Too many requests"),
    500: ("InternalServerError", "EngineCore encountered an issue"),
    502: ("BadGateway", "Bad Gateway"),
    503: ("ServiceUnavailableError", "The engine is sleeping"),
}


ANSWER = {
    "id": "cmpl-1", "object": "text_completion", "created": 1, "model": MODEL,
    "choices": [{"index": 0, "text": " the sea", "logprobs": None, "finish_reason": "length",
                 "stop_reason": None, "prompt_logprobs": None}],
    "usage": {"prompt_tokens": 2, "total_tokens": 4, "completion_tokens": 2},
}
ERROR_BODIES = {status: json.dumps({"error": {"message": message, "type": kind, "param": None,
                                              "code": status}}).encode()
                for status, (kind, message) in _ERRORS.items()}


class TestVLLMConformance(AdapterConformance):
    adapter = VLLMAdapter()
    info = EngineInfo(engine="vllm", model=MODEL, version="0.32.0", max_model_len=512)
    answer_body = ANSWER
    answer_text = " the sea"
    stream_events = (
        json.dumps({"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": MODEL,
                    "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""},
                                 "logprobs": None, "finish_reason": None}]}),
        _chunk("Hel"), _chunk("lo"), _chunk(None, "length"),
        json.dumps({"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": MODEL,
                    "choices": [], "usage": {"prompt_tokens": 9, "total_tokens": 11,
                                             "completion_tokens": 2}}),
        "[DONE]",
    )
    stream_text = "Hello"
    error_bodies = ERROR_BODIES
    capability_versions = (None, "0.32.0", "0.9.2", "0.5.4")


assert set(_ERRORS) == set(ERROR_STATUSES)
