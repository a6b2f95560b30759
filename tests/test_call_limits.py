"""Limits on a call: timeouts, the whole-call deadline, the connection pool, standard JSON, quiet retries.

Every test runs against the vLLM look-alike :class:`unillm.testing.fault_server.FaultServer` and
checks both the typed error and what reached (or did not reach) the server. No test asserts on
elapsed time.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from fault_helpers import PIECES, checked_server

import unillm
from unillm import Pool, RetryPolicy, Timeouts
from unillm.adapter.base import HttpCall
from unillm.client.transport import Transport
from unillm.testing.fault_server import FaultServer

TESTS = Path(__file__).parent

pytestmark = pytest.mark.anyio


@pytest.fixture
def server() -> Iterator[FaultServer]:
    yield from checked_server(model="tiny", pieces=PIECES)


def connect(url: str, **kw: Any) -> unillm.LLM:
    kw.setdefault("retry", RetryPolicy(attempts=3, initial_wait=0.01, max_wait=0.05, max_total=5))
    kw.setdefault("timeouts", Timeouts(connect=1, read=30))
    return unillm.connect("vllm", url, model="tiny", **kw)


async def wait_until_received(server: FaultServer, n: int) -> None:
    with anyio.fail_after(10):
        while server.count() < n:
            await anyio.sleep(0.01)


# -- timeouts that cannot work are refused, not blamed on the engine -----------------------------
@pytest.mark.parametrize("options", [{"timeout": 0}, {"timeout": -1.0}, {"deadline": 0}])
async def test_a_non_positive_timeout_is_refused_before_anything_is_sent(
    server: FaultServer, options: dict[str, Any]
) -> None:
    async with connect(server.url) as llm:
        await llm.info()
        with pytest.raises(unillm.InvalidOptions, match="positive number of seconds"):
            await llm.generate("hi", max_tokens=4, **options)
        with pytest.raises(unillm.InvalidOptions, match="positive number of seconds"):
            await llm.stream("hi", max_tokens=4, **options).collect()
    assert server.count() == 0


@pytest.mark.parametrize("timeouts", [{"read": 0}, {"connect": 0}, {"read": float("inf")}])
def test_client_timeouts_that_cannot_work_are_refused(timeouts: dict[str, float]) -> None:
    with pytest.raises(unillm.InvalidOptions, match="positive, finite number of seconds"):
        Timeouts(**timeouts)


# -- standard JSON only ------------------------------------------------------------------------
@pytest.mark.parametrize(
    "options",
    [
        {"temperature": float("inf")},
        {"top_p": float("nan")},
        {"extra_body": {"typical_p": float("inf")}},
    ],
)
async def test_non_finite_numbers_are_refused_and_never_sent(
    server: FaultServer, options: dict[str, Any]
) -> None:
    async with connect(server.url) as llm:
        await llm.info()
        with pytest.raises(unillm.InvalidOptions, match=r"finite|standard JSON"):
            await llm.generate("hi", max_tokens=4, **options)
    assert server.count() == 0


async def test_the_transport_never_serialises_nan_or_infinity(server: FaultServer) -> None:
    transport = Transport(server.url, engine="vllm")
    try:
        for bad in (float("nan"), float("inf"), float("-inf")):
            with pytest.raises(unillm.InvalidOptions, match=r"not standard JSON.*Nothing was sent"):
                await transport.send(HttpCall("POST", "/v1/completions", {"temperature": bad}))
    finally:
        await transport.aclose()
    assert server.count() == 0


# -- waiting for a pooled connection is not an engine timeout ----------------------------------
async def test_a_full_pool_raises_pool_timeout_and_sends_nothing(server: FaultServer) -> None:
    server.stall(times=1)  # the first request holds the only connection
    async with connect(server.url, pool=Pool(max_connections=1, wait=0.2)) as llm:
        await llm.info()
        before = server.count()
        async with anyio.create_task_group() as tg:
            tg.start_soon(llm.generate, "first")
            await wait_until_received(server, before + 1)
            with pytest.raises(unillm.PoolTimeout, match="nothing was sent") as caught:
                await llm.generate("second", max_tokens=4)
            tg.cancel_scope.cancel()
    assert not isinstance(caught.value, unillm.EngineTimeout)
    assert "check the engine's load" not in str(caught.value)
    assert server.count() == before + 1


def test_pool_limits_are_validated() -> None:
    for bad in (
        {"max_connections": 0},
        {"max_keepalive": -1},
        {"wait": 0},
        {"keepalive_expiry": float("nan")},
    ):
        with pytest.raises(unillm.InvalidOptions, match="Pool"):
            Pool(**bad)


@pytest.mark.parametrize(
    "bad",
    [
        {"attempts": 0},
        {"attempts": 2.5},
        {"attempts": float("inf")},
        {"max_wait": -1},
        {"initial_wait": float("nan")},
    ],
)
def test_retry_policy_is_validated(bad: dict[str, Any]) -> None:
    # attempts=0 used to be accepted and gave "cannot reach ... after 0 attempt(s)".
    with pytest.raises(unillm.InvalidOptions, match="RetryPolicy"):
        unillm.RetryPolicy(**bad)


def test_pool_limits_can_be_set_from_connect_launch_and_config(tmp_path: Path) -> None:
    pool = Pool(max_connections=8, wait=2.5, max_keepalive=4)
    assert unillm.connect("vllm", "http://127.0.0.1:9", pool=pool)._pool == pool
    launch = unillm.launch("vllm", model="m", python=sys.executable, progress=None, pool=pool)
    assert launch._connect.pool == pool
    config = {
        "engine": "vllm",
        "base_url": "http://127.0.0.1:9",
        "pool": {"max_connections": 8, "wait": 2.5, "max_keepalive": 4},
    }
    llm = unillm.from_config(config)
    assert isinstance(llm, unillm.LLM) and llm._pool == pool
    with pytest.raises(unillm.ConfigError, match="pool"):
        unillm.from_config({**config, "pool": {"max_connections": 0}})


# -- a deadline bounds the whole call ----------------------------------------------------------
async def test_deadline_bounds_a_generate_the_read_timeout_would_let_stall(server: FaultServer) -> None:
    server.stall()
    async with connect(server.url) as llm:  # read timeout 30 s
        with pytest.raises(unillm.DeadlineExceeded) as caught:
            await llm.generate("hi", max_tokens=4, deadline=0.3)
    assert caught.value.deadline == 0.3
    assert isinstance(caught.value, TimeoutError)


async def test_deadline_bounds_a_stream_that_keeps_sending(server: FaultServer) -> None:
    server.endless(interval=0.02)  # bytes keep coming, so the read timeout never fires
    async with connect(server.url) as llm:
        stream = llm.stream("hi", max_tokens=4, deadline=0.5)
        with pytest.raises(unillm.DeadlineExceeded) as caught:
            await stream.collect()
    assert caught.value.partial_text == stream.text != ""


async def test_deadline_includes_retry_waits(server: FaultServer) -> None:
    server.fail(503, retry_after="30")  # every attempt: overloaded, come back in 30 s
    retry = RetryPolicy(attempts=4, initial_wait=30, max_wait=30, max_total=120)
    async with connect(server.url, retry=retry) as llm:
        await llm.info()  # discovery outside the deadlines: a loaded machine must not eat them
        with pytest.raises(unillm.DeadlineExceeded):
            await llm.generate("hi", max_tokens=4, deadline=2)
        with pytest.raises(unillm.DeadlineExceeded):
            await llm.stream("hi", max_tokens=4, deadline=2).collect()
    assert server.count() == 2  # one attempt each, then the deadline cut the 30 s wait


async def test_deadline_includes_waiting_for_a_pooled_connection(server: FaultServer) -> None:
    server.stall(times=1)
    async with connect(server.url, pool=Pool(max_connections=1)) as llm:
        await llm.info()
        before = server.count()
        async with anyio.create_task_group() as tg:
            tg.start_soon(llm.generate, "first")
            await wait_until_received(server, before + 1)
            with pytest.raises(unillm.DeadlineExceeded):
                await llm.generate("second", max_tokens=4, deadline=0.3)
            tg.cancel_scope.cancel()


async def test_a_call_within_its_deadline_is_answered(server: FaultServer) -> None:
    async with connect(server.url, defaults={"deadline": 30}) as llm:
        assert (await llm.generate("hi", max_tokens=4)).text == "".join(PIECES)
        assert await llm.stream("hi", max_tokens=4).collect() == "".join(PIECES)


# -- retries are quiet unless the program configured logging -----------------------------------
RETRY_PROGRAM = """
import logging, sys
import anyio, unillm
from unillm.testing.fault_server import FaultServer
if sys.argv[1] == "logging":
    logging.basicConfig(level=logging.INFO)

