"""A launch through unillm's supervisor (start, readiness, a request, teardown) with a fake engine
process in Aphrodite Engine's place: unillm.testing.fake_engine serves an OpenAI look-alike on the port
the adapter's command names."""

from pathlib import Path

import pytest
from unillm_aphrodite import AphroditeAdapter

import unillm
from unillm.adapter import LaunchSpec
from unillm.testing import fake_engine

pytestmark = pytest.mark.anyio


async def test_a_launch_serves_and_stops(tmp_path: Path) -> None:
    spec = LaunchSpec(model="tiny", served_name="tiny", api_key=None, prefix=fake_engine.prefix())
    run = unillm.Launch(AphroditeAdapter(), spec, progress=None, log_path=tmp_path / "engine.log")
    async with run as llm:
        assert (await llm.generate("Hi", max_tokens=4)).text
    assert run.pid is not None
