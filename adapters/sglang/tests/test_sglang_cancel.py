"""A stream left early stops generating on real SGLang-CPU (issue 33, item 3; read from the
engine's CPU by ``unillm.testing.engines.check_stream_stops``). A cancelled non-streamed
``generate`` is not stopped promptly here: see docs/guide/fleets-and-routers.md."""

from __future__ import annotations

import pytest
from sglang_fixtures import SGLangServer

from unillm.testing.engines import check_stream_stops

pytestmark = [pytest.mark.anyio, pytest.mark.engine]


async def test_a_stream_left_early_stops_generating_on_sglang(sglang_server: SGLangServer) -> None:
    await check_stream_stops(sglang_server, extra_body={"ignore_eos": True})
