"""Ollama's answers as unified results: GenerateResponse / ChatResponse bodies and their NDJSON streams.

A stream is one JSON object a line (the core reads ``application/x-ndjson`` line by line); the
last has ``done: true`` with ``done_reason`` and the token counts (``prompt_eval_count``,
``eval_count``). An error after the stream began is a line ``{"error": "..."}``. The model's
thought is Ollama's ``message.thinking`` (chat) or ``thinking`` (generate), whole or a piece a
chunk; where none came, a thought between markers (``<think>``) at the start of the content is
split off it, as for every engine without a reasoning parser.

    decoder = NDJSONDecoder(request, chat=True)
    for line in lines: deltas = decoder.feed(line)
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from unillm.adapter import (
    Completion,
    CompletionChoice,
    Delta,
    ForcedCallStream,
    MalformedResponse,
    Request,
    StreamedReasoning,
    Timings,
    TokenLogprob,
    ToolCallDelta,
    TopLogprob,
    Usage,
    answer_text,
    error_for_status,
    with_reasoning,
    with_tool_calls,
)
from unillm_ollama.requests import forced_choice

ENGINE = "ollama"
FINISH_REASONS = {"stop": "stop", "length": "length"}


def finish_reason(chunk: Mapping[str, Any]) -> str | None:
    """The unified finish reason of a ``done`` chunk (Ollama's ``done_reason``; None before the end)."""
    if not chunk.get("done"):
        return None
    raw = str(chunk.get("done_reason") or "stop")
    return FINISH_REASONS.get(raw, raw)


def usage(chunk: Mapping[str, Any]) -> Usage:
    """Token counts of a final chunk (``prompt_eval_count``, ``eval_count``)."""
    prompt, completion = int(chunk.get("prompt_eval_count") or 0), int(chunk.get("eval_count") or 0)
    return Usage(prompt_tokens=prompt, completion_tokens=completion, total_tokens=prompt + completion)


def logprobs(raw: Any) -> list[TokenLogprob] | None:
    """Ollama's ``logprobs`` list (token, logprob, top_logprobs) as unillm's."""
    if not raw:
        return None
    return [
        TokenLogprob(
            token=str(p["token"]),
            logprob=float(p["logprob"]),
            top=[
                TopLogprob(token=str(t["token"]), logprob=float(t["logprob"]))
                for t in p.get("top_logprobs") or ()
            ],
        )
        for p in raw
    ]


def check_error(chunk: Any, request: Request | None) -> Mapping[str, Any]:
    """``chunk`` as an object, or the typed error an ``{"error": ...}`` line reports."""
    if not isinstance(chunk, Mapping):
        raise MalformedResponse(f"ollama: expected a JSON object, got {str(chunk)[:200]!r}")
    if chunk.get("error"):
        raise error_for_status(ENGINE, 500, str(chunk["error"]), request)
    return chunk


def _text(chunk: Mapping[str, Any], chat: bool) -> str:
    if chat:
        return answer_text(
            (chunk.get("message") or {}).get("content"), ENGINE, "message content", nullable=True
        )
    return answer_text(chunk.get("response", ""), ENGINE, "response")


def _thinking(chunk: Mapping[str, Any], chat: bool) -> str | None:
    """The chunk's thought (Ollama's ``thinking``, omitted when empty); None: it sent none."""
    value = (chunk.get("message") or {}).get("thinking") if chat else chunk.get("thinking")
    return value if isinstance(value, str) and value else None


def parse_answer(
    body: Any, request: Request, model: str, version: str | None, *, chat: bool
) -> Completion[Any]:
    """A completion from one non-streamed GenerateResponse or ChatResponse."""
    chunk = check_error(body, request)
    if "done" not in chunk:
        raise MalformedResponse(f"ollama: the answer has no 'done' field: {str(body)[:200]!r}")
    choice = CompletionChoice[Any](
        index=0,
        text=_text(chunk, chat),
        finish_reason=finish_reason(chunk) or "stop",
        logprobs=logprobs(chunk.get("logprobs")),
    )
    choice = with_reasoning(
        choice, _thinking(chunk, chat)
    )  # the thought first: a forced call is read from the answer
    raw_calls = (chunk.get("message") or {}).get("tool_calls") if chat else chunk.get("tool_calls")
    choice = with_tool_calls(choice, raw_calls, request.tools, forced_choice(request))
    return Completion[Any](
        choices=[choice],
        usage=usage(chunk),
        timings=Timings(total_s=0.0),
        engine=ENGINE,
        engine_version=version,
        model=str(chunk.get("model") or model),
    )


class NDJSONDecoder:
    """Decodes the lines of one Ollama stream (``/api/generate`` or ``/api/chat``) into deltas."""

    __slots__ = ("_calls", "_chat", "_forced", "_reasoning", "_request", "done")

    def __init__(self, request: Request, *, chat: bool) -> None:
        self._request = request
        self._chat = chat
        choice = forced_choice(request)
        self._forced = ForcedCallStream(choice) if choice is not None else None
        self._calls = 0  # tool calls delivered so far (Ollama sends each whole, in one line)
        self._reasoning = StreamedReasoning()
        self.done = False

    def feed(self, data: str) -> list[Delta]:
        """Decode one NDJSON line.

        Args:
            data: One line of the stream (a JSON object).

        Returns:
            The deltas it carries (possibly none).

        Raises:
            EngineError: The line reports an error.
        """
        try:
            raw = json.loads(data)
        except ValueError:
            raise MalformedResponse(f"ollama: a stream line is not JSON: {data[:200]!r}") from None
        chunk = check_error(raw, self._request)
        finish = finish_reason(chunk)
        thought, text = self._reasoning.feed(
            0, _text(chunk, self._chat), _thinking(chunk, self._chat), last=finish is not None
        )
        calls = self._tool_calls(chunk)
        if self._forced is not None:
            calls = self._forced.feed(text) + (self._forced.finish() if finish else [])
            text = ""
            self._calls = max(self._calls, 1 if calls else 0)
        if self._calls and finish == "stop":
            finish = "tool_calls"
        deltas = []
        if text or thought or calls or chunk.get("logprobs"):
            deltas.append(
                Delta(
                    text=text,
                    reasoning=thought,
                    tool_calls=calls or None,
                    logprobs=logprobs(chunk.get("logprobs")),
                )
            )
        if finish is not None:
            self.done = True
            deltas.append(Delta(finish_reason=finish, usage=usage(chunk)))
        return deltas

    def _tool_calls(self, chunk: Mapping[str, Any]) -> list[ToolCallDelta]:
        raw = (chunk.get("message") or {}).get("tool_calls") if self._chat else chunk.get("tool_calls")
        out = []
        for call in raw or ():
            function = call.get("function") or {}
            out.append(
                ToolCallDelta(
                    index=self._calls,
                    id=call.get("id") or f"call_{self._calls}",
                    name=str(function.get("name") or ""),
                    arguments=json.dumps(function.get("arguments") or {}),
                )
            )
            self._calls += 1
        return out
