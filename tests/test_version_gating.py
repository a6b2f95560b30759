"""The detected engine version decides the wire fields, and refusals happen before sending."""

from __future__ import annotations

import pytest

import unillm
from unillm.testing.fault_server import FaultServer

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def test_a_constraint_the_detected_version_cannot_honour_is_refused_before_sending() -> None:
    with FaultServer(version="0.5.4") as server:
        async with unillm.connect("vllm", server.url) as llm:
            with pytest.raises(unillm.UnsupportedFeature) as caught:
                await llm.generate("hi", output=unillm.Regex("[0-9]+"), max_tokens=4)
            assert server.count("/v1/completions") == 0
    message = str(caught.value)
    assert "vllm 0.5.4" in message
    assert "Regex" in message
    assert "Upgrade" in message


async def test_servers_before_structured_outputs_get_the_guided_fields() -> None:
    with FaultServer(version="0.9.2") as server:
        async with unillm.connect("vllm", server.url) as llm:
            with pytest.raises(unillm.OutputParseError):  # this fake server ignores constraints
                await llm.generate("hi", output=unillm.Choice(["a", "b"]), max_tokens=4)
        body = server.requests[-1].body
    assert body["guided_choice"] == ["a", "b"]
    assert "structured_outputs" not in body


async def test_current_servers_never_get_the_silently_ignored_guided_fields() -> None:
    with FaultServer(version="0.32.0") as server:
        async with unillm.connect("vllm", server.url) as llm:
            with pytest.raises(unillm.OutputParseError):  # an ignored constraint never passes silently
                await llm.generate("hi", output=unillm.Regex("[0-9]+"), max_tokens=4)
        body = server.requests[-1].body
    assert body["structured_outputs"] == {"regex": "[0-9]+"}
    assert not [k for k in body if k.startswith("guided_")]
