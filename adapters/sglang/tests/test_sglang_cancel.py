"""A stream left early, and a cancelled ``generate``, stop generating on real SGLang-CPU (issue 33,
item 3; read from the engine's CPU and its generated-tokens counter by
``unillm.testing.engines.check_cancel_stops``). SGLang notices a non-streamed request's gone client
only every few seconds: unillm tags the request with an id and aborts it (``/abort_request``)."""

from __future__ import annotations

import pytest
from sglang_fixtures import SGLangServer

from unillm.testing.engines import check_cancel_stops

pytestmark = [pytest.mark.anyio, pytest.mark.engine]


async def test_a_stream_left_or_a_generate_cancelled_stops_generating_on_sglang(
    sglang_server: SGLangServer,
) -> None:
    await check_cancel_stops(sglang_server, extra_body={"ignore_eos": True})