async def main() -> None:
    with FaultServer(model="tiny", pieces=("ok",)) as server:
        server.fail(503, times=2)
        retry = unillm.RetryPolicy(attempts=4, initial_wait=0.01, max_wait=0.02)
        async with unillm.connect("vllm", server.url, model="tiny", retry=retry) as llm:
            print((await llm.generate("hi", max_tokens=2)).text, server.count())

anyio.run(main)
"""


def run_retry_program(mode: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(RETRY_PROGRAM), mode],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["ok", "3"]  # two 503s retried, then answered
    return done


def test_retries_print_nothing_when_logging_is_not_configured() -> None:
    # (the look-alike server's own shutdown may print asyncio noise; unillm must add nothing)
    assert "stamina" not in run_retry_program("plain").stderr


def test_retries_are_logged_when_the_program_configures_logging() -> None:
    assert "stamina.retry_scheduled" in run_retry_program("logging").stderr


async def test_a_fleet_honours_one_deadline_across_its_replicas(server: FaultServer) -> None:
    with FaultServer(model="tiny", pieces=PIECES) as other:
        server.stall()
        other.stall()
        fleet = unillm.connect(
            "vllm", [server.url, other.url], model="tiny", timeouts=Timeouts(connect=1, read=30)
        )
        async with fleet:
            with pytest.raises(unillm.DeadlineExceeded):
                await fleet.generate("hi", max_tokens=4, deadline=0.3)
            with pytest.raises(unillm.DeadlineExceeded):
                await fleet.stream("hi", max_tokens=4, deadline=0.3).collect()


def test_the_config_check_lists_timeouts_and_pool_limits_that_cannot_work() -> None:
    report = unillm.check_config(
        {
            "engine": "vllm",
            "base_url": "http://127.0.0.1:9",
            "timeouts": {"read": 0},
            "pool": {"max_connections": 0},
            "retry": {"attempts": 2},
        }
    )
    assert {p.setting for p in report.problems} == {"timeouts", "pool"}
    assert unillm.check_config(
        {"engine": "vllm", "base_url": "http://127.0.0.1:9", "pool": {"max_connections": 8, "wait": 2}}
    ).ok
