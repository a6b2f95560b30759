"""Shared by the tests that launch engines (or scripted stand-ins for them, expected to fail)."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest

import unillm


async def failed_launch(tmp_path: Path, script: str, **settings: Any) -> unillm.LaunchError:
    """The LaunchError of a vLLM launch whose command runs ``script`` (``python -c``) instead;
    the engine log goes to ``tmp_path / "engine.log"``, ``settings`` are more launch settings."""
    launch = unillm.launch(
        "vllm",
        model="m",
        python=sys.executable,
        progress=None,
        api_key=None,
        log_path=tmp_path / "engine.log",
        prefix=[sys.executable, "-c", script],
        **settings,
    )
    with pytest.raises(unillm.LaunchError) as caught:
        async with launch:
            pass
    return caught.value


def alive(pid: int | None) -> bool:
    """Whether a process of this id still exists (None: there never was one)."""
    if pid is None:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True
