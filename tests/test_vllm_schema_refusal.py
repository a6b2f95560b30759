"""A JSON schema the launched vLLM's xgrammar backend cannot honour is refused before sending."""

from __future__ import annotations

import pytest

import unillm
from unillm.adapter.launch_spec import LaunchSpec
from unillm.adapter.registry import get_adapter
from unillm.client.llm import LLM
from unillm.testing.fault_server import FaultServer

pytestmark = pytest.mark.anyio

XGRAMMAR = ["--structured-outputs-config", '{"backend":"xgrammar","disable_any_whitespace":true}']


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def test_a_schema_xgrammar_cannot_honour_never_reaches_the_server() -> None:
    adapter = get_adapter("vllm").bind(LaunchSpec(model="/m", extra_args=XGRAMMAR))
    with FaultServer() as server:
        async with LLM(adapter, server.url) as llm:
            with pytest.raises(unillm.UnsupportedFeature) as caught:
                await llm.generate("hi", output={"type": "array", "uniqueItems": True}, max_tokens=4)
        assert server.count("/v1/completions") + server.count("/v1/chat/completions") == 0
    assert "'uniqueItems' at /uniqueItems" in str(caught.value)
