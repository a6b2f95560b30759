"""Fixtures of the SGLang tests: a real SGLang server on this CPU machine, launched once.

``sglang_server`` (session) starts SGLang 0.5.23 through ``unillm.launch`` with the tiny model,
from the CPU env that ``cpu_env.py`` builds (cached; ~5 min the first time). It yields an
:class:`SGLangServer` with ``base_url``, ``api_key`` and ``connect()``. A missing or broken
engine is an error, never a skip.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import cpu_env
import pytest
from sglang_fixtures import SGLangServer, kv_events_endpoint
from unillm_sglang import SGLangAdapter

import unillm
from unillm.testing.tiny_model import TinyModel


@pytest.fixture(scope="session")
def sglang_workdir(workdir: Path) -> Path:
    """The SGLang tests' own folder in the session's work folder (root conftest's ``workdir``)."""
    folder = workdir / "sglang"
    folder.mkdir(exist_ok=True)
    return folder


@pytest.fixture(scope="session")
def sglang_server(tiny: TinyModel, sglang_workdir: Path) -> Iterator[SGLangServer]:
    """SGLang on the CPU with the tiny model (served as "tiny"), an API key, float32, publishing
    its KV-cache events (``kv_events_endpoint()``)."""
    settings = cpu_env.launch_settings(tiny.path, sglang_workdir)
    events = SGLangAdapter().kv_events_args(*kv_events_endpoint()) or []
    settings["extra_args"] = [*settings.get("extra_args", ()), *events]
    yield from SGLangServer.serving("sglang", sglang_workdir / "sglang.log", **settings)


@pytest.fixture
async def sglang_llm(sglang_server: SGLangServer) -> AsyncIterator[unillm.LLM]:
    async with sglang_server.connect() as llm:
        yield llm
