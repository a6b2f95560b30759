"""LaunchError shows the root cause: the log's first error lines, the tail, and known-cause advice."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import unillm
from unillm.launch_log import LaunchLog

# A stand-in engine whose log is 170 lines long with the real cause at line 52 (as vLLM's CPU
# build prints it) and a generic error at the end, like a failed vLLM CPU launch.
FAKE_ENGINE = """
import sys
for i in range(1, 171):
    if i == 51:
        print("(EngineCore pid=1) ERROR EngineCore failed to start.")
    elif i == 52:
        print("ValueError: Available memory on node 0 (3.1/23.4 GiB) on kv cache allocation is "
              "less than requested memory for kv (19.2/21.1 GiB). Reduce CPU memory used by other "
              "processes.")
    elif i == 170:
        print("RuntimeError: Engine core initialization failed. See root cause above.")
    else:
        print(f"INFO line {i}")
sys.exit(1)
"""


async def _fail(tmp_path: Path, script: str) -> unillm.LaunchError:
    launch = unillm.launch("vllm", model="m", python=sys.executable, progress=None, api_key=None,
                           log_path=tmp_path / "engine.log", prefix=[sys.executable, "-c", script])
    with pytest.raises(unillm.LaunchError) as caught:
        async with launch:
            pass
    return caught.value


@pytest.mark.anyio
async def test_the_first_error_lines_are_shown_although_outside_the_tail(tmp_path: Path) -> None:
    error = await _fail(tmp_path, FAKE_ENGINE)
    assert not any("Available memory" in line for line in error.log_tail)
    assert any(line.startswith("52| ValueError: Available memory") for line in error.error_lines)
    assert any(line.startswith("51| ") for line in error.error_lines)  # with its context
    assert "first error lines:" in str(error) and "52| ValueError" in str(error)
    assert "Engine core initialization failed" in error.log_tail[-1]


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
    assert log.errors == ["4| info 4", "5| Traceback (most recent call last):", "6| info 6",
                          "9| info 9"]


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
