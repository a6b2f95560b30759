"""A stream left early, and a cancelled ``generate``, stop generating on real mlx_lm.server (issue 33,
item 3; read from the engine's CPU by ``unillm.testing.engines.check_cancel_stops``). The engine
stops only streams: unillm sends ``generate`` as one (``Adapter.stops_only_streams``)."""

from __future__ import annotations

import pytest
from unillm_mlx.testing import MLXServer

from unillm.testing.engines import check_cancel_stops

pytestmark = [pytest.mark.anyio, pytest.mark.engine]


async def test_a_stream_left_or_a_generate_cancelled_stops_generating_on_mlx(mlx_server: MLXServer) -> None:
    await check_cancel_stops(mlx_server)
