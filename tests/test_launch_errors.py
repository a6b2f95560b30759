"""LaunchError shows the root cause: the log's first error lines, the tail, and known-cause advice."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from launch_helpers import failed_launch

import unillm
from unillm.launching.logs import LaunchLog

# A stand-in engine printing a failed vLLM CPU launch as vLLM 0.32 does (172 lines): a warning that
# mentions an error, a worker traceback logged line by line at ERROR level with the real cause at
# line 54, shutdown chatter, and the generic "see root cause above" last.
FAKE_ENGINE = """
import sys
P = "(VllmWorker-0 pid=9) ERROR 12-01 00:34:08 [multiproc_executor.py:953] "
for i in range(1, 173):
    if i == 12:
        print("(APIServer pid=6) WARNING [system_utils.py:255] This can cause fd limit errors like "
              "`OSError: [Errno 24] Too many open files`.")
    elif i == 36:
        print(P + "WorkerProc failed to start.")
    elif i == 37:
        print(P + "Traceback (most recent call last):")
    elif 37 < i < 54:
        print(P + ('  File "/venv/vllm/v1/worker.py", line %d, in init' % i if i % 2 else "    init()"))
    elif i == 54:
        print(P + "ValueError: Available memory on node 0 (12.07/18.84 GiB) on startup is less than "
              "desired CPU memory utilization (0.92, 17.33 GiB).")
    elif i == 172:
        print("RuntimeError: Engine core initialization failed. See root cause above.")
    else:
        print(f"(EngineCore pid=7) INFO line {i}")
sys.exit(1)
"""


async def _fail(tmp_path: Path, script: str) -> unillm.LaunchError:
    return await failed_launch(tmp_path, script)


@pytest.mark.anyio
async def test_the_first_error_lines_are_shown_although_outside_the_tail(tmp_path: Path) -> None:
    error = await _fail(tmp_path, FAKE_ENGINE)
    assert not any("Available memory" in line for line in error.log_tail)
    assert any(
        line.startswith("54| (VllmWorker-0") and "ValueError: Available memory" in line
        for line in error.error_lines
    )
    assert "first error lines:" in str(error) and "54| (VllmWorker-0" in str(error)
    assert "Engine core initialization failed" in error.log_tail[-1]


@pytest.mark.anyio
async def test_error_lines_start_where_it_failed_and_skip_warnings(tmp_path: Path) -> None:
    error = await _fail(tmp_path, FAKE_ENGINE)
    numbers = [int(line.split("|")[0]) for line in error.error_lines]
    assert numbers[:3] == [35, 36, 37]  # the first error line, with a line of context before
    assert 12 not in numbers  # a warning that merely mentions OSError
    assert len(numbers) <= 20


@pytest.mark.anyio
async def test_a_known_cause_says_what_to_change(tmp_path: Path) -> None:
    error = await _fail(tmp_path, FAKE_ENGINE)
    [cause] = error.causes
    assert "cpu=True" in cause and "VLLM_CPU_KVCACHE_SPACE" in cause
    assert str(error).splitlines()[1] == f"likely cause: {cause}"


@pytest.mark.anyio
async def test_a_short_log_is_shown_once(tmp_path: Path) -> None:
    error = await _fail(tmp_path, "import sys; print('ValueError: bad'); sys.exit(2)")
    assert error.error_lines == []  # already in the tail
    assert error.log_tail == ["ValueError: bad"]
    assert str(error).count("| ValueError: bad") == 1  # the tail only, no error section


@pytest.mark.anyio
async def test_an_engine_killed_by_sigkill_points_at_memory(tmp_path: Path) -> None:
    error = await _fail(tmp_path, "import os, signal; os.kill(os.getpid(), signal.SIGKILL)")
    assert any("out-of-memory killer" in c for c in error.causes)


def test_error_lines_keep_one_line_of_context_and_are_bounded() -> None:
    log = LaunchLog(tail=3, max_errors=4)
    for i in range(1, 30):
        log.add("Traceback (most recent call last):" if i % 5 == 0 else f"info {i}")
    assert log.errors == ["4| info 4", "5| Traceback (most recent call last):", "6| info 6", "9| info 9"]


def test_exception_messages_are_kept_after_the_first_error_lines() -> None:
    log = LaunchLog(tail=2)
    for i in range(1, 60):
        log.add("ValueError: the cause" if i == 40 else "ERROR frame" if i > 10 else f"info {i}")
    assert "40| ValueError: the cause" in log.errors
    assert len(log.errors) < 10  # not every ERROR frame


def test_ordinary_lines_are_not_errors() -> None:
    log = LaunchLog(tail=1)
    for line in ("INFO using error_rate=0", "WARNING ErrorResponse schema", "all fine", "x"):
        log.add(line)
    assert log.errors == []


def test_hints_match_anywhere_and_are_reported_once() -> None:
    log = LaunchLog({r"out of (?:pixels|memory)": "buy more"}, tail=2)
    for line in ("a", "x: out of memory", "b", "y: out of memory", "c"):
        log.add(line)
    assert log.causes == ["buy more"]


@pytest.mark.anyio
@pytest.mark.parametrize("cpu", [False, True])
async def test_a_model_path_that_does_not_exist_is_refused_before_starting(cpu: bool) -> None:
    # vLLM used to start for ~30 s, then fail with a hub-id validation traceback.
    launch = unillm.launch(
        "vllm", model="/nonexistent/unillm-model", cpu=cpu, python=sys.executable, progress=None, api_key=None
    )
    with pytest.raises(unillm.InvalidOptions, match=r"does not exist on this machine.*tiny-model"):
        async with launch:
            pass
    assert launch.pid is None  # nothing was started
