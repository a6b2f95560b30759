"""The SGLang DSL through unillm: ``sgl.gen`` keeps the answer as the variable and the thought
in its meta info under SGLang's own name, ``reasoning_content`` (whole and streamed)."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

sgl = pytest.importorskip(
    "sglang",
    reason="SGLang's DSL frontend is not installed: pip install "
    "'unillm-sglang[dsl]' (this adapter's dev extra; ./run setup installs it)",
)
from unillm_sglang.dsl import UnillmBackend  # noqa: E402

import unillm  # noqa: E402

ANSWER = "<think>a greeting</think>Hello"


def answer(request: httpx.Request) -> httpx.Response:
    if request.url.path == "/version":
        return httpx.Response(200, json={"version": "0.11.0"})
    if request.url.path == "/v1/models":
        return httpx.Response(200, json={"data": [{"id": "tiny", "max_model_len": 512}]})
    if json.loads(request.content).get("stream"):
        events = [
            {
                "id": "c",
                "model": "tiny",
                "choices": [{"index": 0, "delta": {"content": c}, "finish_reason": f}],
            }
            for c, f in ((ANSWER[:12], None), (ANSWER[12:], "stop"))
        ]
        body = b"".join(f"data: {json.dumps(e)}\n\n".encode() for e in events) + b"data: [DONE]\n\n"
        return httpx.Response(200, content=body, headers={"content-type": "text/event-stream"})
    message = {"role": "assistant", "content": ANSWER}
    return httpx.Response(
        200,
        json={
            "id": "c",
            "model": "tiny",
            "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
        },
    )


@sgl.function
def greet(s: Any) -> None:
    s += sgl.user("Hi")
    s += sgl.assistant(sgl.gen("answer", max_tokens=16))


def backend() -> UnillmBackend:
    llm = unillm.LLM("vllm", "http://engine.invalid", http_transport=httpx.MockTransport(answer))
    return UnillmBackend(llm.blocking())


def test_gen_keeps_the_answer_and_puts_the_thought_in_the_meta_info() -> None:
    with backend() as b:
        state = greet.run(backend=b)
        assert (state["answer"], state.get_meta_info("answer")["reasoning_content"]) == (
            "Hello",
            "a greeting",
        )


def test_a_streamed_gen_joins_the_thought_in_the_meta_info() -> None:
    with backend() as b:
        state = greet.run(backend=b, stream=True)
        "".join(state.text_iter("answer"))
        assert (state["answer"], state.get_meta_info("answer")["reasoning_content"]) == (
            "Hello",
            "a greeting",
        )
