"""`unillm.batch.run` against vLLM look-alike servers: every fault ends with each id exactly once."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, cast

import pytest
from batch_helpers import (
    DiskFullAfter,
    Poisoned,
    SlowServer,
    every,
    ids,
    results,
    write_input,
    write_poisoned,
)

import unillm
import unillm.batch
from unillm import InvalidOptions, RetryPolicy
from unillm.batch import OutputWriteError, journal
from unillm.batch.runner import execute
from unillm.testing.fault_server import FaultServer

pytestmark = pytest.mark.anyio
FAST_RETRY = RetryPolicy(attempts=3, initial_wait=0.01, max_wait=0.02)


async def test_every_request_gets_one_result_line(tmp_path: Path) -> None:
    inp, out = write_input(tmp_path / "in.jsonl", 30), tmp_path / "out.jsonl"
    with FaultServer() as server:
        async with unillm.connect("vllm", server.url) as llm:
            summary = await unillm.batch.run(inp, out, llm, max_concurrency=4)
    assert (ids(out), summary.succeeded) == (every(30), 30)


async def test_a_rerun_sends_only_the_requests_without_a_result(tmp_path: Path) -> None:
    inp, out = write_input(tmp_path / "in.jsonl", 10), tmp_path / "out.jsonl"
    with FaultServer() as server:
        async with unillm.connect("vllm", server.url) as llm:
            await unillm.batch.run(inp, out, llm)
            lines = out.read_text().splitlines(keepends=True)
            out.write_text("".join(lines[:6]))
            summary = await unillm.batch.run(inp, out, llm)
        sent = server.count("/v1/chat/completions")
    assert (ids(out), summary.skipped, sent) == (every(10), 6, 14)


async def test_a_torn_last_line_is_redone_once(tmp_path: Path) -> None:
    inp, out = write_input(tmp_path / "in.jsonl", 5), tmp_path / "out.jsonl"
    with FaultServer() as server:
        async with unillm.connect("vllm", server.url) as llm:
            await unillm.batch.run(inp, out, llm)
            text = out.read_text()
            out.write_text(text[: len(text) - 30])  # kill -9 in the middle of the last write
            summary = await unillm.batch.run(inp, out, llm)
    assert (ids(out), summary.succeeded, summary.torn_bytes > 0) == (every(5), 1, True)


async def test_all_failures_are_written_with_their_typed_error(tmp_path: Path) -> None:
    inp, out = write_input(tmp_path / "in.jsonl", 6), tmp_path / "out.jsonl"
    with FaultServer() as server:
        server.fail(500, message="the engine fell over")
        async with unillm.connect("vllm", server.url, retry=FAST_RETRY) as llm:
            summary = await unillm.batch.run(inp, out, llm)
    codes = {x["error"]["code"] for x in results(out)}
    assert (ids(out), summary.failed, codes) == (every(6), 6, {"EngineInternalError"})


async def test_retry_failed_reruns_only_the_failed_ones_and_keeps_each_id_once(tmp_path: Path) -> None:
    inp, out = write_input(tmp_path / "in.jsonl", 6), tmp_path / "out.jsonl"
    with FaultServer() as server:
        async with unillm.connect("vllm", server.url, retry=RetryPolicy(attempts=1)) as llm:
            server.fail(500, times=2)
            await unillm.batch.run(inp, out, llm, max_concurrency=1)
            before = server.count("/v1/chat/completions")
            summary = await unillm.batch.run(inp, out, llm, retry_failed=True)
            sent = server.count("/v1/chat/completions") - before
    ok = all(x["error"] is None for x in results(out))
    assert (ids(out), ok, summary.redone_failed, sent) == (every(6), True, 2, 2)


async def test_overloads_are_retried_by_the_clients_retry_policy(tmp_path: Path) -> None:
    inp, out = write_input(tmp_path / "in.jsonl", 4), tmp_path / "out.jsonl"
    with FaultServer() as server:
        server.fail(503, times=2, retry_after="0")
        async with unillm.connect("vllm", server.url, retry=FAST_RETRY) as llm:
            summary = await unillm.batch.run(inp, out, llm, max_concurrency=1)
    assert (ids(out), summary.succeeded) == (every(4), 4)


async def test_bad_input_sends_nothing(tmp_path: Path) -> None:
    inp, out = write_input(tmp_path / "in.jsonl", 3), tmp_path / "out.jsonl"
    inp.write_text(inp.read_text() + inp.read_text().splitlines()[0] + "\n")  # r0 twice
    with FaultServer() as server:
        async with unillm.connect("vllm", server.url) as llm:
            with pytest.raises(InvalidOptions, match="repeats line 1"):
                await unillm.batch.run(inp, out, llm)
        assert server.count() == 0


async def test_a_slow_engine_never_has_more_than_max_concurrency_in_flight(tmp_path: Path) -> None:
    inp, out = write_input(tmp_path / "in.jsonl", 24), tmp_path / "out.jsonl"
    server = SlowServer(0.05)
    with server:
        async with unillm.connect("vllm", server.url) as llm:
            summary = await unillm.batch.run(inp, out, llm, max_concurrency=3)
        most = server.most
    assert (ids(out), summary.succeeded, most <= 3) == (every(24), 24, True)


async def test_a_fleet_replica_dying_mid_batch_loses_nothing(tmp_path: Path) -> None:
    inp, out = write_input(tmp_path / "in.jsonl", 40), tmp_path / "out.jsonl"
    stopped: list[bool] = []
    with FaultServer() as a, FaultServer() as b:

        def kill_a(summary: unillm.batch.Summary) -> None:
            if summary.done >= 10 and not stopped:
                stopped.append(True)
                a.stop()

        async with unillm.connect("vllm", [a.url, b.url]) as fleet:
            summary = await unillm.batch.run(inp, out, fleet, max_concurrency=4, progress=kill_a)
        served_by_b = b.count("/v1/chat/completions")
    assert (ids(out), summary.succeeded, served_by_b > 20) == (every(40), 40, True)


async def test_a_long_engine_queue_shrinks_the_concurrency(tmp_path: Path) -> None:
    inp, out = write_input(tmp_path / "in.jsonl", 40), tmp_path / "out.jsonl"
    server = SlowServer(0.05)
    server.metrics_text = "# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting 100\n"
    with server, unillm.batch.plan(inp, out) as p:
        async with unillm.connect("vllm", server.url) as llm:
            summary = await execute(
                llm, p.pending, p.journal, p.summary, max_concurrency=16, metrics_interval=0.02
            )
    assert (ids(out), summary.concurrency < 16) == (every(40), True)


async def test_an_output_that_is_the_input_is_refused_before_anything_is_sent(tmp_path: Path) -> None:
    inp = write_input(tmp_path / "in.jsonl", 3)
    before = inp.read_bytes()
    with FaultServer() as server:
        async with unillm.connect("vllm", server.url) as llm:
            with pytest.raises(InvalidOptions, match="is the batch input itself"):
                await unillm.batch.run(inp, inp, llm, retry_failed=True)
        assert (server.count("/v1/chat/completions"), inp.read_bytes()) == (0, before)


async def test_an_unrelated_jsonl_output_is_refused_untouched(tmp_path: Path) -> None:
    inp, out = write_input(tmp_path / "in.jsonl", 3), tmp_path / "other.jsonl"
    out.write_text('{"a": 1}\n{"b": 2}\n{"c": 3')
    with FaultServer() as server:
        async with unillm.connect("vllm", server.url) as llm:
            with pytest.raises(InvalidOptions, match="not a batch result"):
                await unillm.batch.run(inp, out, llm)
    assert out.read_text() == '{"a": 1}\n{"b": 2}\n{"c": 3'


async def test_a_poison_request_fails_alone_in_its_own_typed_line(tmp_path: Path) -> None:
    inp, out = write_poisoned(tmp_path / "in.jsonl", 6), tmp_path / "out.jsonl"
    with FaultServer() as server:
        async with unillm.connect("vllm", server.url) as llm:
            poisoned = Poisoned(llm, LookupError("Unresolvable: http://127.0.0.1:9/x.json"))
            summary = await unillm.batch.run(inp, out, poisoned, max_concurrency=2)
    errors = {x["custom_id"]: x["error"] and x["error"]["code"] for x in results(out)}
    assert (ids(out), summary.succeeded, errors["r3"]) == (every(6), 5, "UnexpectedError")


async def test_a_full_disk_ends_typed_keeps_whole_lines_and_a_rerun_resumes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    inp, out = write_input(tmp_path / "in.jsonl", 8), tmp_path / "out.jsonl"
    with FaultServer() as server:
        async with unillm.connect("vllm", server.url) as llm:
            monkeypatch.setattr(journal, "os", DiskFullAfter(3))
            with pytest.raises(OutputWriteError):
                await unillm.batch.run(inp, out, llm, max_concurrency=1)
            kept = len(results(out))  # every line whole JSON
            monkeypatch.undo()
            summary = await unillm.batch.run(inp, out, llm)
    assert (kept, summary.skipped, ids(out)) == (3, 3, every(8))


class _Burning:
    """An LLM whose every request also burns ``each`` seconds of this process's CPU."""

    def __init__(self, llm: unillm.LLM, each: float) -> None:
        self.llm, self.each = llm, each

    async def generate(self, *args: Any, **kwargs: Any) -> Any:
        until = time.process_time() + self.each
        while time.process_time() < until:
            pass
        return await self.llm.generate(*args, **kwargs)

    async def metrics(self) -> Any:
        return await self.llm.metrics()


async def test_the_summary_counts_the_clients_own_cpu_time(tmp_path: Path) -> None:
    inp, out = write_input(tmp_path / "in.jsonl", 4), tmp_path / "out.jsonl"
    with FaultServer() as server:
        async with unillm.connect("vllm", server.url) as llm:
            summary = await unillm.batch.run(inp, out, cast(Any, _Burning(llm, 0.05)), max_concurrency=2)
    assert (summary.succeeded, summary.cpu_seconds >= 4 * 0.05) == (4, True)
    assert summary.as_dict()["cpu_seconds"] == summary.cpu_seconds
