"""Cancellation reaches the engine (issue 33, item 3) on real SGLang-CPU with the tiny model: a stream
left early stops generating, read from the engine's own CPU (no metrics needed). The answer had
seconds left at the rate it streamed, so an engine idle well before that stopped it; the issue's
goal is 1 s, asserted with room for a loaded machine (``BOUND``) and printed as measured. (A
cancelled non-streamed ``generate`` is not stopped promptly here: see docs/guide/fleets.md.)
"""

from __future__ import annotations

import pytest
from sglang_fixtures import SGLangServer

from unillm.testing.engines import leave_and_watch

pytestmark = [pytest.mark.anyio, pytest.mark.engine]
BOUND = 3.0  # s


async def test_a_stream_left_early_stops_generating_on_sglang(sglang_server: SGLangServer) -> None:
    pid = sglang_server.launch.pid
    assert pid is not None
    async with sglang_server.connect() as llm:
        stop = await leave_and_watch(llm, pid, extra_body={"ignore_eos": True})
    print(f"\n[SGLang] stream left: idle after {stop.idle_s:.2f} s ({stop.left_s:.1f} s were left)")
    assert stop.busy_cores > 0.5, stop  # it was generating
    assert stop.idle_s <= BOUND and stop.left_s > stop.idle_s + 1.0, stop
