"""TGI's answers as unified results: ``/generate`` bodies, ``/generate_stream`` events and the
OpenAI-style chat and completion answers, with finish reasons and stop strings normalised.

Two TGI habits are undone here so answers look the same on every engine:

* finish reasons ``eos_token`` and ``stop_sequence`` become ``"stop"`` (``length`` stays);
* TGI keeps the matched stop string at the end of the text; unillm (like OpenAI, vLLM and
  SGLang) returns the text without it. Streams hold back any tail that could still become a
  stop string, so a stop string is never sent and then taken back.

    decoder = GenerateStreamDecoder(request)
    for data in sse_payloads: deltas = decoder.feed(data)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from unillm.adapter import (
    SHAPE_ERRORS,
    Completion,
    CompletionChoice,
    Delta,
    MalformedResponse,
    Request,
    StreamedReasoning,
    Timings,
    TokenLogprob,
    ToolDeltas,
    TopLogprob,
    UnillmError,
    Usage,
    answer_text,
    choice_delta,
    choices_of,
    decode_event,
    held_suffix,
    malformed,
    parse_logprobs,
    parse_usage,
    reasoning_field,
    with_reasoning,
    with_tool_calls,
)
from unillm_tgi.errors import event_error, is_error_event

ENGINE = "tgi"
_Choice = CompletionChoice[Any]
_Completion = Completion[Any]
_ZERO = Timings(total_s=0.0)
FINISH_REASONS = {"length": "length", "eos_token": "stop", "stop_sequence": "stop", "stop": "stop"}


def finish_reason(raw: Any) -> str | None:
    """Unified finish reason for TGI's (``eos_token`` / ``stop_sequence`` -> ``"stop"``)."""
    if not raw:
        return None
    return FINISH_REASONS.get(str(raw), str(raw))


def strip_stop(text: str, stops: Sequence[str] | None) -> str:
    """``text`` without the stop string TGI left at its end (the longest that matches)."""
    for stop in sorted(stops or (), key=len, reverse=True):
        if text.endswith(stop):
            return text[: len(text) - len(stop)]
    return text


class StopTrimmer:
    """Holds back streamed text that may be the start of a stop string until it is decided."""

    __slots__ = ("_held", "_stops")

    def __init__(self, stops: Sequence[str] | None) -> None:
        self._stops = tuple(stops or ())
        self._held = ""

    def push(self, text: str) -> str:
        """The part of ``text`` (plus what was held) that can be sent now."""
        if not self._stops:
            return text
        buf = self._held + text
        keep = held_suffix(buf, self._stops)
        self._held = buf[len(buf) - keep :] if keep else ""
        return buf[: len(buf) - keep]

    def finish(self, stopped: bool) -> str:
        """What was held, without the trailing stop string when the engine stopped on one."""
        held, self._held = self._held, ""
        return strip_stop(held, self._stops) if stopped else held


def token_logprobs(
    tokens: Sequence[Mapping[str, Any]] | None, tops: Sequence[Sequence[Mapping[str, Any]]] | None
) -> list[TokenLogprob]:
    """Logprobs from TGI ``Token`` lists (``details.tokens`` and ``details.top_tokens``)."""
    alternatives = list(tops or ())
    return [
        TokenLogprob(
            token=str(t["text"]),
            logprob=_finite(t.get("logprob")),
            top=[
                TopLogprob(token=str(a["text"]), logprob=_finite(a.get("logprob")))
                for a in (alternatives[i] if i < len(alternatives) else ())
            ],
        )
        for i, t in enumerate(tokens or ())
    ]


def _finite(value: Any) -> float:
    return float("-inf") if value is None else float(value)


# -- whole answers -------------------------------------------------------------------------------
def parse_generate(body: Mapping[str, Any], request: Request, model: str, version: str | None) -> _Completion:
    """A completion from a ``/generate`` answer; ``best_of_sequences`` become choices 1..n-1.

    The prompt's token count is not in the body (TGI sends it as the ``x-prompt-tokens``
    header, read by the adapter's ``parse_headers``) unless prompt details were asked for.
    """
    details = body.get("details") or {}
    sequences: list[Mapping[str, Any]] = [
        {**details, "generated_text": body["generated_text"]},
        *(details.get("best_of_sequences") or ()),
    ]
    choices = []
    for index, seq in enumerate(sequences):
        raw = seq.get("finish_reason")
        text = answer_text(seq["generated_text"], ENGINE, "generated_text")
        if raw == "stop_sequence":
            text = strip_stop(text, request.stop)
        logprobs = token_logprobs(seq.get("tokens"), seq.get("top_tokens")) if request.logprobs else None
        choices.append(_Choice(index=index, text=text, finish_reason=finish_reason(raw), logprobs=logprobs))
    usage = Usage(
        prompt_tokens=len(details.get("prefill") or ()),
        completion_tokens=sum(int(s.get("generated_tokens") or 0) for s in sequences),
    )
    return _Completion(
        choices=choices, usage=usage, timings=_ZERO, engine=ENGINE, engine_version=version, model=model
    )


