"""Bad caller input is refused before sending, as InvalidOptions saying what is wrong (issue 16).

Base URLs are parsed at connect (defect 10); constraints, sampling values, timeouts, connect
arguments, fleet tuning and message keys are checked before anything is sent (defect 15).
"""

from __future__ import annotations

import math
from typing import Any

import httpx
import pytest

import unillm
from unillm.fleet.picker import Backoff

pytestmark = pytest.mark.anyio


def never_called(request: httpx.Request) -> httpx.Response:
    raise AssertionError(f"nothing should be sent, but {request.method} {request.url.path} was")


def offline() -> unillm.LLM:
    """An LLM whose transport fails the test if anything is sent."""
    return unillm.LLM(
        "vllm", "http://127.0.0.1:9", model="m", http_transport=httpx.MockTransport(never_called)
    )


# -- base URLs (defect 10) --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("http://h:99999", "1-65535"),
        ("http://h:0", "1-65535"),
        ("http://h:abc", "not a valid URL"),
        ("http://[::1", "not a valid URL"),
        ("http://h\n:8000", "control character"),
        ("http://h:8000\n", "control character"),
        ("http://gpu 1:8000", "whitespace"),
        ("http://", "no host"),
        ("https://", "no host"),
        ("http://h:8000?x=1", "query"),
        ("http://h:8000/#top", "fragment"),
    ],
)
def test_a_malformed_base_url_is_refused_at_connect(url: str, says: str) -> None:
    with pytest.raises(unillm.InvalidOptions, match=says):
        unillm.connect("vllm", url)


def test_a_malformed_replica_url_is_refused_at_fleet_connect() -> None:
    with pytest.raises(unillm.InvalidOptions, match="1-65535"):
        unillm.connect("vllm", ["http://127.0.0.1:8000", "http://h:99999"])


@pytest.mark.parametrize("url", ["http://127.0.0.1:8000", "https://[::1]:8443/v1", "http://gpu-1/prefix"])
def test_a_well_formed_base_url_is_accepted(url: str) -> None:
    assert unillm.connect("vllm", url).base_url == url.removesuffix("/v1")


# -- constraints and sampling values -----------------------------------------------------------------


@pytest.mark.parametrize("pattern", [123, None, ""])
def test_a_regex_that_is_not_a_pattern_string_is_refused(pattern: Any) -> None:
    with pytest.raises(unillm.InvalidOptions, match="Regex"):
        unillm.Regex(pattern)


@pytest.mark.parametrize("text", [None, 5, "", "  "])
def test_a_grammar_without_text_is_refused(text: Any) -> None:
    with pytest.raises(unillm.InvalidOptions, match="Grammar needs"):
        unillm.Grammar(text)


def test_a_grammar_of_an_unknown_syntax_is_refused() -> None:
    with pytest.raises(unillm.InvalidOptions, match="ebnf"):
        unillm.Grammar('root ::= "a"', syntax="peg")  # type: ignore[arg-type]


async def test_a_negative_top_k_other_than_minus_one_is_refused_before_sending() -> None:
    with pytest.raises(unillm.InvalidOptions, match="top_k"):
        await offline().generate("hi", top_k=-5)


@pytest.mark.parametrize("top_k", [-1, 0, 40])
def test_top_k_of_minus_one_zero_or_positive_is_accepted(top_k: int) -> None:
    from unillm.options import make_request

    assert make_request("hi", None, None, {"top_k": top_k}, stream=False).top_k == top_k


# -- timeouts of tokenize and embed ------------------------------------------------------------------


@pytest.mark.parametrize("timeout", [-1, 0, math.nan, math.inf, "10", True])
async def test_a_bad_tokenize_timeout_is_refused_before_sending(timeout: Any) -> None:
    with pytest.raises(unillm.InvalidOptions, match="timeout"):
        await offline().tokenize("hi", timeout=timeout)


@pytest.mark.parametrize("timeout", [-1, 0, math.nan, math.inf, "10", True])
async def test_a_bad_embed_timeout_is_refused_before_sending(timeout: Any) -> None:
    with pytest.raises(unillm.InvalidOptions, match="timeout"):
        await offline().embed("hi", timeout=timeout)


# -- connect arguments --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argument", "value", "says"),
    [
        ("timeouts", 10, "unillm.Timeouts"),
        ("pool", 5, "unillm.Pool"),
        ("retry", 3, "unillm.RetryPolicy"),
        ("defaults", 5, "defaults must be a mapping"),
        ("defaults", "max_tokens=5", "defaults must be a mapping"),
        ("api_key", 123, "api_key must be a string"),
    ],
)
def test_a_connect_argument_of_the_wrong_kind_is_refused(argument: str, value: Any, says: str) -> None:
    with pytest.raises(unillm.InvalidOptions, match=says):
        unillm.connect("vllm", "http://127.0.0.1:9", **{argument: value})


@pytest.mark.parametrize(("argument", "value"), [("timeouts", 10), ("pool", 5), ("defaults", 5)])
def test_a_fleet_connect_argument_of_the_wrong_kind_is_refused(argument: str, value: Any) -> None:
    with pytest.raises(unillm.InvalidOptions, match=argument):
        unillm.connect("vllm", ["http://127.0.0.1:9", "http://127.0.0.1:10"], **{argument: value})


# -- fleet tuning -------------------------------------------------------------------------------------


def two_replicas() -> list[unillm.LLM]:
    return [unillm.connect("vllm", "http://127.0.0.1:9"), unillm.connect("vllm", "http://127.0.0.1:10")]


@pytest.mark.parametrize("value", ["x", None, 0.5, math.nan, True])
def test_a_bad_load_factor_is_refused(value: Any) -> None:
    with pytest.raises(unillm.InvalidOptions, match="load_factor"):
        unillm.Fleet(two_replicas(), load_factor=value)


@pytest.mark.parametrize("value", [-1, math.inf, "1"])
def test_a_bad_metrics_interval_is_refused(value: Any) -> None:
    with pytest.raises(unillm.InvalidOptions, match="metrics_interval"):
        unillm.Fleet(two_replicas(), metrics_interval=value)


@pytest.mark.parametrize("backoff", [Backoff(-1), Backoff(0), Backoff(5, 1), Backoff(math.nan), 3])
@pytest.mark.parametrize("argument", ["cooldown", "ejection"])
def test_a_bad_backoff_is_refused(argument: str, backoff: Any) -> None:
    with pytest.raises(unillm.InvalidOptions, match=argument):
        unillm.Fleet(two_replicas(), **{argument: backoff})


def test_a_metrics_interval_of_zero_reads_queues_before_every_pick() -> None:
    assert unillm.Fleet(two_replicas(), metrics_interval=0).metrics_interval == 0


# -- messages -----------------------------------------------------------------------------------------


async def test_an_unknown_message_key_is_refused_before_sending() -> None:
    with pytest.raises(unillm.InvalidOptions, match="'contnet'"):
        await offline().generate(messages=[{"role": "user", "content": "hi", "contnet": "typo"}])


async def test_a_message_name_that_is_not_a_string_is_refused() -> None:
    with pytest.raises(unillm.InvalidOptions, match="name must be a string"):
        await offline().generate(messages=[{"role": "user", "content": "hi", "name": 5}])
