"""A stream left early stops generating on real mlx_lm.server (issue 33, item 3; read from the
engine's CPU by ``unillm.testing.engines.check_cancel_stops``). A cancelled non-streamed ``generate``
runs to its end there: the server has no abort call (see docs/guide/fleets-and-routers.md)."""

from __future__ import annotations

import pytest
from unillm_mlx.testing import MLXServer

from unillm.testing.engines import check_cancel_stops

pytestmark = [pytest.mark.anyio, pytest.mark.engine]


async def test_a_stream_left_early_stops_generating_on_mlx(mlx_server: MLXServer) -> None:
    await check_cancel_stops(mlx_server, generate=False)  # no abort call: see the docstring
