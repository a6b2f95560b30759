"""Capabilities: what a request uses, and refusing what an engine cannot honour (pure)."""

from __future__ import annotations

from typing import Any

import pytest

from unillm.capabilities import (
    NATIVE,
    Capabilities,
    Feature,
    Support,
    check,
    features_of,
    unsupported,
)
from unillm.errors import UnsupportedFeature
from unillm.options import Choice, Grammar, JsonSchema, Regex, Request, make_request

CHAT = [{"role": "user", "content": "hi"}]

TOY = Capabilities(
    engine="toy",
    version="1.2.3",
    features={
        Feature.COMPLETION: NATIVE,
        Feature.STREAM: NATIVE,
        Feature.CHOICE: Support(level="emulated", why="via regex alternation"),
        Feature.REGEX: unsupported("the toy engine has no regex decoder", "Use output=Choice([...])"),
    },
)


def req(output: Any = None, *, stream: bool = False, chat: bool = False, **options: Any) -> Request:
    if chat:
        return make_request(None, CHAT, output, options, stream=stream)
    return make_request("Hi", None, output, options, stream=stream)


# -- check() ---------------------------------------------------------------------------------


def test_check_passes_a_supported_request() -> None:
    check(TOY, req(stream=True))


def test_check_passes_an_emulated_feature() -> None:
    check(TOY, req(Choice(["a", "b"])))
    assert TOY.supports(Feature.CHOICE)


def test_check_refuses_an_unsupported_feature() -> None:
    with pytest.raises(UnsupportedFeature) as info:
        check(TOY, req(Regex(r"\d+")))
    e = info.value
    assert (e.engine, e.version, e.feature) == ("toy", "1.2.3", Feature.REGEX.value)
    assert e.why == "the toy engine has no regex decoder"
    assert e.alternative == "Use output=Choice([...])"


def test_unsupported_message_names_engine_version_feature_and_alternative() -> None:
    with pytest.raises(UnsupportedFeature) as info:
        check(TOY, req(Regex(r"\d+")))
    message = str(info.value)
    for part in ("toy", "1.2.3", "output=Regex", "no regex decoder", "Use output=Choice"):
        assert part in message


@pytest.mark.parametrize(
    ("request_", "feature"),
    [
        (req(chat=True), Feature.CHAT),
        (req(JsonSchema({"type": "object"})), Feature.JSON_SCHEMA),
        (req(Grammar('root ::= "a"')), Feature.GRAMMAR),
        (req(lora="sql"), Feature.LORA),
        (req(n=2), Feature.N),
        (req(top_k=5), Feature.TOP_K),
        (req(seed=1), Feature.SEED),
        (req(stop="x"), Feature.STOP),
        (req(logprobs=True), Feature.LOGPROBS),
    ],
)
def test_check_refuses_an_undeclared_feature(request_: Request, feature: Feature) -> None:
    with pytest.raises(UnsupportedFeature) as info:
        check(TOY, request_)
    assert info.value.feature == feature.value
    assert "not declared" in info.value.why


def test_support_of_an_undeclared_feature_is_no() -> None:
    assert TOY.support(Feature.GRAMMAR).level == "no"
    assert not TOY.supports(Feature.GRAMMAR)


def test_require_without_version_names_only_the_engine() -> None:
    caps = Capabilities(engine="toy", features={})
    with pytest.raises(UnsupportedFeature, match=r"^toy cannot honour streaming"):
        caps.require(Feature.STREAM)


def test_check_refuses_before_checking_later_features() -> None:
    # The first unsupported feature in request order is reported.
    with pytest.raises(UnsupportedFeature) as info:
        check(TOY, req(Regex("a"), top_k=3))
    assert info.value.feature == Feature.REGEX.value


# -- features_of() ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("request_", "features"),
    [
        (req(), [Feature.COMPLETION]),
        (req(chat=True), [Feature.CHAT]),
        (req(stream=True), [Feature.COMPLETION, Feature.STREAM]),
        (req(chat=True, stream=True), [Feature.CHAT, Feature.STREAM]),
        (req({"type": "object"}), [Feature.COMPLETION, Feature.JSON_SCHEMA]),
        (req(Regex("a")), [Feature.COMPLETION, Feature.REGEX]),
        (req(Choice(["a"])), [Feature.COMPLETION, Feature.CHOICE]),
        (req(Grammar('root ::= "a"')), [Feature.COMPLETION, Feature.GRAMMAR]),
        (req(Grammar('start: "a"', syntax="lark")), [Feature.COMPLETION, Feature.GRAMMAR_LARK]),
        (req(lora="sql"), [Feature.COMPLETION, Feature.LORA]),
        (req(n=1), [Feature.COMPLETION]),
        (req(n=3), [Feature.COMPLETION, Feature.N]),
        (req(top_k=5), [Feature.COMPLETION, Feature.TOP_K]),
        (req(min_p=0.1), [Feature.COMPLETION, Feature.MIN_P]),
        (req(seed=42), [Feature.COMPLETION, Feature.SEED]),
        (req(stop=["x"]), [Feature.COMPLETION, Feature.STOP]),
        (req(repetition_penalty=1.1), [Feature.COMPLETION, Feature.REPETITION_PENALTY]),
        (req(presence_penalty=0.5), [Feature.COMPLETION, Feature.PRESENCE_PENALTY]),
        (req(frequency_penalty=0.5), [Feature.COMPLETION, Feature.FREQUENCY_PENALTY]),
        (req(logprobs=True), [Feature.COMPLETION, Feature.LOGPROBS]),
        (req(top_logprobs=2), [Feature.COMPLETION, Feature.LOGPROBS]),
        (req(logprobs=False), [Feature.COMPLETION]),
        (req(max_tokens=8, temperature=0.5, top_p=0.9, timeout=3), [Feature.COMPLETION]),
    ],
)
def test_features_of_lists_what_a_request_uses(request_: Request, features: list[Feature]) -> None:
    assert features_of(request_) == features


@pytest.mark.parametrize(
    ("option", "feature"),
    [
        ("seed", Feature.SEED),
        ("top_k", Feature.TOP_K),
    ],
)
def test_features_of_counts_a_zero_value_as_used(option: str, feature: Feature) -> None:
    # seed=0 is a real seed and top_k=0 a real setting: an engine without them must refuse.
    options: dict[str, Any] = {option: 0}
    assert feature in features_of(req(**options))


def test_features_of_everything_at_once() -> None:
    r = req(
        Regex("a"),
        chat=True,
        stream=True,
        lora="x",
        n=2,
        top_k=1,
        min_p=0.1,
        seed=1,
        stop="s",
        repetition_penalty=1.1,
        presence_penalty=0.1,
        frequency_penalty=0.1,
        logprobs=True,
    )
    assert set(features_of(r)) == {
        Feature.CHAT,
        Feature.STREAM,
        Feature.REGEX,
        Feature.LORA,
        Feature.N,
        Feature.TOP_K,
        Feature.MIN_P,
        Feature.SEED,
        Feature.STOP,
        Feature.REPETITION_PENALTY,
        Feature.PRESENCE_PENALTY,
        Feature.FREQUENCY_PENALTY,
        Feature.LOGPROBS,
    }


def test_capabilities_are_frozen() -> None:
    with pytest.raises(ValueError, match="frozen"):
        TOY.engine = "other"  # type: ignore[misc]