def parse_openai(body: Mapping[str, Any], request: Request, model: str, version: str | None) -> _Completion:
    """A completion from TGI's ``/v1/chat/completions`` or ``/v1/completions`` answer."""
    choices = []
    for i, c in enumerate(choices_of(body, ENGINE)):
        message = c.get("message")
        text = (
            answer_text(message.get("content"), ENGINE, "message content", nullable=True)
            if message is not None
            else answer_text(c["text"], ENGINE, "choice text")
        )
        raw = c.get("finish_reason")
        if raw == "stop_sequence":
            text = strip_stop(text, request.stop)
        logprobs = parse_logprobs(c.get("logprobs")) if request.logprobs else None
        choice = with_tool_calls(
            _Choice(index=c.get("index", i), text=text, finish_reason=finish_reason(raw), logprobs=logprobs),
            (message or {}).get("tool_calls"),
            request.tools,
        )
        choices.append(with_reasoning(choice, reasoning_field(message)) if message is not None else choice)
    choices.sort(key=lambda c: c.index)
    return _Completion(
        choices=choices,
        usage=parse_usage(body.get("usage")),
        timings=_ZERO,
        engine=ENGINE,
        engine_version=version,
        model=model,
    )


# -- streams -------------------------------------------------------------------------------------
class GenerateStreamDecoder:
    """Decodes ``/generate_stream`` events: one token each; the last carries ``generated_text``
    and ``details`` (finish reason, generated tokens, input length), which end the stream."""

    __slots__ = ("_request", "_trim", "done")

    def __init__(self, request: Request) -> None:
        self._request = request
        self._trim = StopTrimmer(request.stop)
        self.done = False

    def feed(self, data: str) -> list[Delta]:
        event = decode_event(ENGINE, data)
        if is_error_event(event):
            raise event_error(event, self._request)
        try:
            token = event["token"]
            text = "" if token.get("special") else answer_text(token["text"], ENGINE, "token text")
        except (KeyError, TypeError, AttributeError):
            raise MalformedResponse(f"{ENGINE}: stream event without a token: {data[:200]!r}") from None
        try:
            return self._deltas(event, token, text)
        except UnillmError:
            raise
        except SHAPE_ERRORS as e:
            raise malformed(ENGINE, "/generate_stream event", e) from e

    def _deltas(self, event: dict[str, Any], token: Any, text: str) -> list[Delta]:
        logprobs = (
            token_logprobs([token], [event.get("top_tokens") or ()]) if self._request.logprobs else None
        )
        out = self._trim.push(text)
        if event.get("generated_text") is None:
            return [Delta(text=out, logprobs=logprobs)] if out or logprobs else []
        self.done = True
        details = event.get("details") or {}
        raw = details.get("finish_reason")
        out += self._trim.finish(stopped=raw == "stop_sequence")
        usage = Usage(
            prompt_tokens=int(details.get("input_length") or 0),
            completion_tokens=int(details.get("generated_tokens") or 0),
        )
        return [Delta(text=out, finish_reason=finish_reason(raw), logprobs=logprobs, usage=usage)]


class OpenAIRouteDecoder:
    """Decodes TGI's OpenAI-style streams (chat chunks, or completion chunks whose last one
    carries ``usage`` next to the final choice) up to ``data: [DONE]``.

    TGI's completion stream sends the end-of-sequence token's text in its final chunk; it is
    dropped there, as the non-streamed answer does.
    """

    __slots__ = ("_finish", "_reasoning", "_request", "_tools", "_trim", "done")

    def __init__(self, request: Request) -> None:
        self._request = request
        self._trim = StopTrimmer(request.stop)
        self._tools = ToolDeltas()
        self._reasoning = StreamedReasoning()
        self._finish: str | None = None
        self.done = False

    def feed(self, data: str) -> list[Delta]:
        if data == "[DONE]":
            self.done = True
            return []
        chunk = decode_event(ENGINE, data)
        if is_error_event(chunk):
            raise event_error(chunk, self._request)
        try:
            return self._deltas(chunk)
        except UnillmError:
            raise
        except SHAPE_ERRORS as e:
            raise malformed(ENGINE, "stream chunk", e) from e

    def _deltas(self, chunk: dict[str, Any]) -> list[Delta]:
        deltas = []
        for c in chunk.get("choices") or ():
            delta = c.get("delta")
            raw = c.get("finish_reason") or None
            index = c.get("index", 0)
            calls = self._tools.feed(index, (delta or {}).get("tool_calls"))
            if delta is not None:
                text = answer_text(delta.get("content"), ENGINE, "delta content", nullable=True)
            else:
                text = "" if raw == "eos_token" else answer_text(c.get("text", ""), ENGINE, "choice text")
            out = self._trim.push(text)
            finish = finish_reason(raw)
            if raw:
                out += self._trim.finish(stopped=raw == "stop_sequence")
                finish = self._tools.finish_reason(index, finish or "stop")
                self._finish = finish
            thought = ""
            if delta is not None:
                thought, out = self._reasoning.feed(index, out, reasoning_field(delta), last=bool(raw))
            logprobs = parse_logprobs(c.get("logprobs")) if self._request.logprobs else None
            said = choice_delta(index, out, thought, finish, logprobs, calls)
            if said is not None:
                deltas.append(said)
        usage = chunk.get("usage")
        if usage:
            if deltas:
                deltas[-1].usage = parse_usage(usage)
            else:
                deltas.append(Delta(finish_reason=self._finish, usage=parse_usage(usage)))
        return deltas
