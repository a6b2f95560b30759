"""MLX fixtures: the tiny model, a real mlx_lm.server launched through unillm, and in-process launches.

The server runs from the managed env (``unillm setup mlx``); in-process tests need mlx-lm in this
environment (``pip install -e 'adapters/mlx[inprocess]'``). A missing engine is an error, not a skip.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from unillm_mlx import MLXAdapter
from unillm_mlx.testing import MLXServer, mlx_launch_settings

import unillm
from unillm.testing.tiny_model import TinyModel


@pytest.fixture(scope="session")
def mlx_workdir(workdir: Path) -> Path:
    """The MLX tests' own folder in the session's work folder (root conftest's ``workdir``)."""
    folder = workdir / "mlx"
    folder.mkdir(exist_ok=True)
    return folder


def _serve(tiny: TinyModel, workdir: Path, log: Path, **settings: Any) -> Iterator[MLXServer]:
    yield from MLXServer.serving("mlx", log, **mlx_launch_settings(tiny, workdir, **settings), progress=None)


@pytest.fixture(scope="session")
def mlx_server(tiny: TinyModel, mlx_workdir: Path) -> Iterator[MLXServer]:
    """mlx_lm.server with the tiny model and both LoRAs named at launch."""
    yield from _serve(
        tiny,
        mlx_workdir,
        mlx_workdir / "mlx-server.log",
        lora={name: str(path) for name, path in tiny.loras.items()},
    )


@pytest.fixture(scope="session")
def mlx_draft_server(tiny: TinyModel, mlx_workdir: Path) -> Iterator[MLXServer]:
    """mlx_lm.server speculating with the tiny model itself as the draft model."""
    draft = unillm.Speculative(method="draft", draft_model=str(tiny.path), num_tokens=3)
    yield from _serve(tiny, mlx_workdir, mlx_workdir / "mlx-draft.log", speculative=draft)


@pytest.fixture
def inproc_settings(tiny: TinyModel, mlx_workdir: Path) -> dict[str, Any]:
    """In-process launch settings with the 'sql' LoRA (PEFT layout: converted on load)."""
    return {"model": str(tiny.path), "in_process": True, "lora": {"sql": str(tiny.loras["sql"])}}


@pytest.fixture
def mlx_adapter() -> MLXAdapter:
    return MLXAdapter()
