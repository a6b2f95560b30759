"""SGLang's native ``/generate`` API: request bodies, answers and streams (pure functions).

    body = native_body(request, lora="sql")
    HttpCall("POST", "/generate", body, request.stream)

Wire facts (SGLang 0.5.23, verified on a real server): ``sampling_params.json_schema`` is a JSON
*string*; streamed events carry the *cumulative* text (and cumulative logprobs) of their choice,
unless the server runs with ``--incremental-streaming-output``; ``meta_info`` carries
``prompt_tokens``, ``completion_tokens`` and ``finish_reason`` ({"type": "stop"|"length"|"abort"});
``n > 1`` answers a list, and its stream interleaves the choices (told apart by ``meta_info.id``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from unillm.adapter import (
    SHAPE_ERRORS,
    Choice,
    Completion,
    CompletionChoice,
    Constraint,
    Delta,
    Grammar,
    JsonSchema,
    Regex,
    Request,
    Timings,
    TokenLogprob,
    TopLogprob,
    UnillmError,
    Usage,
    answer_text,
    clip_message,
    decode_event,
    error_for_status,
    malformed,
    raise_stream_error,
)

GENERATE_PATH = "/generate"
#: Keys of ``extra_body`` that only ``/generate`` understands: their presence selects it.
NATIVE_ONLY_KEYS = frozenset(
    {
        "sampling_params",
        "input_ids",
        "return_logprob",
        "top_logprobs_num",
        "logprob_start_len",
        "token_ids_logprob",
        "return_text_in_logprobs",
    }
)
_Choice = CompletionChoice[Any]
_Completion = Completion[Any]


def constraint_sampling(output: Constraint) -> dict[str, str]:
    """The ``sampling_params`` field that enforces ``output`` on ``/generate``."""
    if isinstance(output, JsonSchema):
        return {"json_schema": json.dumps(dict(output.schema))}
    if isinstance(output, Regex):
        return {"regex": output.pattern}
    if isinstance(output, Choice):
        return {"regex": output.as_regex()}
    assert isinstance(output, Grammar)
    return {"ebnf": output.text}


def native_body(request: Request, *, lora: str | None) -> dict[str, Any]:
    """The ``/generate`` body for a prompt request (seed -> ``sampling_seed``, SGLang >= 0.5.6).

    ``extra_body`` is merged last; its ``sampling_params`` merge into ours.
    """
    sp: dict[str, Any] = {}
    if request.max_tokens is not None:
        sp["max_new_tokens"] = request.max_tokens
    for key in (
        "temperature",
        "top_p",
        "top_k",
        "min_p",
        "presence_penalty",
        "frequency_penalty",
        "repetition_penalty",
        "n",
    ):
        value = getattr(request, key)
        if value is not None:
            sp[key] = value
    if request.stop is not None:
        sp["stop"] = list(request.stop)
    if request.seed is not None:
        sp["sampling_seed"] = request.seed
    if request.output is not None:
        sp.update(constraint_sampling(request.output))
    body: dict[str, Any] = {"text": request.prompt, "sampling_params": sp}
    if request.stream:
        body["stream"] = True
    if lora is not None:
        body["lora_path"] = lora
    if request.priority is not None:
        body["priority"] = request.priority
    if request.logprobs:
        body.update(
            return_logprob=True,
            return_text_in_logprobs=True,
            logprob_start_len=-1,
            top_logprobs_num=request.top_logprobs or 0,
        )
    extra = dict(request.extra_body or {})
    if isinstance(extra.get("sampling_params"), Mapping):
        sp.update(extra.pop("sampling_params"))
    if "input_ids" in extra:
        body.pop("text")
    body.update(extra)
    return body


def finish_reason(meta: Mapping[str, Any], engine: str = "sglang") -> str | None:
    """ "stop" / "length" / "abort" from ``meta_info.finish_reason`` (None while running).

    An abort that carries an HTTP status (e.g. a grammar that fails to compile, reported inside
    a 200 stream) raises the typed error instead.
    """
    raw = meta.get("finish_reason")
    if raw is None:
        return None
    if isinstance(raw, Mapping):
        status = raw.get("status_code")
        if raw.get("type") == "abort" and isinstance(status, int) and status >= 400:
            message = clip_message(str(raw.get("message") or "aborted").strip())
            raise error_for_status(engine, status, message, None)
        kind = raw.get("type")
        return str(kind) if kind is not None else None
    return str(raw)


def parse_logprobs(meta: Mapping[str, Any], start: int = 0) -> list[TokenLogprob] | None:
    """Token logprobs from ``meta_info`` (entries are ``[logprob, token_id, token_text]``)."""
    tokens = meta.get("output_token_logprobs")
    if not tokens:
        return None
    tops = meta.get("output_top_logprobs") or []
    out = []
    for i in range(start, len(tokens)):
        top = tops[i] if i < len(tops) and tops[i] else []
        out.append(
            TokenLogprob(
                token=_token_text(tokens[i]),
                logprob=_finite(tokens[i][0]),
                top=[TopLogprob(token=_token_text(t), logprob=_finite(t[0])) for t in top],
            )
        )
    return out


def _token_text(entry: Any) -> str:
    text = entry[2] if len(entry) > 2 else None
    return str(entry[1]) if text is None else str(text)


def _finite(value: Any) -> float:
    return float("-inf") if value is None else float(value)


def parse_native(body: Any, engine: str, version: str | None, model: str) -> Completion[Any]:
    """A completion from a ``/generate`` answer (one object, or a list when ``n > 1``)."""
    items = body if isinstance(body, list) else [body]
    try:
        choices = [
            _Choice(
                index=i,
                text=answer_text(item["text"], engine, "text"),
                finish_reason=finish_reason(item["meta_info"], engine),
                logprobs=parse_logprobs(item["meta_info"]),
            )
            for i, item in enumerate(items)
        ]
        metas = [item["meta_info"] for item in items]
        usage = Usage(
            prompt_tokens=int(metas[0].get("prompt_tokens") or 0),
            completion_tokens=sum(int(m.get("completion_tokens") or 0) for m in metas),
            cached_tokens=cached_tokens(metas[0]),
        )
        return _Completion(
            choices=choices,
            usage=usage,
            timings=Timings(total_s=0.0),
            engine=engine,
            engine_version=version,
            model=model,
        )
    except UnillmError:
        raise
    except SHAPE_ERRORS as e:
        raise malformed(engine, "/generate body", e) from e


class NativeStreamDecoder:
    """Turns ``/generate`` stream events (cumulative text per choice) into deltas."""

    def __init__(self, engine: str, *, incremental: bool = False) -> None:
        self._engine, self._incremental = engine, incremental
        self._index: dict[str, int] = {}
        self._text: dict[int, str] = {}
        self._logprobs: dict[int, int] = {}
        self._finish: dict[int, str] = {}
        self._prompt_tokens = 0
        self._cached: int | None = None
        self._completion: dict[int, int] = {}
        self.done = False

    def feed(self, data: str) -> list[Delta]:
        if data == "[DONE]":
            self.done = True
            usage = Usage(
                prompt_tokens=self._prompt_tokens,
                completion_tokens=sum(self._completion.values()),
                cached_tokens=self._cached,
            )
            return [Delta(finish_reason=self._finish.get(0), usage=usage)]
        event = decode_event(self._engine, data)
        raise_stream_error(self._engine, event)
        try:
            return [self._delta(event)]
        except UnillmError:
            raise
        except SHAPE_ERRORS as e:
            raise malformed(self._engine, "/generate stream event", e) from e

    def _delta(self, event: Mapping[str, Any]) -> Delta:
        meta = event["meta_info"]
        key = str(meta.get("id", ""))
        index = int(event["index"]) if "index" in event else self._index.setdefault(key, len(self._index))
        text = answer_text(event.get("text", ""), self._engine, "text")
        before = self._text.get(index, "")
        if self._incremental:
            piece, self._text[index] = text, before + text
        else:
            shared = len(before) if text.startswith(before) else _common_prefix(before, text)
            piece, self._text[index] = text[shared:], text
        logprobs = None
        if meta.get("output_token_logprobs"):
            start = 0 if self._incremental else self._logprobs.get(index, 0)
            logprobs = parse_logprobs(meta, start)
            self._logprobs[index] = start + len(logprobs or ())
        finish = finish_reason(meta, self._engine)
        if finish:
            self._finish[index] = finish
        self._prompt_tokens = int(meta.get("prompt_tokens") or self._prompt_tokens)
        self._cached = cached_tokens(meta) if "cached_tokens" in meta else self._cached
        self._completion[index] = int(meta.get("completion_tokens") or 0)
        return Delta(index=index, text=piece, finish_reason=finish, logprobs=logprobs or None)


def cached_tokens(meta: Mapping[str, Any]) -> int | None:
    """The prompt tokens SGLang served from its radix cache (``meta_info.cached_tokens``); None
    when it does not say.

    Raises:
        ValueError: The count is not a whole number >= 0 (a bool or a string included).
    """
    value = meta.get("cached_tokens")
    if value is None:
        return None
    if type(value) is not int or value < 0:
        raise ValueError(f"meta_info.cached_tokens is {clip_message(repr(value), 40)}, not a token count")
    return value


def _common_prefix(a: str, b: str) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n
