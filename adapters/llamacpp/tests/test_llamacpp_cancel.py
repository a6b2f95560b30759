"""A stream left early stops generating on real llama.cpp, llama-cpp-python's server (issue 33,
item 3; read from the engine's CPU by ``unillm.testing.engines.check_cancel_stops``). A cancelled
non-streamed ``generate`` is not stopped promptly here: see docs/guide/fleets-and-routers.md."""

from __future__ import annotations

import pytest

from unillm.testing.engines import RunningEngine, check_cancel_stops

pytestmark = [pytest.mark.anyio, pytest.mark.engine]


async def test_a_stream_left_early_stops_generating_on_llamacpp(llamacpp_server: RunningEngine) -> None:
    # llama-cpp-python's server runs a non-streamed request to its end and has no abort call
    await check_cancel_stops(llamacpp_server, generate=False)
