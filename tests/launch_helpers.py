"""Shared by the tests that launch a scripted stand-in for an engine and expect it to fail."""

from __future__ import annotations

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
