"""A small TGI look-alike speaking TGI 3.3's wire format, for end-to-end tests of the adapter.

Raw asyncio on 127.0.0.1 (free port) in a background thread, so it can also cut a stream at
any byte::

    with TGIServer(loras={"sql": ("SELECT", " 1")}) as server:
        llm = unillm.connect("tgi", server.url)
        ...
        server.requests[-1].body      # what the adapter sent

What it mimics (from TGI's router source): ``/info``, ``/health``, ``/metrics``, ``/tokenize``,
``/chat_tokenize``, ``/generate`` (``details``, ``best_of_sequences``, ``top_tokens``, the
``x-prompt-tokens`` header), ``/generate_stream`` (one event per token, the end-of-sequence
token marked ``special``, the last event with ``generated_text`` + ``details``; errors as
events with HTTP 200), ``/v1/chat/completions`` and ``/v1/completions`` (TGI's chunk shapes,
``[DONE]``), TGI's validation errors (422 with its messages), stop strings kept at the end of
the text, and an unknown ``adapter_id`` silently served by the base model. A "token" is one
piece of ``pieces``; the tokenizer counts one token per character of the prompt.

Every request body and every JSON answer is checked against TGI's published OpenAPI schema
when it is available: a mismatch is recorded in ``errors`` (a test must assert it is empty)
and the request is answered 422 like TGI's JSON extractor would.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from tgi_openapi import Contract

from unillm.testing.background_server import BackgroundServer, read_request, response_head, send
from unillm.testing.fault_server import Seen
from unillm.testing.probing import regex_answer, schema_instance

GENERATION_PATHS = ("/generate", "/generate_stream", "/v1/chat/completions", "/v1/completions")
EOS = "</s>"

FaultKind = Literal["status", "http", "stream_error", "drop", "truncate"]


@dataclass
class Fault:
    """What generation requests get instead of a normal answer (the first ``times`` ones)."""

    kind: FaultKind
    status: int = 500
    error_type: str = "generation"
    message: str = "injected fault"
    body: bytes | None = None
    after: int = 0
    times: int | None = None


@dataclass
class _Generation:
    pieces: list[str]
    finish: str
    prompt_tokens: int
    seed: int | None = None
    top_n: int = 0
    tokens: list[dict[str, Any]] = field(default_factory=list)


class TGIServer(BackgroundServer):
    """TGI-compatible HTTP server on 127.0.0.1 (free port)."""

    def __init__(
        self,
        *,
        model_id: str = "tiny-llama",
        version: str = "3.3.6-dev0",
        pieces: tuple[str, ...] = ("Hello", ",", " world", "!"),
        loras: Mapping[str, tuple[str, ...]] | None = None,
        max_input_tokens: int = 64,
        max_total_tokens: int = 128,
        max_best_of: int = 2,
        max_stop_sequences: int = 4,
        max_top_n_tokens: int = 5,
        api_key: str | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        super().__init__(host, port)
        self.model_id, self.version, self.pieces = model_id, version, pieces
        self.loras = dict(loras or {})
        self.max_input_tokens, self.max_total_tokens = max_input_tokens, max_total_tokens
        self.max_best_of, self.max_stop_sequences = max_best_of, max_stop_sequences
        self.max_top_n_tokens, self.api_key = max_top_n_tokens, api_key
        self.contract = Contract.load()
        self.fault: Fault | None = None
        self.fault_hits = 0
        self.requests: list[Seen] = []
        self.disconnected = threading.Event()

    # -- faults ------------------------------------------------------------------------------
    def fail(self, status: int, error_type: str, message: str, *, times: int | None = None) -> None:
        """Answer like TGI's error path: HTTP ``status`` + ErrorResponse; on a stream, HTTP 200
        and an error event (native: ``error_type``; OpenAI routes: ``http_status_code``)."""
        self.fault, self.fault_hits = Fault("status", status, error_type, message, times=times), 0

    def fail_http(self, status: int, body: bytes, *, times: int | None = None) -> None:
        """Answer ``status`` with a raw body, streams included (a proxy, axum's extractor...)."""
        self.fault, self.fault_hits = Fault("http", status, body=body, times=times), 0

    def stream_error(self, after: int, error_type: str, message: str) -> None:
        """Send ``after`` token events, then an error event."""
        self.fault, self.fault_hits = Fault("stream_error", 200, error_type, message, after=after), 0

    def drop(self, after: int) -> None:
        """Send ``after`` token events, then close the connection mid-stream."""
        self.fault, self.fault_hits = Fault("drop", after=after), 0

    def truncate(self, after: int) -> None:
        """Send ``after`` token events, then end the stream cleanly without the final event."""
        self.fault, self.fault_hits = Fault("truncate", after=after), 0

    def count(self, path: str | None = None) -> int:
        """Requests received for ``path`` (default: generation requests)."""
        paths = GENERATION_PATHS if path is None else (path,)
        return sum(1 for r in list(self.requests) if r.path in paths)

    # -- HTTP --------------------------------------------------------------------------------
    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while (request := await read_request(reader)) is not None:
            body = request.json if request.json is not None else (request.raw or None)
            seen = Seen(request.method, request.path, request.headers, body)
            self.requests.append(seen)
            if not await self._answer(seen, writer):
                return

    async def _json(
        self,
        writer: asyncio.StreamWriter,
        status: int,
        payload: Any,
        path: str,
        headers: Mapping[str, str] | None = None,
    ) -> bool:
        self._check_answer(path, status, "application/json", payload)
        return await send(writer, status, json.dumps(payload).encode(), headers=headers)

    def _check_answer(self, path: str, status: int, content_type: str, payload: Any) -> None:
        method = "get" if path in ("/info", "/health", "/metrics") else "post"
        errors = list(
            self.contract.response_validator(path, status, content_type, method).iter_errors(payload)
        )
        if errors:
            self.errors.append(f"answer to {path} breaks the contract: {errors[0].message}")

    async def _answer(self, seen: Seen, writer: asyncio.StreamWriter) -> bool:
        path, body = seen.path, seen.body
        protected = (*GENERATION_PATHS, "/tokenize")  # like TGI: info routes stay open
        if (
            self.api_key
            and path in protected
            and seen.headers.get("authorization") != f"Bearer {self.api_key}"
        ):
            return await send(writer, 401, b"", "text/plain")
        if seen.method == "GET":
            if path == "/info":
                return await self._json(writer, 200, self._info(), path)
            if path == "/health":
                return await send(writer, 200, b"")
            if path == "/metrics":
                text = (
                    "# TYPE tgi_request_count counter\n"
                    f"tgi_request_count {self.count()}\n"
                    "# TYPE tgi_queue_size gauge\ntgi_queue_size 0\n"
                )
                return await send(writer, 200, text.encode(), "text/plain")
            return await send(writer, 404, b"")
        if path not in (*GENERATION_PATHS, "/tokenize", "/chat_tokenize"):
            return await send(writer, 404, b"")
        problems = list(self.contract.request_validator(path).iter_errors(body))
        if problems:
            message = f"Failed to deserialize the JSON body into the target type: {problems[0].message}"
            self.errors.append(f"request to {path} breaks the contract: {problems[0].message}")
            return await send(writer, 422, message.encode(), "text/plain; charset=utf-8")
        assert isinstance(body, dict)
        if path == "/tokenize":
            return await self._json(writer, 200, _tokens(body["inputs"]), path)
        if path == "/chat_tokenize":
            text = _template(body["messages"])
            return await self._json(
                writer, 200, {"tokenize_response": _tokens(text), "templated_text": text}, path
            )
        stream = path == "/generate_stream" or bool(body.get("stream"))
        fault = self.fault
        if fault is not None and (fault.times is None or self.fault_hits < fault.times):
            self.fault_hits += 1
            if fault.kind == "http":
                return await send(writer, fault.status, fault.body or b"", "text/plain")
            if fault.kind == "status" and not stream:
                return await self._json(writer, fault.status, _error(fault), path)
        else:
            fault = None
        try:
            generation = self._generate(path, body)
        except _Invalid as e:
            invalid = Fault("status", 422, "validation", f"Input validation error: {e}")
            if stream:  # TGI validates inside the stream: HTTP 200 and an error event
                return await self._stream(writer, path, body, None, fault=invalid)
            return await self._json(writer, 422, _error(invalid), path)
        if stream:
            return await self._stream(writer, path, body, generation, fault=fault)
        return await self._whole(writer, path, body, generation)

    # -- generation --------------------------------------------------------------------------
    def _generate(self, path: str, body: dict[str, Any]) -> _Generation:
        chat = path == "/v1/chat/completions"
        if path.startswith("/generate"):
            inputs, p = body["inputs"], dict(body.get("parameters") or {})
        else:
            inputs = _template(body["messages"]) if chat else body["prompt"][0]
            p = {
                "max_new_tokens": body.get("max_tokens"),
                "stop": body.get("stop") or [],
                "seed": body.get("seed"),
                "top_p": body.get("top_p"),
                "adapter_id": None if body.get("model") in (None, "tgi") else body["model"],
                "grammar": body.get("response_format"),
                "top_n_tokens": body.get("top_logprobs") if chat else None,
            }
            t = body.get("temperature")
            p["temperature"] = None if t == 0 else t
        _validate(p, len(inputs), self, stream=path == "/generate_stream")
        pieces = list(self.loras.get(p.get("adapter_id") or "", self.pieces))  # unknown: base model
        constrained = _constrained(p["grammar"]) if p.get("grammar") else None
        if constrained is not None:  # one piece, valid for the grammar
            pieces = [constrained]
        limit = p.get("max_new_tokens")
        out: list[str] = []
        finish = "eos_token"
        for piece in pieces:
            if limit is not None and len(out) >= limit:
                finish = "length"
                break
            out.append(piece)
            text = "".join(out)
            if any(text.endswith(s) for s in p.get("stop") or ()):
                finish = "stop_sequence"
                break
        if finish == "eos_token" and limit is not None and len(out) >= limit:
            finish = "length"
        g = _Generation(out, finish, len(inputs), seed=p.get("seed"), top_n=p.get("top_n_tokens") or 0)
        g.tokens = [_token(i, t) for i, t in enumerate(out)]
        if finish == "eos_token":
            g.tokens.append(_token(len(out), EOS, special=True))
        return g

    def _details(self, g: _Generation, best_of: int) -> dict[str, Any]:
        details: dict[str, Any] = {
            "finish_reason": g.finish,
            "generated_tokens": len(g.tokens),
            "prefill": [],
            "tokens": g.tokens,
            "seed": g.seed,
        }
        if g.top_n:
            details["top_tokens"] = [_alternatives(t, g.top_n) for t in g.tokens]
        if best_of > 1:
            details["best_of_sequences"] = [
                {
                    "generated_text": "".join(g.pieces),
                    "finish_reason": g.finish,
                    "generated_tokens": len(g.tokens),
                    "prefill": [],
                    "tokens": g.tokens,
                    "seed": 7 + i,
                }
                for i in range(best_of - 1)
            ]
            details["seed"] = 7
        return details

    async def _whole(
        self, writer: asyncio.StreamWriter, path: str, body: dict[str, Any], g: _Generation
    ) -> bool:
        text = "".join(g.pieces)
        headers = {"x-prompt-tokens": str(g.prompt_tokens), "x-generated-tokens": str(len(g.tokens))}
        if path == "/generate":
            p = body.get("parameters") or {}
            answer: dict[str, Any] = {"generated_text": text}
            if p.get("details"):
                answer["details"] = self._details(g, int(p.get("best_of") or 1))
            return await self._json(writer, 200, answer, path, headers)
        usage = {
            "prompt_tokens": g.prompt_tokens,
            "completion_tokens": len(g.tokens),
            "total_tokens": g.prompt_tokens + len(g.tokens),
        }
        finish = "stop" if g.finish == "eos_token" else g.finish
        base = {
            "id": "",
            "created": int(time.time()),
            "model": self.model_id,
            "system_fingerprint": f"{self.version}-native",
            "usage": usage,
        }
        if path == "/v1/chat/completions":
            choice: dict[str, Any] = {
                "index": 0,
                "finish_reason": finish,
                "message": _tool_call(body) or {"role": "assistant", "content": text},
            }
            if body.get("logprobs"):
                choice["logprobs"] = {"content": [_chat_logprob(t, g.top_n) for t in g.tokens]}
            return await self._json(
                writer, 200, {**base, "object": "chat.completion", "choices": [choice]}, path, headers
            )
        return await self._json(
            writer,
            200,
            {
                **base,
                "object": "text_completion",
                "choices": [{"index": 0, "text": text, "finish_reason": finish, "logprobs": None}],
            },
            path,
            headers,
        )

    async def _stream(
        self,
        writer: asyncio.StreamWriter,
        path: str,
        body: dict[str, Any],
        g: _Generation | None,
        *,
        fault: Fault | None = None,
    ) -> bool:
        writer.write(
            response_head(200, {"content-type": "text/event-stream", "transfer-encoding": "chunked"})
        )
        native, chat = path == "/generate_stream", path == "/v1/chat/completions"

        async def emit(payload: Any) -> None:
            data = payload if isinstance(payload, str) else json.dumps(payload)
            if not isinstance(payload, str):
                self._check_event(path, payload)
            chunk = f"data: {data}\n\n".encode()
            writer.write(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
            await writer.drain()

        async def end() -> bool:
            writer.write(b"0\r\n\r\n")
            await writer.drain()
            return True

        async def emit_error(fault: Fault) -> None:
            await emit(_error(fault) if native else _openai_error(fault))
            if not native:
                await emit("[DONE]")

        try:
            if (fault is not None and fault.kind == "status") or g is None:
                assert fault is not None
                await emit_error(fault)
                return await end()
            tokens = g.tokens
            for i, token in enumerate(tokens):
                if fault is not None and i == fault.after:
                    if fault.kind == "drop":
                        self.disconnected.set()
                        return False  # close the connection mid-stream
                    if fault.kind == "truncate":
                        return await end()
                    if fault.kind == "stream_error":
                        await emit_error(fault)
                        return await end()
                last = i == len(tokens) - 1
                await emit(self._event(path, body, g, i, token, last))
                if chat and last and (body.get("stream_options") or {}).get("include_usage"):
                    await emit(self._usage_event(g))
            if not native:
                await emit("[DONE]")
            return await end()
        except ConnectionError:
            self.disconnected.set()
            return False

    def _usage_event(self, g: _Generation) -> dict[str, Any]:
        """The chat stream's closing chunk: no choices, the token counts."""
        return {
            "id": "",
            "created": int(time.time()),
            "model": self.model_id,
            "system_fingerprint": f"{self.version}-native",
            "choices": [],
            "usage": _usage(g),
            "object": "chat.completion.chunk",
        }

    def _event(
        self, path: str, body: dict[str, Any], g: _Generation, i: int, token: dict[str, Any], last: bool
    ) -> dict[str, Any]:
        if path == "/generate_stream":
            event: dict[str, Any] = {"index": i + 1, "token": token, "generated_text": None, "details": None}
            if g.top_n:
                event["top_tokens"] = _alternatives(token, g.top_n)
            if last:
                event["generated_text"] = "".join(g.pieces)
                if (body.get("parameters") or {}).get("details"):
                    event["details"] = {
                        "finish_reason": g.finish,
                        "generated_tokens": len(g.tokens),
                        "input_length": g.prompt_tokens,
                        "seed": g.seed,
                    }
            return event
        base = {
            "id": "",
            "created": int(time.time()),
            "model": self.model_id,
            "system_fingerprint": f"{self.version}-native",
        }
        if path == "/v1/chat/completions":
            finish = ("stop" if g.finish == "eos_token" else g.finish) if last else None
            content = "" if token["special"] else token["text"]
            choice: dict[str, Any] = {
                "index": 0,
                "finish_reason": finish,
                "delta": {"role": "assistant", "content": content},
            }
            if body.get("logprobs"):
                choice["logprobs"] = {"content": [_chat_logprob(token, g.top_n)]}
            return {**base, "object": "chat.completion.chunk", "choices": [choice], "usage": None}
        # /v1/completions: "" finish on every chunk but the last, which carries usage inline
        choice = {
            "index": 0,
            "text": token["text"],
            "finish_reason": g.finish if last else "",
            "logprobs": None,
        }
        if last:
            return {**base, "object": "text_completion", "choices": [choice], "usage": _usage(g)}
        return {**base, "object": "text_completion", "choices": [choice]}

    def _check_event(self, path: str, payload: Any) -> None:
        if isinstance(payload, dict) and "error" in payload:
            if isinstance(payload["error"], str):
                self.contract.check_schema("ErrorResponse", payload)
            return
        if path == "/v1/completions" and "usage" in payload:  # the last chunk
            self.contract.check_schema("CompletionFinal", payload)
        else:
            self._check_answer(path, 200, "text/event-stream", payload)

    def _info(self) -> dict[str, Any]:
        return {
            "model_id": self.model_id,
            "model_sha": None,
            "model_pipeline_tag": "text-generation",
            "max_concurrent_requests": 128,
            "max_best_of": self.max_best_of,
            "max_stop_sequences": self.max_stop_sequences,
            "max_input_tokens": self.max_input_tokens,
            "max_total_tokens": self.max_total_tokens,
            "validation_workers": 2,
            "max_client_batch_size": 4,
            "router": "text-generation-router",
            "version": self.version,
            "sha": None,
            "docker_label": None,
        }


class _Invalid(Exception):
    """A request TGI's validation refuses (message as TGI words it)."""


def _validate(p: dict[str, Any], input_length: int, s: TGIServer, *, stream: bool) -> None:
    """TGI's router/src/validation.rs checks, in its order and words."""
    best_of = p.get("best_of") or 1
    if best_of > 1 and stream:
        raise _Invalid("`best_of` != 1 is not supported when streaming tokens")
    sampling = p.get("do_sample") or any(p.get(k) is not None for k in ("temperature", "top_k", "top_p"))
    if best_of > s.max_best_of:
        raise _Invalid(f"`best_of` must be > 0 and <= {s.max_best_of}. Given: {best_of}")
    if best_of > 1 and not sampling:
        raise _Invalid("you must use sampling when `best_of` is > 1")
    if p.get("temperature") is not None and p["temperature"] <= 0:
        raise _Invalid("`temperature` must be strictly positive")
    if p.get("top_p") is not None and not 0 < p["top_p"] < 1:
        raise _Invalid("`top_p` must be > 0.0 and < 1.0")
    if p.get("top_k") is not None and p["top_k"] <= 0:
        raise _Invalid("`top_k` must be strictly positive")
    stops = p.get("stop") or []
    if len(stops) > s.max_stop_sequences:
        raise _Invalid(f"`stop` supports up to {s.max_stop_sequences} stop sequences. Given: {len(stops)}")
    if best_of > 1 and p.get("seed") is not None:
        raise _Invalid("`seed` must not be set when `best_of` > 1")
    if (p.get("top_n_tokens") or 0) > s.max_top_n_tokens:
        raise _Invalid(f"`top_n_tokens` must be >= 0 and <= {s.max_top_n_tokens}. Given: {p['top_n_tokens']}")
    new = p.get("max_new_tokens")
    if new is not None and input_length + min(new, 1024) > s.max_total_tokens:
        raise _Invalid(
            f"`inputs` tokens + `max_new_tokens` must be <= {s.max_total_tokens}. "
            f"Given: {input_length} `inputs` tokens and {new} `max_new_tokens`"
        )
    if input_length > s.max_input_tokens:
        raise _Invalid(f"`inputs` must have less than {s.max_input_tokens} tokens. Given: {input_length}")


def _tool_call(body: dict[str, Any]) -> dict[str, Any] | None:
    """The message calling a tool when ``tool_choice`` forces one (TGI's grammar does): the named
    tool, or the first, with arguments valid for its parameters; None otherwise."""
    choice, tools = body.get("tool_choice"), body.get("tools") or []
    if not tools or not (choice == "required" or isinstance(choice, dict)):
        return None
    name = choice["function"]["name"] if isinstance(choice, dict) else tools[0]["function"]["name"]
    tool = next(t["function"] for t in tools if t["function"]["name"] == name)
    arguments = json.dumps(schema_instance(tool.get("arguments") or {}))  # TGI: the parameters
    call = {"id": "0", "type": "function", "function": {"name": name, "arguments": arguments}}
    return {"role": "assistant", "tool_calls": [call]}


def _constrained(grammar: dict[str, Any]) -> str | None:
    """An answer valid for TGI's ``GrammarType`` (json: an instance of the schema; regex: a match),
    or None when the look-alike has none."""
    value = grammar["value"]
    if grammar["type"] == "json":
        return json.dumps(schema_instance(json.loads(value) if isinstance(value, str) else value))
    return regex_answer(value)


def _template(messages: list[dict[str, Any]]) -> str:
    return "".join(f"<|{m['role']}|>{m['content']}\n" for m in messages) + "<|assistant|>"


def _tokens(text: str) -> list[dict[str, Any]]:
    return [{"id": ord(c) % 512, "text": c, "start": i, "stop": i + 1} for i, c in enumerate(text)]


def _token(i: int, text: str, *, special: bool = False) -> dict[str, Any]:
    return {"id": 100 + i, "text": text, "logprob": -0.5 - i / 10, "special": special}


def _alternatives(token: dict[str, Any], n: int) -> list[dict[str, Any]]:
    return [{**token, "id": token["id"] + k, "logprob": token["logprob"] - k} for k in range(n)]


def _chat_logprob(token: dict[str, Any], n: int) -> dict[str, Any]:
    return {
        "token": token["text"],
        "logprob": token["logprob"],
        "top_logprobs": [{"token": a["text"], "logprob": a["logprob"]} for a in _alternatives(token, n)],
    }


def _usage(g: _Generation) -> dict[str, int]:
    return {
        "prompt_tokens": g.prompt_tokens,
        "completion_tokens": len(g.tokens),
        "total_tokens": g.prompt_tokens + len(g.tokens),
    }


def _error(fault: Fault) -> dict[str, str]:
    return {"error": fault.message, "error_type": fault.error_type}


def _openai_error(fault: Fault) -> dict[str, Any]:
    return {"error": {"message": fault.message, "http_status_code": 422}}
