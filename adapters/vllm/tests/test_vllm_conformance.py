"""vLLM passes unillm's adapter conformance kit: canned answers in vLLM 0.32's OpenAI-server layout
(every status), then the same checks with answers recorded from the real vLLM server (engine tests).
"""

from __future__ import annotations

import json

import httpx
import pytest
from unillm_vllm import VLLMAdapter

from unillm.adapter.base import EngineInfo
from unillm.options import make_request
from unillm.testing.conformance import (
    ERROR_STATUSES,
    AdapterConformance,
    delta_chunk,
    hello_stream,
    sse_payloads,
)
from unillm.testing.engines import RunningEngine

MODEL = "/models/tiny"


def _chunk(content: str | None, finish: str | None = None) -> str:
    return delta_chunk("chatcmpl-1", MODEL, {} if content is None else {"content": content}, finish)


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
    "id": "cmpl-1",
    "object": "text_completion",
    "created": 1,
    "model": MODEL,
    "choices": [
        {
            "index": 0,
            "text": " the sea",
            "logprobs": None,
            "finish_reason": "length",
            "stop_reason": None,
            "prompt_logprobs": None,
        }
    ],
    "usage": {"prompt_tokens": 2, "total_tokens": 4, "completion_tokens": 2},
}
ERROR_BODIES = {
    status: json.dumps({"error": {"message": message, "type": kind, "param": None, "code": status}}).encode()
    for status, (kind, message) in _ERRORS.items()
}


class TestVLLMConformance(AdapterConformance):
    adapter = VLLMAdapter()
    info = EngineInfo(engine="vllm", model=MODEL, version="0.32.0", max_model_len=512)
    answer_body = ANSWER
    answer_text = " the sea"
    stream_events = (
        delta_chunk("chatcmpl-1", MODEL, {"role": "assistant", "content": ""}),
        *hello_stream(_chunk, "chatcmpl-1", MODEL),
    )
    stream_text = "Hello"
    error_bodies = ERROR_BODIES
    capability_versions = (None, "0.32.0", "0.9.2", "0.5.4")


assert set(_ERRORS) == set(ERROR_STATUSES)


# -- the same checks fed with answers recorded now from the real vLLM (the session's server) ------
CHAT_HI = [{"role": "user", "content": "Hi"}]


@pytest.fixture(scope="module")
def live(vllm_server: RunningEngine) -> TestVLLMConformance:
    """The kit with vLLM's own answers: a greedy chat answer, its stream, and real error bodies."""
    adapter = VLLMAdapter()
    headers = {"Authorization": f"Bearer {vllm_server.api_key}"}
    with httpx.Client(base_url=vllm_server.base_url, headers=headers, timeout=120) as http:
        answers = {name: http.get(call.path).json() for name, call in adapter.discovery().items()}
        info = adapter.parse_info(answers, "tiny")
        options = {"max_tokens": 8, "temperature": 0.0}
        request = make_request(None, CHAT_HI, None, options, stream=False)
        stream_request = make_request(None, CHAT_HI, None, options, stream=True)
        call, stream_call = adapter.build(request, info), adapter.build(stream_request, info)
        answer = http.post(call.path, json=call.json).raise_for_status().json()
        streamed = http.post(stream_call.path, json=stream_call.json).raise_for_status().text
        errors = {
            400: http.post("/v1/completions", json={"model": "tiny", "prompt": "Hi", "max_tokens": -1}),
            401: http.post(call.path, json=call.json, headers={"Authorization": "Bearer wrong"}),
            404: http.post("/v1/completions", json={"model": "nope", "prompt": "Hi"}),
        }
    assert {status: r.status_code for status, r in errors.items()} == {400: 400, 401: 401, 404: 404}
    text = answer["choices"][0]["message"]["content"]  # read directly, not through the adapter
    assert text, "vLLM answered no text"
    kit = type(
        "LiveVLLMConformance",
        (TestVLLMConformance,),
        {
            "info": info,
            "answer_request": request,
            "answer_body": answer,
            "answer_text": text,
            "stream_request": stream_request,
            "stream_events": sse_payloads(streamed),
            "stream_text": text,  # greedy: the stream spells the same answer
            "error_bodies": {status: r.content for status, r in errors.items()},
        },
    )
    live: TestVLLMConformance = kit()
    return live


def test_real_vllm_answer_parses(live: TestVLLMConformance) -> None:
    live.test_parses_the_canned_answer()


def test_real_vllm_stream_decodes_to_the_same_greedy_answer(live: TestVLLMConformance) -> None:
    live.test_decodes_the_canned_stream()


@pytest.mark.parametrize("status", [400, 401, 404])
def test_real_vllm_errors_map_to_typed_errors(live: TestVLLMConformance, status: int) -> None:
    live.test_maps_error_answers_to_typed_errors(status)


def test_real_vllm_answers_need_no_io_to_translate(live: TestVLLMConformance) -> None:
    live.test_translation_does_no_io()
