"""``unillm.testing.engines.held_requests``: an engine's running plus waiting gauges, and a typed
refusal where it exports none (an absent gauge read as 0 would call a busy engine idle)."""

from __future__ import annotations

import pytest

import unillm
from unillm.errors import UnsupportedFeature
from unillm.testing.engines import held_requests
from unillm.testing.fault_server import FaultServer, Raw

pytestmark = pytest.mark.anyio
GAUGES = b'vllm:num_requests_running{model_name="m"} 3.0\nvllm:num_requests_waiting{model_name="m"} 2.0\n'


def metrics(text: bytes) -> Raw:
    return Raw(body=text, content_type="text/plain; version=0.0.4")


async def test_the_running_and_waiting_gauges_add_up() -> None:
    with FaultServer() as server:
        server.script("/metrics", metrics(GAUGES))
        async with unillm.connect("vllm", server.url) as llm:
            assert await held_requests(llm) == 5.0


async def test_an_engine_without_the_gauges_is_refused_not_read_as_idle() -> None:
    with FaultServer() as server:
        server.script("/metrics", metrics(b'vllm:prompt_tokens_total{model_name="m"} 7.0\n'))
        async with unillm.connect("vllm", server.url) as llm:
            with pytest.raises(UnsupportedFeature, match="running and waiting gauges"):
                await held_requests(llm)
