"""Launch supervision against the real vLLM: readiness, failures with log tails, no orphans."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

import unillm
from unillm.launching.cpu import cpu_settings
from unillm.testing.engines import RunningEngine, cpu_launch_settings
from unillm.testing.tiny_model import TinyModel

pytestmark = [pytest.mark.anyio, pytest.mark.engine]


def users_layout(tiny: TinyModel, workdir: Path, **settings: Any) -> dict[str, Any]:
    """A user's ``cpu=True`` launch: vLLM's own processes (the other tests' engines run as one)."""
    return cpu_settings("vllm", tiny.path, workdir=workdir, **settings)


def processes_mentioning(marker: str) -> list[int]:
    """PIDs whose command line contains ``marker``."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if marker.encode() in cmdline:
            found.append(int(pid))
    return found


async def test_ngram_speculative_decoding_gives_the_same_greedy_text(
    vllm_server: RunningEngine, tiny: TinyModel, workdir: Path
) -> None:
    prompts = ["The quick brown fox", "1 2 3 4 1 2 3 4 1 2 3 4"]
    async with vllm_server.connect() as plain:
        expected = [(await plain.generate(p, max_tokens=24, temperature=0)).text for p in prompts]
    spec = unillm.Speculative(method="ngram", num_tokens=3, lookup_min=1)
    settings = cpu_launch_settings("vllm", tiny, workdir / "spec", speculative=spec)
    async with unillm.launch("vllm", **settings, progress=None) as llm:
        got = [(await llm.generate(p, max_tokens=24, temperature=0)).text for p in prompts]
        metrics = await llm.metrics()
        assert any(n.startswith("vllm:spec_decode") for n in metrics.names())
        with pytest.raises(unillm.UnsupportedFeature, match="VLLM_ALLOW_RUNTIME_LORA_UPDATING"):
            await llm.loras.load("poem", str(tiny.loras["poem"]))  # not enabled on this one
    assert got == expected


async def test_a_folder_that_is_not_a_model_fails_the_launch_with_the_log_tail(
    tiny: TinyModel, workdir: Path
) -> None:
    empty = workdir / "not-a-model"  # exists (a missing path is refused before starting)
    empty.mkdir(parents=True, exist_ok=True)
    settings = cpu_launch_settings("vllm", tiny, workdir / "bad", model=str(empty))
    with pytest.raises(unillm.LaunchError) as caught:
        async with unillm.launch("vllm", **settings, progress=None):
            pass
    error = caught.value
    assert "exited with code" in str(error)
    assert str(empty) in error.command
    assert error.log_tail
    assert any("not-a-model" in line for line in error.log_tail)


async def test_the_api_key_never_appears_in_the_rendered_command(vllm_server: RunningEngine) -> None:
    rendered = vllm_server.launch.command().render()
    assert vllm_server.api_key
    assert vllm_server.api_key not in rendered
    assert "VLLM_API_KEY=***" in rendered
    assert vllm_server.api_key not in repr(vllm_server.launch.spec)


@pytest.fixture(scope="module")
def too_long_context(
    tiny: TinyModel, workdir: Path
) -> tuple[unillm.LaunchError, list[unillm.LaunchProgress]]:
    """One real launch that fails for a known reason (max_model_len above the model's 1024)."""
    seen: list[unillm.LaunchProgress] = []
    settings = cpu_launch_settings("vllm", tiny, workdir / "progress", max_model_len=4096)

    async def fail() -> unillm.LaunchError:
        with pytest.raises(unillm.LaunchError) as caught:
            async with unillm.launch("vllm", **settings, progress=seen.append):
                pass
        return caught.value

    return anyio.run(fail), seen


def test_progress_is_reported_while_the_engine_starts(
    too_long_context: tuple[unillm.LaunchError, list[unillm.LaunchProgress]],
) -> None:
    _, seen = too_long_context
    assert seen
    assert seen[0].phase == "starting"
    assert seen[-1].elapsed_s >= seen[0].elapsed_s


def test_a_known_cause_of_a_failed_launch_says_what_to_change(
    too_long_context: tuple[unillm.LaunchError, list[unillm.LaunchProgress]],
) -> None:
    error, _ = too_long_context
    assert error.causes == [
        "max_model_len is above the model's own context length: lower it, or leave it unset"
    ]
    assert str(error).splitlines()[1].startswith("likely cause: max_model_len")


async def test_launch_then_cancel_twenty_times_leaves_no_process(tiny: TinyModel, workdir: Path) -> None:
    marker = f"cancel-{uuid.uuid4().hex[:8]}"
    settings = users_layout(tiny, workdir / "cancel", served_name=marker)
    for i in range(20):
        with anyio.move_on_after(0.3 + (i % 5) * 0.4):
            async with unillm.launch("vllm", **settings, progress=None):
                pytest.fail("the engine cannot be ready this fast")
    assert processes_mentioning(marker) == []


def wait_until(condition: Callable[[], bool], seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"still not true after {seconds}s"
        time.sleep(0.2)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])
def test_killing_the_launching_process_takes_the_engine_down(
    tiny: TinyModel, workdir: Path, sig: signal.Signals
) -> None:
    marker = f"orphan-{sig.name}-{uuid.uuid4().hex[:8]}"
    settings = users_layout(tiny, workdir / marker)
    cli = [
        sys.executable,
        "-m",
        "unillm.cli",
        "launch",
        "vllm",
        "--cpu",
        "--model",
        settings["model"],
        "--served-name",
        marker,
        *(f"--env={k}={v}" for k, v in settings["env"].items()),
    ]
    parent = subprocess.Popen(cli, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_until(lambda: bool(set(processes_mentioning(marker)) - {parent.pid}), 60)
        parent.send_signal(sig)
        parent.wait(timeout=30)
        wait_until(lambda: not processes_mentioning(marker), 30)
    finally:
        parent.kill()
        for pid in processes_mentioning(marker):
            os.kill(pid, signal.SIGKILL)
