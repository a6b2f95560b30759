"""Retry-After has an upper bound: a hostile or broken engine cannot stop its callers for days.

Values beyond the cap count as the cap; non-finite, negative or garbled values and HTTP dates in
the past count as absent; a fleet replica that passes a health check is out of its cooldown.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from email.utils import format_datetime
from typing import Any

import anyio
import pytest

import unillm
from unillm import Backoff, Fleet, RetryPolicy, Timeouts
from unillm.client.transport import MAX_RETRY_AFTER, retry_after_seconds
from unillm.fleet.picker import ReplicaPicker
from unillm.testing.fault_server import FaultServer

FAST = Timeouts(connect=1, read=2)

pytestmark = pytest.mark.anyio


@pytest.fixture
def pair() -> Iterator[tuple[FaultServer, FaultServer]]:
    with FaultServer(model="tiny") as a, FaultServer(model="tiny") as b:
        yield a, b
        assert a.errors == b.errors == [], f"a fault server failed: {a.errors + b.errors}"


def _http_date(seconds_from_now: float) -> str:
    import datetime as dt

    return format_datetime(
        dt.datetime.now(dt.timezone.utc) + dt.timedelta(seconds=seconds_from_now), usegmt=True
    )


# -- parsing -----------------------------------------------------------------------------------
def test_a_huge_retry_after_is_capped() -> None:
    assert retry_after_seconds("999999") == MAX_RETRY_AFTER


def test_the_cap_is_a_bounded_number_of_minutes() -> None:
    assert 0 < MAX_RETRY_AFTER <= 3600


@pytest.mark.parametrize("value", ["1e999", "inf", "-inf", "nan", "-5", "soon", "", "Wed, 99 Foo 2015"])
def test_non_finite_negative_or_garbled_retry_after_counts_as_absent(value: str) -> None:
    assert retry_after_seconds(value) is None


def test_an_http_date_in_the_past_counts_as_absent() -> None:
    assert retry_after_seconds("Wed, 21 Oct 2015 07:28:00 GMT") is None


def test_an_http_date_far_in_the_future_is_capped() -> None:
    assert retry_after_seconds(_http_date(10 * 86400)) == MAX_RETRY_AFTER


def test_an_ordinary_retry_after_is_kept() -> None:
    assert retry_after_seconds("7") == 7.0


# -- the fleet's router --------------------------------------------------------------------------
def test_a_router_cools_a_replica_at_most_max_retry_after() -> None:
    router = ReplicaPicker(["http://a:1", "http://b:1"], max_retry_after=60)
    router.overloaded(0, 999999.0, now=0.0)
    assert router.replicas[0].cooling_until == 60.0


def test_a_router_treats_an_infinite_retry_after_as_absent() -> None:
    router = ReplicaPicker(["http://a:1"], cooldown=Backoff(0.5, 30.0))
    router.overloaded(0, math.inf, now=0.0)
    assert router.replicas[0].cooling_until == 0.5  # its own backoff only


@pytest.mark.parametrize("bad", [-1, math.inf, math.nan, "60", True])
def test_a_bad_max_retry_after_is_refused(bad: Any) -> None:
    with pytest.raises(unillm.InvalidOptions, match="max_retry_after"):
        ReplicaPicker(["http://a:1"], max_retry_after=bad)


def test_a_recovered_replica_is_out_of_its_cooldown() -> None:
    router = ReplicaPicker(["http://a:1"])
    router.overloaded(0, 100.0, now=0.0)
    router.recovered(0)
    assert router.replicas[0].state(now=1.0) == "healthy"


# -- a fleet -----------------------------------------------------------------------------------
def fleet_of(servers: tuple[FaultServer, ...], **kwargs: Any) -> Fleet:
    return Fleet([unillm.connect("vllm", s.url, timeouts=FAST) for s in servers], **kwargs)


async def test_a_fleet_replica_answering_retry_after_999999_cools_at_most_the_cap(
    pair: tuple[FaultServer, FaultServer],
) -> None:
    a, _ = pair
    a.fail(429, times=1, retry_after="999999")
    async with fleet_of(pair) as fleet:
        await fleet.generate("hi", max_tokens=4)  # a: 429 -> b
        wait = fleet.stats().replica(a.url).available_in_s
    assert wait is not None and wait <= MAX_RETRY_AFTER


async def test_a_fleets_max_retry_after_is_settable(pair: tuple[FaultServer, FaultServer]) -> None:
    a, _ = pair
    a.fail(429, times=1, retry_after="999999")
    async with fleet_of(pair, max_retry_after=2.0) as fleet:
        await fleet.generate("hi", max_tokens=4)
        wait = fleet.stats().replica(a.url).available_in_s
    assert wait is not None and wait <= 2.0


async def test_every_replica_answering_infinite_retry_after_gives_a_finite_overloaded(
    pair: tuple[FaultServer, FaultServer],
) -> None:
    for s in pair:
        s.fail(429, retry_after="1e999")
    async with fleet_of(pair) as fleet:
        with pytest.raises(unillm.Overloaded) as caught:
            await fleet.generate("hi", max_tokens=4)
    assert caught.value.retry_after is not None and math.isfinite(caught.value.retry_after)


async def test_a_healthy_health_check_ends_a_replicas_cooldown(pair: tuple[FaultServer, FaultServer]) -> None:
    a, _ = pair
    a.fail(429, times=1, retry_after="120")
    async with fleet_of(pair) as fleet:
        await fleet.generate("hi", max_tokens=4)
        assert fleet.stats().replica(a.url).state == "cooling"
        assert await fleet.health() is True
        assert fleet.stats().replica(a.url).state == "healthy"


# -- one LLM -----------------------------------------------------------------------------------
async def test_an_llms_overloaded_retry_after_is_capped(pair: tuple[FaultServer, FaultServer]) -> None:
    a, _ = pair
    a.fail(429, retry_after="999999")
    async with unillm.connect("vllm", a.url, timeouts=FAST, retry=RetryPolicy(attempts=1)) as llm:
        with pytest.raises(unillm.Overloaded) as caught:
            await llm.generate("hi", max_tokens=4)
    assert caught.value.retry_after == MAX_RETRY_AFTER


async def test_an_llms_overloaded_with_infinite_retry_after_has_none(
    pair: tuple[FaultServer, FaultServer],
) -> None:
    a, _ = pair
    a.fail(429, retry_after="1e999")
    async with unillm.connect("vllm", a.url, timeouts=FAST, retry=RetryPolicy(attempts=1)) as llm:
        with pytest.raises(unillm.Overloaded) as caught:
            await llm.generate("hi", max_tokens=4)
    assert caught.value.retry_after is None


@pytest.mark.parametrize("value", ["999999", "1e999", "nan"])
async def test_an_llms_retry_waits_at_most_max_wait_whatever_retry_after_says(
    pair: tuple[FaultServer, FaultServer], value: str
) -> None:
    a, _ = pair
    a.fail(429, times=1, retry_after=value)
    retry = RetryPolicy(attempts=2, initial_wait=0.01, max_wait=0.05, max_total=5)
    async with unillm.connect("vllm", a.url, timeouts=FAST, retry=retry) as llm:
        with anyio.fail_after(10):  # a hang guard: the retry sleeps 0.05 s, not the header's value
            r = await llm.generate("hi", max_tokens=4)
    assert r.text and a.count() == 2
