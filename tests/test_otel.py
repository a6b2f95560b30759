"""OpenTelemetry: GenAI spans and client metrics, read back with the SDK's in-memory exporters.

The engine is a scripted vLLM-layout answer (httpx.MockTransport); the real vLLM's spans are
checked in tests/integration/test_vllm_metrics.py.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import HistogramDataPoint, InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

import unillm
from unillm import observe
from unillm.observe.otel import OTelObserver

pytestmark = pytest.mark.anyio
PIECES = ["Hel", "lo", " wor", "ld"]


def sse(*events: dict[str, Any] | str) -> bytes:
    return b"".join(f"data: {e if isinstance(e, str) else json.dumps(e)}\n\n".encode() for e in events)


def stream_body(chat: bool) -> bytes:
    def chunk(text: str, finish: str | None) -> dict[str, Any]:
        choice: dict[str, Any] = {"index": 0, "finish_reason": finish}
        choice.update({"delta": {"content": text}} if chat else {"text": text})
        return {"id": "cmpl-7", "model": "tiny", "choices": [choice]}

    chunks = [chunk(p, "length" if i == len(PIECES) - 1 else None) for i, p in enumerate(PIECES)]
    usage = {
        "id": "cmpl-7",
        "model": "tiny",
        "choices": [],
        "usage": {"prompt_tokens": 5, "completion_tokens": 4, "total_tokens": 9},
    }
    return sse(*chunks, usage, "[DONE]")


def answer(request: httpx.Request) -> httpx.Response:
    path = request.url.path
    if path == "/version":
        return httpx.Response(200, json={"version": "0.32.0"})
    if path == "/v1/models":
        return httpx.Response(200, json={"data": [{"id": "tiny"}]})
    body = json.loads(request.content)
    if body.get("max_tokens") == 999:
        return httpx.Response(400, json={"error": {"message": "too many tokens", "code": 400}})
    chat = path.endswith("/chat/completions")
    if body.get("stream"):
        return httpx.Response(200, content=stream_body(chat), headers={"content-type": "text/event-stream"})
    message = {"message": {"role": "assistant", "content": "Hello"}} if chat else {"text": "Hello"}
    return httpx.Response(
        200,
        json={
            "id": "cmpl-42",
            "model": "tiny",
            "choices": [{"index": 0, "finish_reason": "stop", **message}],
            "usage": {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7},
        },
    )


def engine() -> unillm.LLM:
    return unillm.LLM("vllm", "http://gpu-1.example:8123", http_transport=httpx.MockTransport(answer))


class Telemetry:
    def __init__(self, capture_content: bool | None = None) -> None:
        self.spans_out = InMemorySpanExporter()
        tracer_provider = TracerProvider()
        tracer_provider.add_span_processor(SimpleSpanProcessor(self.spans_out))
        self.reader = InMemoryMetricReader()
        self.observer = unillm.instrument(
            tracer_provider=tracer_provider,
            meter_provider=MeterProvider(metric_readers=[self.reader]),
            capture_content=capture_content,
        )

    def spans(self) -> list[ReadableSpan]:
        return list(self.spans_out.get_finished_spans())

    def points(self, name: str) -> list[HistogramDataPoint]:
        data = self.reader.get_metrics_data()
        found: list[HistogramDataPoint] = []
        for rm in data.resource_metrics if data else ():
            for sm in rm.scope_metrics:
                for metric in sm.metrics:
                    if metric.name == name:
                        found += [p for p in metric.data.data_points if isinstance(p, HistogramDataPoint)]
        return found


@pytest.fixture
def telemetry(monkeypatch: pytest.MonkeyPatch) -> Iterator[Telemetry]:
    monkeypatch.delenv("OTEL_SEMCONV_STABILITY_OPT_IN", raising=False)
    monkeypatch.delenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", raising=False)
    t = Telemetry()
    yield t
    unillm.uninstrument()


def only(spans: list[ReadableSpan]) -> ReadableSpan:
    assert len(spans) == 1, [s.name for s in spans]
    return spans[0]


# -- spans -----------------------------------------------------------------------------------------
async def test_generate_makes_one_client_span_with_the_genai_attributes(telemetry: Telemetry) -> None:
    async with engine() as llm:
        await llm.generate("Hi", max_tokens=8, temperature=0.5, top_p=0.9, seed=3, stop=["\n"])
    span = only(telemetry.spans())
    assert span.name == "text_completion tiny" and span.kind is SpanKind.CLIENT
    a = dict(span.attributes or {})
    assert a["gen_ai.operation.name"] == "text_completion" and a["gen_ai.system"] == "vllm"
    assert "gen_ai.provider.name" not in a  # the older conventions by default
    assert (
        a["gen_ai.request.model"],
        a["gen_ai.request.max_tokens"],
        a["gen_ai.request.temperature"],
        a["gen_ai.request.top_p"],
        a["gen_ai.request.seed"],
    ) == ("tiny", 8, 0.5, 0.9, 3)
    assert a["gen_ai.request.stop_sequences"] == ("\n",)
    assert (a["gen_ai.response.model"], a["gen_ai.response.id"]) == ("tiny", "cmpl-42")
    assert a["gen_ai.response.finish_reasons"] == ("stop",)
    assert (a["gen_ai.usage.input_tokens"], a["gen_ai.usage.output_tokens"]) == (5, 2)
    assert (a["server.address"], a["server.port"]) == ("gpu-1.example", 8123)
    assert span.status.status_code is StatusCode.UNSET
    assert not span.events and "gen_ai.input.messages" not in a  # no content unless opted in


async def test_latest_conventions_are_opt_in_by_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_SEMCONV_STABILITY_OPT_IN", "http, gen_ai_latest_experimental")
    t = Telemetry()
    try:
        async with engine() as llm:
            await llm.generate(messages=[{"role": "user", "content": "Hi"}], n=2)
    finally:
        unillm.uninstrument()
    a = dict(only(t.spans()).attributes or {})
    assert a["gen_ai.provider.name"] == "vllm" and "gen_ai.system" not in a
    assert a["gen_ai.operation.name"] == "chat" and a["gen_ai.request.choice.count"] == 2


async def test_a_stream_span_carries_usage_finish_and_time_to_first_chunk(telemetry: Telemetry) -> None:
    async with engine() as llm:
        deltas = [d async for d in llm.stream(messages=[{"role": "user", "content": "Hi"}])]
    span = only(telemetry.spans())
    a = dict(span.attributes or {})
    assert span.name == "chat tiny"
    assert a["gen_ai.response.finish_reasons"] == ("length",)
    assert (a["gen_ai.usage.input_tokens"], a["gen_ai.usage.output_tokens"]) == (5, 4)
    assert "".join(d.text for d in deltas) == "".join(PIECES)


async def test_an_engine_error_is_an_error_span_with_its_type(telemetry: Telemetry) -> None:
    async with engine() as llm:
        with pytest.raises(unillm.InvalidRequest):
            await llm.generate("Hi", max_tokens=999)
    span = only(telemetry.spans())
    assert span.status.status_code is StatusCode.ERROR
    assert dict(span.attributes or {})["error.type"] == "InvalidRequest"
    [point] = telemetry.points("gen_ai.client.operation.duration")
    assert dict(point.attributes or {})["error.type"] == "InvalidRequest"


async def test_a_refusal_before_sending_is_recorded_too(telemetry: Telemetry) -> None:
    async with engine() as llm:
        with pytest.raises(unillm.InvalidOptions):
            await llm.generate("Hi", max_tokens=0)
    # invalid options are refused while the request is built: nothing started, so no span either
    assert telemetry.spans() == []
    mlx = unillm.LLM("mlx", "http://mlx.example:8080", http_transport=httpx.MockTransport(answer))
    with pytest.raises(unillm.UnsupportedFeature):
        await mlx.generate("Hi", output=unillm.Regex("a+"))
    assert dict(only(telemetry.spans()).attributes or {})["error.type"] == "UnsupportedFeature"


async def test_leaving_a_stream_early_ends_its_span_without_error(telemetry: Telemetry) -> None:
    async with engine() as llm, llm.stream("Hi") as s:
        async for _ in s:
            break
    span = only(telemetry.spans())
    assert span.status.status_code is StatusCode.UNSET
    assert "gen_ai.usage.output_tokens" not in dict(span.attributes or {})


async def test_attributes_from_the_calling_context_reach_the_span(telemetry: Telemetry) -> None:
    async with engine() as llm:
        with (
            observe.attributes({"unillm.fleet.replica": "gpu-1"}),
            observe.attributes({"unillm.router.route": "sql"}),
        ):
            await llm.generate("Hi")
        await llm.generate("Hi")
    tagged, plain = telemetry.spans()
    assert dict(tagged.attributes or {})["unillm.fleet.replica"] == "gpu-1"
    assert dict(tagged.attributes or {})["unillm.router.route"] == "sql"
    assert "unillm.fleet.replica" not in dict(plain.attributes or {})


async def test_a_fleet_records_one_span_per_replica_call(telemetry: Telemetry) -> None:
    replicas = [
        unillm.LLM("vllm", f"http://replica-{i}.example:80{i}0", http_transport=httpx.MockTransport(answer))
        for i in (1, 2)
    ]
    async with unillm.Fleet(replicas, policy="round_robin") as fleet:
        await fleet.generate("Hi")
        assert "".join([d.text async for d in fleet.stream("Hi")]) == "".join(PIECES)
    spans = telemetry.spans()
    assert [s.name for s in spans] == ["text_completion tiny", "text_completion tiny"]
    ports = {dict(s.attributes or {})["server.port"] for s in spans}
    assert ports == {8010, 8020}  # each span names the replica that answered


# -- content, only when asked --------------------------------------------------------------------
async def test_content_in_older_conventions_goes_to_span_events(telemetry: Telemetry) -> None:
    unillm.uninstrument()
    t = Telemetry(capture_content=True)
    async with engine() as llm:
        await llm.generate("Hi there")
    events = {e.name: dict(e.attributes or {}) for e in only(t.spans()).events}
    assert json.loads(str(events["gen_ai.content.prompt"]["gen_ai.prompt"])) == [
        {"role": "user", "content": "Hi there"}
    ]
    assert json.loads(str(events["gen_ai.content.completion"]["gen_ai.completion"])) == [
        {"role": "assistant", "content": "Hello"}
    ]


async def test_content_in_latest_conventions_is_structured_messages(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_SEMCONV_STABILITY_OPT_IN", "gen_ai_latest_experimental")
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "true")
    t = Telemetry()
    try:
        async with engine() as llm:
            await llm.generate(
                messages=[{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
            )
    finally:
        unillm.uninstrument()
    a = dict(only(t.spans()).attributes or {})
    assert json.loads(str(a["gen_ai.system_instructions"])) == [{"type": "text", "content": "Be brief."}]
    assert json.loads(str(a["gen_ai.input.messages"])) == [
        {"role": "user", "parts": [{"type": "text", "content": "Hi"}]}
    ]
    assert json.loads(str(a["gen_ai.output.messages"])) == [
        {"role": "assistant", "parts": [{"type": "text", "content": "Hello"}], "finish_reason": "stop"}
    ]


# -- metrics --------------------------------------------------------------------------------------
async def test_client_metrics_of_a_stream(telemetry: Telemetry) -> None:
    async with engine() as llm:
        deltas = [d async for d in llm.stream("Hi")]
    timings = deltas[-1].timings
    assert timings is not None and timings.ttft_s is not None
    [duration] = telemetry.points("gen_ai.client.operation.duration")
    assert duration.count == 1 and duration.sum >= timings.total_s
    usage = {
        dict(p.attributes or {})["gen_ai.token.type"]: p.sum
        for p in telemetry.points("gen_ai.client.token.usage")
    }
    assert usage == {"input": 5, "output": 4}
    [first] = telemetry.points("gen_ai.client.operation.time_to_first_chunk")
    assert first.count == 1 and first.sum == pytest.approx(timings.ttft_s)
    [per_chunk] = telemetry.points("gen_ai.client.operation.time_per_output_chunk")
    assert per_chunk.count == len(PIECES) - 1 and per_chunk.sum == pytest.approx(sum(timings.itl_s))
    a = dict(duration.attributes or {})
    assert (a["gen_ai.operation.name"], a["gen_ai.system"], a["gen_ai.request.model"]) == (
        "text_completion",
        "vllm",
        "tiny",
    )
    assert "gen_ai.response.model" not in a  # stream deltas do not carry the response model
    assert a["server.port"] == 8123 and "error.type" not in a


async def test_chunk_metrics_are_for_streams_only(telemetry: Telemetry) -> None:
    async with engine() as llm:
        await llm.generate("Hi")
    assert telemetry.points("gen_ai.client.operation.time_to_first_chunk") == []
    assert telemetry.points("gen_ai.client.operation.time_per_output_chunk") == []
    [duration] = telemetry.points("gen_ai.client.operation.duration")
    assert dict(duration.attributes or {})["gen_ai.response.model"] == "tiny"


# -- cost when not enabled -------------------------------------------------------------------------
async def test_instrument_twice_replaces_and_uninstrument_stops(telemetry: Telemetry) -> None:
    second = Telemetry()
    assert [o for o in observe.OBSERVERS if isinstance(o, OTelObserver)] == [second.observer]
    unillm.uninstrument()
    assert observe.OBSERVERS == ()
    async with engine() as llm:
        await llm.generate("Hi")
    assert telemetry.spans() == [] and second.spans() == []


def test_opentelemetry_is_never_imported_unless_instrumented() -> None:
    # a fresh interpreter: generate and stream, then list the opentelemetry modules loaded
    script = """if True:
        import json, sys, anyio, httpx, unillm
        STREAM = b'data: {"choices": [{"index": 0, "text": "a", "finish_reason": "stop"}]}\\n\\n' \\
            b'data: [DONE]\\n\\n'
        def answer(request):
            if request.url.path == "/version":
                return httpx.Response(200, json={"version": "0.32.0"})
            if request.url.path == "/v1/models":
                return httpx.Response(200, json={"data": [{"id": "tiny"}]})
            if json.loads(request.content).get("stream"):
                return httpx.Response(200, content=STREAM, headers={"content-type": "text/event-stream"})
            return httpx.Response(200, json={"choices": [{"index": 0, "text": "a", "finish_reason": "stop"}]})
        async def main():
            async with unillm.LLM("vllm", "http://e:1", http_transport=httpx.MockTransport(answer)) as llm:
                assert (await llm.generate("Hi")).text == "a"
                assert [d.text async for d in llm.stream("Hi")] == ["a"]
        anyio.run(main)
        print(sorted(m for m in sys.modules if m.startswith("opentelemetry")))
    """
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
