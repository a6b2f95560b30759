"""Shared by the tests that launch engines (or scripted stand-ins for them, expected to fail)."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest

import unillm


def stand_in_launch(script: str, **settings: Any) -> unillm.Launch:
    """A vLLM launch whose command runs ``script`` (``python -c``) instead; ``settings`` are more
    launch settings."""
    launch: unillm.Launch = unillm.launch(
        "vllm",
        model="m",
        python=sys.executable,
        progress=None,
        api_key=None,
        prefix=[sys.executable, "-c", script],
        **settings,
    )
    return launch


async def launch_error(launch: unillm.Launch) -> unillm.LaunchError:
    """The LaunchError ``launch`` ends in (the test fails if it starts)."""
    with pytest.raises(unillm.LaunchError) as caught:
        async with launch:
            pass
    return caught.value


async def failed_launch(tmp_path: Path, script: str, **settings: Any) -> unillm.LaunchError:
    """The LaunchError of :func:`stand_in_launch`, its engine log in ``tmp_path / "engine.log"``."""
    return await launch_error(stand_in_launch(script, log_path=tmp_path / "engine.log", **settings))


def alive(pid: int | None) -> bool:
    """Whether a process of this id still exists (None: there never was one)."""
    if pid is None:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True
