"""End to end through ``unillm.connect("tensorrt_llm", url)`` against an OpenAI look-alike
(the suite's FaultServer) standing in for trtllm-serve; the ``server`` fixture checks every
generation body against trtllm-serve's transcribed protocol. This covers the core's path for
this adapter: discovery, SSE streams, errors, and ``/metrics`` as JSON iteration stats."""

from __future__ import annotations

import json
from typing import Any

import pytest
from fault_server import FaultServer  # type: ignore[import-not-found]  # tests/ (see conftest.py)
from trtllm_fixtures import answer
from unillm_tensorrt_llm import TensorRTLLMAdapter

import unillm
from unillm import RetryPolicy, Timeouts
from unillm.errors import EngineInternalError

pytestmark = pytest.mark.anyio
CHAT = [{"role": "user", "content": "Hi"}]


def connect(server: FaultServer, **kw: Any) -> unillm.LLM:
    return unillm.LLM(
        TensorRTLLMAdapter(loras={"sql": "/adapters/sql"}),
        server.url,
        retry=RetryPolicy(attempts=1),
        timeouts=Timeouts(connect=2, read=5),
        **kw,
    )


async def test_a_chat_stream_arrives_whole(server: FaultServer) -> None:
    async with connect(server) as llm, llm.stream(messages=CHAT, max_tokens=8, top_k=5) as stream:
        text = "".join([d.text async for d in stream])
    assert text == "Hello, world!"


async def test_a_lora_request_carries_the_adapters_path(server: FaultServer) -> None:
    async with connect(server) as llm:
        await llm.generate("Hi", max_tokens=4, lora="sql")
    body = server.seen("/v1/completions")[-1].body
    assert (body["model"], body["lora_request"]["lora_path"]) == ("tiny", "/adapters/sql")


async def test_metrics_are_the_newest_iteration_stats(server: FaultServer) -> None:
    server.metrics_text = json.dumps(answer("metrics"))
    async with connect(server) as llm:
        metrics = (await llm.metrics()).normalized()
    assert (metrics.running, metrics.waiting, metrics.kv_cache_usage) == (1, 3, 0.25)
    assert metrics.prefix_cache_hit_ratio == 0.25 and metrics.ttft is None  # no latency histograms


async def test_a_server_error_is_typed(server: FaultServer) -> None:
    server.fail(500)
    async with connect(server) as llm:
        with pytest.raises(EngineInternalError):
            await llm.generate("Hi", max_tokens=4)


async def test_a_field_trtllm_serve_does_not_know_is_answered_400() -> None:
    from trtllm_protocol import request_problem

    from unillm.errors import InvalidRequest

    with FaultServer(model="tiny", version="1.2.1") as s:
        s.check = request_problem  # extra="forbid", as upstream
        async with connect(s) as llm:
            with pytest.raises(InvalidRequest, match="guided_json"):
                await llm.generate("Hi", max_tokens=4, extra_body={"guided_json": {}})
