"""The SGLang DSL through unillm: ``sgl.gen`` keeps the answer as the variable and the thought
in its meta info under SGLang's own name, ``reasoning_content`` (whole and streamed)."""

from __future__ import annotations

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
from unillm.testing.mock_answers import answering  # noqa: E402

ANSWER = "<think>a greeting</think>Hello"


answer = answering(ANSWER, 12)


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
