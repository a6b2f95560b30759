"""OpenTelemetry for every engine: a GenAI client span and client metrics per generate/stream.

    import unillm
    unillm.instrument()                 # needs unillm-sdk[otel]; uses the global providers
    ...
    unillm.uninstrument()

Follows OpenTelemetry's GenAI semantic conventions (status: Development): span
``"{gen_ai.operation.name} {gen_ai.request.model}"`` of kind CLIENT with the request parameters,
response model/id, usage, finish reasons, ``error.type``, ``server.address``/``server.port``;
histograms ``gen_ai.client.operation.duration``, ``gen_ai.client.token.usage`` and, for streams,
``gen_ai.client.operation.time_to_first_chunk`` and ``gen_ai.client.operation.time_per_output_chunk``
(one point per gap between content chunks).

As the conventions prescribe for existing instrumentations, the names of conventions v1.36 are
emitted by default (``gen_ai.system``; opt-in content as span events ``gen_ai.content.prompt`` /
``gen_ai.content.completion``); ``OTEL_SEMCONV_STABILITY_OPT_IN=gen_ai_latest_experimental``
switches to the latest (``gen_ai.provider.name``; content in ``gen_ai.input.messages``,
``gen_ai.output.messages``, ``gen_ai.system_instructions``). Prompt and answer text are recorded
only with ``capture_content=True`` (default: ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT``).

Nothing here is imported, and nothing is measured, until ``instrument()`` is called.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from unillm import observe
from unillm.errors import InvalidOptions
from unillm.options import JsonSchema

if TYPE_CHECKING:
    from opentelemetry.metrics import Histogram, MeterProvider
    from opentelemetry.trace import Span, TracerProvider

SCOPE = "unillm"
LATEST = "gen_ai_latest_experimental"
_DURATION_BUCKETS = (0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92)
_TOKEN_BUCKETS = (1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864)
_REQUEST_ATTRS = {
    "max_tokens": "gen_ai.request.max_tokens",
    "temperature": "gen_ai.request.temperature",
    "top_p": "gen_ai.request.top_p",
    "top_k": "gen_ai.request.top_k",
    "seed": "gen_ai.request.seed",
    "presence_penalty": "gen_ai.request.presence_penalty",
    "frequency_penalty": "gen_ai.request.frequency_penalty",
}


def latest_conventions(env: Mapping[str, str] = os.environ) -> bool:
    """True when ``OTEL_SEMCONV_STABILITY_OPT_IN`` lists ``gen_ai_latest_experimental``."""
    return LATEST in {v.strip() for v in env.get("OTEL_SEMCONV_STABILITY_OPT_IN", "").split(",")}


def _env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes")


class OTelObserver:
    """Records a span and the client metrics for each call (see the module docstring).

    Create it with :func:`instrument`; ``latest`` and ``capture_content`` are fixed at creation.
    """

    def __init__(
        self,
        *,
        tracer_provider: TracerProvider | None = None,
        meter_provider: MeterProvider | None = None,
        capture_content: bool | None = None,
        latest: bool | None = None,
    ) -> None:
        from opentelemetry import metrics, trace

        self.latest = latest_conventions() if latest is None else latest
        self.capture_content = (
            _env_flag("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT")
            if capture_content is None
            else capture_content
        )
        self._provider_key = "gen_ai.provider.name" if self.latest else "gen_ai.system"
        self.tracer = trace.get_tracer(SCOPE, tracer_provider=tracer_provider)
        meter = metrics.get_meter(SCOPE, meter_provider=meter_provider)

        def histogram(name: str, unit: str, buckets: Sequence[float], description: str) -> Histogram:
            return meter.create_histogram(
                name, unit=unit, description=description, explicit_bucket_boundaries_advisory=list(buckets)
            )

        self.duration = histogram(
            "gen_ai.client.operation.duration", "s", _DURATION_BUCKETS, "GenAI operation duration."
        )
        self.tokens = histogram(
            "gen_ai.client.token.usage",
            "{token}",
            _TOKEN_BUCKETS,
            "Measures number of input and output tokens used.",
        )
        # the conventions give these two no bucket advice: the operation duration's, as others do
        self.first_chunk = histogram(
            "gen_ai.client.operation.time_to_first_chunk",
            "s",
            _DURATION_BUCKETS,
            "Time to receive the first chunk, measured from when the client issues the "
            "generation request to when the first chunk is received in the response stream.",
        )
        self.per_chunk = histogram(
            "gen_ai.client.operation.time_per_output_chunk",
            "s",
            _DURATION_BUCKETS,
            "Time per output chunk, recorded for each chunk received after the first one.",
        )

    def start(self, call: observe.Call) -> _SpanObservation:
        from opentelemetry.trace import SpanKind

        common = self._common(call)
        attrs: dict[str, Any] = {**common}
        request = call.request
        for key, name in _REQUEST_ATTRS.items():
            value = getattr(request, key)
            if value is not None:
                attrs[name] = value
        if request.stop:
            attrs["gen_ai.request.stop_sequences"] = list(request.stop)
        if request.n is not None and request.n != 1:
            attrs["gen_ai.request.choice.count"] = request.n
        if request.output is not None:
            attrs["gen_ai.output.type"] = "json" if isinstance(request.output, JsonSchema) else "text"
        attrs.update(call.attributes)
        name = f"{call.operation} {call.model}" if call.model else call.operation
        span = self.tracer.start_span(name, kind=SpanKind.CLIENT, attributes=attrs)
        if self.capture_content:
            self._record_input(span, call)
        return _SpanObservation(self, span, common, time.perf_counter())

    def _common(self, call: observe.Call) -> dict[str, Any]:
        attrs: dict[str, Any] = {"gen_ai.operation.name": call.operation, self._provider_key: call.engine}
        if call.model:
            attrs["gen_ai.request.model"] = call.model
        url = _server(call.url)
        if url is not None:
            attrs["server.address"], attrs["server.port"] = url
        return attrs

    def _record_input(self, span: Span, call: observe.Call) -> None:
        request = call.request
        if request.messages is not None:
            messages = [dict(m) for m in request.messages]
        else:
            messages = [{"role": "user", "content": request.prompt or ""}]
        if self.latest:
            system = [m for m in messages if m.get("role") == "system"]
            if system:
                span.set_attribute(
                    "gen_ai.system_instructions",
                    json.dumps([{"type": "text", "content": m.get("content", "")} for m in system]),
                )
            span.set_attribute(
                "gen_ai.input.messages",
                json.dumps(
                    [
                        {"role": m.get("role"), "parts": [{"type": "text", "content": m.get("content", "")}]}
                        for m in messages
                        if m.get("role") != "system"
                    ]
                ),
            )
        else:
            span.add_event("gen_ai.content.prompt", {"gen_ai.prompt": json.dumps(messages)})


class _SpanObservation:
    __slots__ = ("_common", "_observer", "_span", "_started")

    def __init__(self, observer: OTelObserver, span: Span, common: dict[str, Any], started: float) -> None:
        self._observer, self._span, self._common, self._started = observer, span, common, started

    def finish(self, outcome: observe.Outcome) -> None:
        o, span = self._observer, self._span
        elapsed = time.perf_counter() - self._started
        metric_attrs = dict(self._common)
        if outcome.response_model:
            span.set_attribute("gen_ai.response.model", outcome.response_model)
            metric_attrs["gen_ai.response.model"] = outcome.response_model
        if outcome.response_id:
            span.set_attribute("gen_ai.response.id", outcome.response_id)
        reasons = [r for r in outcome.finish_reasons if r is not None]
        if reasons:
            span.set_attribute("gen_ai.response.finish_reasons", reasons)
        if outcome.usage is not None:
            span.set_attribute("gen_ai.usage.input_tokens", outcome.usage.prompt_tokens)
            span.set_attribute("gen_ai.usage.output_tokens", outcome.usage.completion_tokens)
            o.tokens.record(outcome.usage.prompt_tokens, {**metric_attrs, "gen_ai.token.type": "input"})
            o.tokens.record(outcome.usage.completion_tokens, {**metric_attrs, "gen_ai.token.type": "output"})
        timings = outcome.timings
        if outcome.stream and timings is not None and timings.ttft_s is not None:
            o.first_chunk.record(timings.ttft_s, metric_attrs)
            for gap in timings.itl_s:
                o.per_chunk.record(gap, metric_attrs)
            if o.latest:
                span.set_attribute("gen_ai.response.time_to_first_chunk", timings.ttft_s)
        if o.capture_content:
            self._record_output(outcome)
        o.duration.record(elapsed, metric_attrs)
        span.end()

    def fail(self, error: BaseException) -> None:
        from opentelemetry.trace import Status, StatusCode

        kind = type(error).__qualname__
        self._span.set_attribute("error.type", kind)
        self._span.set_status(Status(StatusCode.ERROR, str(error)[:500] or kind))
        self._observer.duration.record(
            time.perf_counter() - self._started, {**self._common, "error.type": kind}
        )
        self._span.end()

    def _record_output(self, outcome: observe.Outcome) -> None:
        n = len(outcome.texts)
        thoughts = _padded(outcome.reasonings, n)
        choices = [
            {
                "role": "assistant",
                "parts": ([{"type": "reasoning", "content": thought}] if thought else [])
                + [{"type": "text", "content": text}],
                "finish_reason": reason or "",
            }
            for text, reason, thought in zip(
                outcome.texts, _padded(outcome.finish_reasons, n), thoughts, strict=True
            )
        ]
        if self._observer.latest:
            self._span.set_attribute("gen_ai.output.messages", json.dumps(choices))
        else:
            self._span.add_event(
                "gen_ai.content.completion",
                {
                    "gen_ai.completion": json.dumps(
                        [
                            {
                                "role": "assistant",
                                "content": text,
                                **({"reasoning": thought} if thought else {}),
                            }
                            for text, thought in zip(outcome.texts, thoughts, strict=True)
                        ]
                    )
                },
            )


def _padded(values: Sequence[str | None], n: int) -> list[str | None]:
    return [*values[:n], *([None] * (n - len(values)))]


def _server(base_url: str) -> tuple[str, int] | None:
    import httpx

    try:
        url = httpx.URL(base_url)
    except httpx.InvalidURL:
        return None
    if not url.host:
        return None
    return url.host, url.port or (443 if url.scheme == "https" else 80)


def instrument(
    *,
    tracer_provider: TracerProvider | None = None,
    meter_provider: MeterProvider | None = None,
    capture_content: bool | None = None,
) -> OTelObserver:
    """Record an OpenTelemetry span and GenAI client metrics for every generate and stream.

        unillm.instrument()                                  # global providers
        unillm.instrument(tracer_provider=tp, meter_provider=mp, capture_content=True)

    Needs ``pip install 'unillm-sdk[otel]'``. Calling it again replaces the previous instrumentation.

    Args:
        tracer_provider: The OpenTelemetry tracer provider; None uses the global one.
        meter_provider: The OpenTelemetry meter provider; None uses the global one.
        capture_content: Record prompts and answers in spans; None reads
            ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT``.

    Returns:
        The registered observer; :func:`uninstrument` stops it.
    """
    try:
        import opentelemetry.metrics
        import opentelemetry.trace  # noqa: F401
    except ImportError:
        raise InvalidOptions(
            "unillm.instrument() needs OpenTelemetry: pip install 'unillm-sdk[otel]'"
        ) from None
    uninstrument()
    observer = OTelObserver(
        tracer_provider=tracer_provider, meter_provider=meter_provider, capture_content=capture_content
    )
    observe.add(observer)
    return observer


def uninstrument() -> None:
    """Stop recording spans and metrics (no error when not instrumented)."""
    for o in observe.OBSERVERS:
        if isinstance(o, OTelObserver):
            observe.remove(o)


__all__ = ["OTelObserver", "instrument", "latest_conventions", "uninstrument"]
