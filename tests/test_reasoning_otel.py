"""OTel spans carry the model's thinking apart from its answer, only with content capture on."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import unillm
from unillm.testing.mock_answers import answering

pytestmark = pytest.mark.anyio
ASK = [{"role": "user", "content": "Hi"}]
ANSWER = "<think>a greeting</think>Hello"


answer = answering(ANSWER, 9, 20)


def spans_of(
    capture: bool, monkeypatch: pytest.MonkeyPatch, *, latest: bool
) -> Iterator[InMemorySpanExporter]:
    if latest:
        monkeypatch.setenv("OTEL_SEMCONV_STABILITY_OPT_IN", "gen_ai_latest_experimental")
    else:
        monkeypatch.delenv("OTEL_SEMCONV_STABILITY_OPT_IN", raising=False)
    out = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(out))
    unillm.instrument(tracer_provider=provider, capture_content=capture)
    try:
        yield out
    finally:
        unillm.uninstrument()


@pytest.fixture
def latest(monkeypatch: pytest.MonkeyPatch) -> Iterator[InMemorySpanExporter]:
    yield from spans_of(True, monkeypatch, latest=True)


@pytest.fixture
def older(monkeypatch: pytest.MonkeyPatch) -> Iterator[InMemorySpanExporter]:
    yield from spans_of(True, monkeypatch, latest=False)


@pytest.fixture
def no_content(monkeypatch: pytest.MonkeyPatch) -> Iterator[InMemorySpanExporter]:
    yield from spans_of(False, monkeypatch, latest=True)


def llm() -> unillm.LLM:
    return unillm.LLM("vllm", "http://engine.invalid", http_transport=httpx.MockTransport(answer))


def attributes(out: InMemorySpanExporter) -> dict[str, Any]:
    (span,) = out.get_finished_spans()
    assert isinstance(span, ReadableSpan)
    return dict(span.attributes or {})


EXPECTED_PARTS = [{"type": "reasoning", "content": "a greeting"}, {"type": "text", "content": "Hello"}]


async def test_the_output_messages_carry_a_reasoning_part(latest: InMemorySpanExporter) -> None:
    async with llm() as client:
        await client.generate(messages=ASK)
    assert json.loads(attributes(latest)["gen_ai.output.messages"])[0]["parts"] == EXPECTED_PARTS


async def test_a_streams_span_carries_the_joined_reasoning(latest: InMemorySpanExporter) -> None:
    async with llm() as client, client.stream(messages=ASK) as s:
        await s.collect()
    assert json.loads(attributes(latest)["gen_ai.output.messages"])[0]["parts"] == EXPECTED_PARTS


async def test_older_conventions_put_the_reasoning_beside_the_content(older: InMemorySpanExporter) -> None:
    async with llm() as client:
        await client.generate(messages=ASK)
    (span,) = older.get_finished_spans()
    events = {e.name: dict(e.attributes or {}) for e in span.events}
    completion = json.loads(str(events["gen_ai.content.completion"]["gen_ai.completion"]))
    assert completion == [{"role": "assistant", "content": "Hello", "reasoning": "a greeting"}]


async def test_without_content_capture_no_reasoning_is_recorded(no_content: InMemorySpanExporter) -> None:
    async with llm() as client:
        await client.generate(messages=ASK)
    assert "a greeting" not in json.dumps(attributes(no_content))
