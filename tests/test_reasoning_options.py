"""Thinking options: ``thinking`` goes to the chat template (``enable_thinking``), a thinking
budget and ``reasoning_effort`` to the engines that read them; elsewhere, and on a plain prompt,
they are refused before anything is sent."""

from __future__ import annotations

from typing import Any

import pytest

import unillm
from unillm.adapter import get_adapter
from unillm.adapter.base import EngineInfo
from unillm.options import make_request

CHAT = [{"role": "user", "content": "2+2?"}]


def body(engine: str, **options: Any) -> dict[str, Any]:
    request = make_request(None, CHAT, None, options, stream=False)
    call = get_adapter(engine).build(request, EngineInfo(engine=engine, model="m"))
    assert call.json is not None
    return dict(call.json)


@pytest.mark.parametrize("engine", ["vllm", "sglang", "mlx"])
def test_thinking_off_goes_to_the_chat_template(engine: str) -> None:
    assert body(engine, thinking=False)["chat_template_kwargs"] == {"enable_thinking": False}


def test_vllm_takes_a_thinking_budget_and_a_reasoning_effort() -> None:
    sent = body("vllm", thinking_budget=64, reasoning_effort="low")
    assert (sent["thinking_token_budget"], sent["reasoning_effort"]) == (64, "low")


@pytest.mark.parametrize(
    ("engine", "option"),
    [("sglang", "thinking_budget"), ("llamacpp", "thinking_budget"), ("tgi", "thinking")],
)
def test_an_option_the_engine_cannot_read_is_refused_before_sending(engine: str, option: str) -> None:
    value = 64 if option == "thinking_budget" else True
    with pytest.raises(unillm.UnsupportedFeature, match=option):
        body(engine, **{option: value})


def test_llamacpp_lets_a_model_think_but_cannot_stop_it() -> None:
    """llama-cpp-python takes no per-request template arguments: thinking=True sends nothing (the
    template thinks as by default, a constraint leaves room for it), thinking=False is refused."""
    assert body("llamacpp", thinking=True) == body("llamacpp")
    with pytest.raises(unillm.UnsupportedFeature, match="thinking"):
        body("llamacpp", thinking=False)


def test_thinking_options_on_a_plain_prompt_are_refused() -> None:
    with pytest.raises(unillm.InvalidOptions, match="chat template"):
        make_request("2+2?", None, None, {"thinking": True}, stream=False)


def test_an_unknown_reasoning_effort_is_refused() -> None:
    with pytest.raises(unillm.InvalidOptions, match="reasoning_effort"):
        make_request(None, CHAT, None, {"reasoning_effort": "extreme"}, stream=False)


def test_a_negative_thinking_budget_is_refused() -> None:
    with pytest.raises(unillm.InvalidOptions, match="thinking_budget"):
        make_request(None, CHAT, None, {"thinking_budget": -1}, stream=False)
