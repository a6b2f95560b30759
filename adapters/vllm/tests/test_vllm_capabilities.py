"""vLLM's capability table: which versions honour which options (pure, no engine)."""

from __future__ import annotations

from typing import Any

import pytest
from unillm_vllm import VLLMAdapter

from unillm.capabilities import Feature, check
from unillm.errors import UnsupportedFeature
from unillm.options import Choice, Grammar, JsonSchema, Regex, Request, make_request

CHAT = [{"role": "user", "content": "hi"}]


def req(output: Any = None, *, stream: bool = False, chat: bool = False, **options: Any) -> Request:
    if chat:
        return make_request(None, CHAT, output, options, stream=stream)
    return make_request("Hi", None, output, options, stream=stream)


CONSTRAINTS = [
    JsonSchema({"type": "object"}),
    Regex("a+"),
    Choice(["a", "b"]),
    Grammar('root ::= "a"'),
    Grammar('start: "a"', syntax="lark"),
]


@pytest.mark.parametrize("output", CONSTRAINTS)
@pytest.mark.parametrize("version", ["0.5.4", "0.4.0", "0.5.5.post1"])
def test_vllm_before_0_6_refuses_output_constraints(version: str, output: Any) -> None:
    caps = VLLMAdapter().capabilities(version)
    with pytest.raises(UnsupportedFeature) as info:
        check(caps, req(output))
    e = info.value
    assert (e.engine, e.version) == ("vllm", version)
    assert "0.6" in str(e)
    assert e.alternative == "Upgrade vLLM"


@pytest.mark.parametrize("version", ["0.5.4", "0.6.0", "0.32.0"])
def test_vllm_of_any_version_accepts_unconstrained_requests(version: str) -> None:
    check(
        VLLMAdapter().capabilities(version),
        req(chat=True, stream=True, top_k=5, seed=1, n=2, lora="sql", logprobs=True),
    )


@pytest.mark.parametrize("output", CONSTRAINTS)
@pytest.mark.parametrize("version", ["0.6.0", "0.9.2", "0.32.0", "0.32.0+cpu", None])
def test_vllm_from_0_6_accepts_output_constraints(version: str | None, output: Any) -> None:
    check(VLLMAdapter().capabilities(version), req(output))


def test_vllm_declares_every_feature_at_current_versions() -> None:
    caps = VLLMAdapter().capabilities("0.32.0")
    assert [f for f in Feature if not caps.supports(f)] == []
