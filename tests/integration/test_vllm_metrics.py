"""Normalized engine metrics and client timings against the real vLLM (CPU) of the session.

The session server is shared by the whole run, so each test measures a window: a snapshot
before and after its own requests (pytest runs them one at a time).
"""

from __future__ import annotations

import anyio
import pytest

import unillm
from unillm.metrics import NormalizedMetrics
from unillm.testing.streams import final_delta

pytestmark = [pytest.mark.anyio, pytest.mark.engine]

PROMPT = "The quick brown fox"
IGNORE_EOS = {"ignore_eos": True}


async def snapshot(llm: unillm.LLM) -> NormalizedMetrics:
    return (await llm.metrics()).normalized()


async def test_a_metrics_window_counts_exactly_the_requests_made(llm: unillm.LLM) -> None:
    before = await snapshot(llm)
    answers = [await llm.generate(PROMPT, max_tokens=6, temperature=0) for _ in range(2)]
    deltas = [d async for d in llm.stream(PROMPT, max_tokens=6, temperature=0)]
    usages = [r.usage for r in answers] + [final_delta(deltas).usage]
    with anyio.fail_after(10):  # the engine records a request's stats right after answering it
        while (window := await snapshot(llm) - before).e2e is None or window.e2e.count < 3:
            await anyio.sleep(0.1)
    assert window.e2e is not None and window.ttft is not None and window.tpot is not None
    assert window.e2e.count == window.ttft.count == window.tpot.count == 3
    assert window.generation_tokens == sum(u.completion_tokens for u in usages if u)
    assert window.prompt_tokens == sum(u.prompt_tokens for u in usages if u)
    assert window.itl is not None and window.itl.count == 3 * 5  # 6 tokens: 5 gaps per request
    assert window.e2e.p50 is not None and window.e2e.mean is not None and window.e2e.mean > 0


async def test_live_gauges_are_read_and_unexposed_signals_are_none(llm: unillm.LLM) -> None:
    n = await snapshot(llm)
    assert n.engine == "vllm"
    assert n.running is not None and n.waiting is not None
    assert n.kv_cache_usage is not None and 0 <= n.kv_cache_usage <= 1
    assert n.prefix_cache_queries is not None
    # the session server does not speculate: no speculative signal, rather than zeros
    assert (n.spec_drafts, n.spec_acceptance_rate, n.spec_acceptance_length) == (None, None, None)


async def test_client_timings_of_a_real_stream(llm: unillm.LLM) -> None:
    deltas = [d async for d in llm.stream(PROMPT, max_tokens=12, temperature=0)]
    last = final_delta(deltas)
    t = last.timings
    assert t is not None and t.ttft_s is not None and t.tpot_s is not None
    assert last.usage is not None and last.usage.completion_tokens == 12
    assert len(t.itl_s) == sum(1 for d in deltas if d.text) - 1


async def test_opentelemetry_span_and_metrics_of_a_real_stream(llm: unillm.LLM) -> None:
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    spans, reader, tracer = InMemorySpanExporter(), InMemoryMetricReader(), TracerProvider()
    tracer.add_span_processor(SimpleSpanProcessor(spans))
    unillm.instrument(tracer_provider=tracer, meter_provider=MeterProvider(metric_readers=[reader]))
    try:
        # ignore_eos: the tiny model's random weights may sample its end token within 5
        stream = llm.stream(messages=[{"role": "user", "content": "hi"}], max_tokens=5, extra_body=IGNORE_EOS)
        deltas = [d async for d in stream]
    finally:
        unillm.uninstrument()
    last = final_delta(deltas)
    [span] = spans.get_finished_spans()
    a = dict(span.attributes or {})
    assert span.name == "chat tiny" and a["gen_ai.system"] == "vllm"
    assert a["server.port"] == int(llm.base_url.rsplit(":", 1)[1])
    assert last.usage is not None and a["gen_ai.usage.output_tokens"] == last.usage.completion_tokens == 5
    assert a["gen_ai.response.finish_reasons"] == ("length",)
    data = reader.get_metrics_data()
    names = {
        m.name
        for rm in (data.resource_metrics if data else ())
        for sm in rm.scope_metrics
        for m in sm.metrics
    }
    assert {
        "gen_ai.client.operation.duration",
        "gen_ai.client.token.usage",
        "gen_ai.client.operation.time_to_first_chunk",
    } <= names
