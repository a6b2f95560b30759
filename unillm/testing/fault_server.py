"""The look-alike server: a small vLLM (OpenAI-compatible) server that misbehaves on demand.

A public test tool: an adapter for an OpenAI-compatible engine can be tried against it with no
engine (``unillm.LLM(MyAdapter(), server.url)``), and :mod:`unillm.testing.fake_engine` serves it
from a process for launch tests. It speaks vLLM's OpenAI wire format over raw asyncio streams (so
it can drop, stall or truncate a connection at any byte) and runs its own event loop in a
background thread:

    with FaultServer() as server:
        server.fail(429, times=2, retry_after="1")   # first two generations: 429, then normal
        server.stop(); server.start()                # refuse connections for a while, same port
        llm = unillm.connect("vllm", server.url)
        ...
        assert server.count() == 3

Normal answers look like vLLM 0.32's: completions and chat, non-streamed or streamed as SSE
(one chunk per text piece, the finish reason on the last piece, a usage chunk when
``stream_options.include_usage`` is set, then ``data: [DONE]``). Errors use vLLM's layout
``{"error": {"message", "type", "param", "code"}}``; an unknown model (or LoRA name) in a
request gets vLLM's own 404. Faults apply to generation requests only (``/v1/completions``
and ``/v1/chat/completions``), so discovery (``/version``, ``/v1/models``) keeps working;
``server.discovery[path] = {...}`` answers discovery with another body, ``server.stall_discovery
= True`` makes it go silent.

Any path can also be given a scripted answer, sent byte for byte (a hostile server)::

    server.script("/tokenize", Raw(200, b'{"tokens": "many"}'))
    server.script("/v1/completions", Raw(200, [b"data: {", b"}\n\n"], content_type="text/event-stream"))
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

import anyio

from unillm.testing.background_server import BackgroundServer, HttpRequest, read_request, response_head, send

COMPLETIONS = "/v1/completions"
CHAT = "/v1/chat/completions"
GENERATION_PATHS = (COMPLETIONS, CHAT)
DISCOVERY_PATHS = ("/version", "/v1/models")
LOAD_LORA, UNLOAD_LORA = "/v1/load_lora_adapter", "/v1/unload_lora_adapter"
LORA_PATHS = (LOAD_LORA, UNLOAD_LORA)

FaultKind = Literal[
    "status", "drop", "stall", "bad_sse", "content_type", "stream_error", "truncate", "endless"
]

_ERROR_TYPES = {
    400: "BadRequestError",
    404: "NotFoundError",
    422: "BadRequestError",
    429: "RateLimitError",
    500: "InternalServerError",
    503: "ServiceUnavailableError",
}


@dataclass
class Fault:
    """What the server does to generation requests instead of answering normally.

    ``times``: the fault hits the first ``times`` generation requests, later ones are served
    normally (None: every request). ``after``: how many text chunks a stream sends before
    the fault shows (for ``stall``, None means not even the response headers).
    """

    kind: FaultKind
    times: int | None = None
    after: int | None = 0
    status: int = 500
    retry_after: str | None = None
    message: str = "injected fault"
    error_type: str | None = None
    code: int | None = None
    body: bytes | None = None
    content_type: str = "application/json"
    interval: float = 0.02
    finish: bool = False  # the last chunk before the fault carries the finish reason


@dataclass(frozen=True)
class Raw:
    """An answer sent as given, whatever was asked. ``body`` as one piece (with Content-Length,
    unless ``headers`` set one) or as pieces (chunked transfer encoding, one chunk each);
    ``close``: hang up after sending (e.g. after a Content-Length promising more); ``end``: the
    bytes that end a chunked body (the last, empty chunk; e.g. a bad chunk header instead);
    ``interval``: seconds between the pieces of a chunked body (each arrives on its own)."""

    status: int = 200
    body: bytes | list[bytes] = b""
    content_type: str | None = "application/json"
    headers: dict[str, str] = field(default_factory=dict)
    close: bool = False
    end: bytes = b"0\r\n\r\n"
    interval: float = 0.0


@dataclass(frozen=True)
class Seen:
    """One request the server received."""

    method: str
    path: str
    headers: dict[str, str]
    body: Any
    at: float = 0.0  # time.monotonic() when it arrived


class FaultServer(BackgroundServer):
    """A vLLM-compatible HTTP server on 127.0.0.1 (free port) that injects faults on demand."""

    def __init__(
        self,
        *,
        model: str = "tiny",
        max_model_len: int = 512,
        version: str = "0.32.0",
        pieces: tuple[str, ...] = ("Hello", ",", " world", "!"),
        loras: tuple[str, ...] = (),
        port: int = 0,
        runtime_lora: bool = False,
    ) -> None:
        super().__init__(port=port)  # 0: a free port; kept across stop() and start() (a restarted replica)
        self.model, self.max_model_len, self.version = model, max_model_len, version
        self.pieces, self.loras = pieces, loras
        self.runtime_lora = runtime_lora  # serve vLLM's /v1/load_lora_adapter and unload
        self.metrics_text: str | None = None  # served on GET /metrics when set
        #: Usage's ``prompt_tokens_details.cached_tokens`` when set (vLLM launched with
        #: ``--enable-prompt-tokens-details``); None: ``prompt_tokens_details`` is null
        self.cached_tokens: int | None = None
        self.discovery: dict[str, Any] = {}  # a JSON body answered instead on GET /version, /v1/models
        self.stall_discovery = False  # GET /version and /v1/models go silent until the client leaves
        self.fault: Fault | None = None
        self.fault_hits = 0
        self.scripts: dict[str, Raw] = {}  # path -> the answer every request for it gets
        self.requests: list[Seen] = []
        self.disconnects: list[str] = []  # paths whose client left before the answer ended
        #: (path, body) -> what the engine would answer 400 to (None: fine), for a generation body
        self.check: Callable[[str, Any], str | None] | None = None
        self._gone = threading.Event()

    # -- configuring faults --------------------------------------------------------------------
    def set_fault(self, fault: Fault | None) -> FaultServer:
        self.fault, self.fault_hits = fault, 0
        return self

    def script(self, path: str, answer: Raw | None) -> FaultServer:
        """Answer every request for ``path`` (any method) with ``answer`` (None: as usual again)."""
        if answer is None:
            self.scripts.pop(path, None)
        else:
            self.scripts[path] = answer
        return self

    def fail(
        self,
        status: int,
        *,
        times: int | None = None,
        retry_after: str | None = None,
        message: str = "injected fault",
        error_type: str | None = None,
    ) -> FaultServer:
        """Answer ``status`` with a vLLM-style error body (optionally with Retry-After)."""
        return self.set_fault(
            Fault(
                "status",
                times=times,
                status=status,
                retry_after=retry_after,
                message=message,
                error_type=error_type,
            )
        )

    def fail_raw(
        self,
        status: int,
        body: bytes,
        *,
        content_type: str = "text/plain",
        times: int | None = None,
    ) -> FaultServer:
        """Answer ``status`` with an arbitrary body (e.g. a proxy's HTML page)."""
        return self.set_fault(
            Fault("status", times=times, status=status, body=body, content_type=content_type)
        )

    def drop(self, after: int = 0, *, times: int | None = None, finish: bool = False) -> FaultServer:
        """Close the connection after ``after`` stream chunks (non-streamed: before answering).

        ``finish``: the last of those chunks carries the finish reason, as vLLM's last text
        chunk does, so the cut falls between the finish and the usage chunk.
        """
        return self.set_fault(Fault("drop", times=times, after=after, finish=finish))

    def stall(self, after: int | None = None, *, times: int | None = None) -> FaultServer:
        """Go silent until the client leaves: before the headers (None) or after K chunks.

        For a non-streamed answer any ``after`` sends the headers and then no body.
        """
        return self.set_fault(Fault("stall", times=times, after=after))

    def bad_sse(self, after: int = 0, *, data: str = "this is not json") -> FaultServer:
        """After K good chunks send an SSE data line that is not JSON."""
        return self.set_fault(Fault("bad_sse", after=after, body=data.encode()))

    def wrong_content_type(self, content_type: str = "application/json") -> FaultServer:
        """Answer a stream request with a 200 non-streamed JSON body of that content type."""
        return self.set_fault(Fault("content_type", content_type=content_type))

    def stream_error(
        self,
        after: int = 0,
        *,
        code: int = 400,
        message: str = "injected stream error",
        error_type: str | None = None,
    ) -> FaultServer:
        """After K chunks send ``data: {"error": {...}}`` then ``data: [DONE]`` (as vLLM does)."""
        return self.set_fault(
            Fault("stream_error", after=after, code=code, message=message, error_type=error_type)
        )

    def truncate(self, after: int) -> FaultServer:
        """End the stream cleanly after K chunks: no finish reason, no usage, no [DONE]."""
        return self.set_fault(Fault("truncate", after=after))

    def endless(self, interval: float = 0.02) -> FaultServer:
        """Stream text chunks forever, one per ``interval`` seconds, until the client leaves."""
        return self.set_fault(Fault("endless", interval=interval))

    # -- observing -------------------------------------------------------------------------
    def count(self, path: str | None = None) -> int:
        """Requests received for ``path`` (default: generation requests)."""
        return len(self.seen(path))

    def seen(self, path: str | None = None) -> list[Seen]:
        """The requests received for ``path`` (default: generation requests), oldest first."""
        paths = GENERATION_PATHS if path is None else (path,)
        return [r for r in list(self.requests) if r.path in paths]

    @property
    def client_disconnected(self) -> bool:
        return self._gone.is_set()

    async def wait_disconnect(self, seconds: float = 30.0) -> bool:
        """Wait (in a worker thread: the caller's loop runs on) until a client left mid-answer;
        True as soon as one did (a busy machine takes seconds to notice), False after ``seconds``."""
        return await anyio.to_thread.run_sync(self._gone.wait, seconds)

    # -- serving ---------------------------------------------------------------------------
    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            request = await read_request(reader)
            if request is None:
                return
            if not await self._answer(request, reader, writer):
                return
            if request.headers.get("connection", "").lower() == "close":
                return

    def _record(self, request: HttpRequest) -> None:
        self.requests.append(
            Seen(request.method, request.path, request.headers, request.json, time.monotonic())
        )

    def _left(self, path: str) -> None:
        self.disconnects.append(path)
        self._gone.set()

    async def _answer(
        self, request: HttpRequest, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> bool:
        """Answer one request; False when the connection must be closed afterwards."""
        self._record(request)
        path, method = request.path, request.method
        scripted = self.scripts.get(path)
        if scripted is not None:
            return await _send_raw(writer, scripted)
        if method == "GET" and path in DISCOVERY_PATHS:
            if self.stall_discovery:
                await self._until_client_leaves(request, reader)
                return False
            if path in self.discovery:
                return await _send_json(writer, 200, self.discovery[path])
        if method == "GET" and path == "/version":
            return await _send_json(writer, 200, {"version": self.version})
        if method == "GET" and path == "/v1/models":
            return await _send_json(writer, 200, self._models())
        if method == "GET" and path == "/health":
            return await _send(writer, 200, b"", "application/json")
        if method == "GET" and path == "/metrics" and self.metrics_text is not None:
            return await _send(writer, 200, self.metrics_text.encode(), "text/plain; version=0.0.4")
        if method == "POST" and self.runtime_lora and path in LORA_PATHS:
            return await self._lora(path, request.json if isinstance(request.json, dict) else {}, writer)
        if method != "POST" or path not in GENERATION_PATHS:
            return await _send_json(writer, 404, {"detail": "Not Found"})
        body = request.json if isinstance(request.json, dict) else None
        if body is None:
            return await _send_json(writer, 400, _error(400, "body must be a JSON object"))
        problem = self.check(path, body) if self.check is not None else None
        if problem is not None:
            return await _send_json(writer, 400, _error(400, problem))
        fault = self.fault
        if fault is not None and (fault.times is None or self.fault_hits < fault.times):
            self.fault_hits += 1
            return await self._inject(fault, request, body, reader, writer)
        name = body.get("model")
        if name not in (self.model, *self.loras):
            msg = f"The model `{name}` does not exist."
            return await _send_json(writer, 404, _error(404, msg))
        if body.get("stream"):
            return await self._stream(request, body, reader, writer, fault=None)
        return await _send_json(writer, 200, self._completion(path, body))

    async def _lora(self, path: str, body: dict[str, Any], writer: asyncio.StreamWriter) -> bool:
        """vLLM's runtime LoRA endpoints: 200 with a text body, 400 when loaded twice, 404 unknown."""
        name = str(body.get("lora_name", ""))
        if path == LOAD_LORA:
            if name in self.loras:
                msg = f"The lora adapter '{name}' has already been loaded."
                return await _send_json(writer, 400, _error(400, msg))
            self.loras = (*self.loras, name)
            return await _send(
                writer,
                200,
                f"Success: LoRA adapter '{name}' added successfully.".encode(),
                "text/plain; charset=utf-8",
            )
        if name not in self.loras:
            return await _send_json(writer, 404, _error(404, f"The lora adapter '{name}' cannot be found."))
        self.loras = tuple(n for n in self.loras if n != name)
        return await _send(
            writer,
            200,
            f"Success: LoRA adapter '{name}' removed successfully.".encode(),
            "text/plain; charset=utf-8",
        )

    async def _inject(
        self,
        fault: Fault,
        request: HttpRequest,
        body: dict[str, Any],
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> bool:
        stream = bool(body.get("stream"))
        if fault.kind == "status":
            headers = {"retry-after": fault.retry_after} if fault.retry_after is not None else {}
            if fault.body is not None:
                return await _send(writer, fault.status, fault.body, fault.content_type, headers)
            payload = _error(fault.status, fault.message, fault.error_type)
            return await _send_json(writer, fault.status, payload, headers)
        if fault.kind == "content_type":
            data = json.dumps(self._completion(request.path, body)).encode()
            return await _send(writer, 200, data, fault.content_type)
        if fault.kind == "drop" and not stream:
            return False  # close without a byte of answer
        if fault.kind == "stall" and (not stream or fault.after is None):
            if fault.after is not None:  # headers promising a body that never comes
                data = json.dumps(self._completion(request.path, body)).encode()
                writer.write(
                    _head(200, {"content-type": "application/json", "content-length": str(len(data))})
                )
                await writer.drain()
            await self._until_client_leaves(request, reader)
            return False
        if not stream:
            return await _send_json(writer, 200, self._completion(request.path, body))
        return await self._stream(request, body, reader, writer, fault=fault)

    async def _until_client_leaves(self, request: HttpRequest, reader: asyncio.StreamReader) -> None:
        if await reader.read(1) == b"":
            self._left(request.path)

    async def _stream(
        self,
        request: HttpRequest,
        body: dict[str, Any],
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        fault: Fault | None,
    ) -> bool:
        docs = _StreamDocs(request.path == CHAT, body, self.cached_tokens)
        watch = asyncio.ensure_future(reader.read(1))  # b"" once the client hangs up

        async def emit(payload: bytes) -> bool:
            if watch.done():
                return False
            try:
                writer.write(_chunk(payload))
                await writer.drain()
            except ConnectionError:
                return False
            return True

        try:
            writer.write(
                _head(
                    200, {"content-type": "text/event-stream; charset=utf-8", "transfer-encoding": "chunked"}
                )
            )
            await writer.drain()
            if docs.chat and not await emit(docs.piece(None, role=True)):
                return self._hung_up(request, watch)
            if not await self._stream_pieces(docs, fault, watch, emit):
                return self._hung_up(request, watch)
            if fault is not None:
                return await self._stream_fault(fault, request, writer, watch, emit)
            if docs.usage_wanted and not await emit(docs.usage(len(self.pieces))):
                return self._hung_up(request, watch)
            if not await emit(b"data: [DONE]\n\n"):
                return self._hung_up(request, watch)
            writer.write(b"0\r\n\r\n")
            await writer.drain()
            return True
        finally:
            if not watch.done():
                watch.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await watch

    async def _stream_pieces(
        self,
        docs: _StreamDocs,
        fault: Fault | None,
        watch: asyncio.Future[bytes],
        emit: Callable[[bytes], Awaitable[bool]],
    ) -> bool:
        """Send the answer's pieces (up to a fault's ``after``, or endlessly); False if the client left."""
        limit = len(self.pieces) if fault is None or fault.after is None else fault.after
        n = 0
        endless = fault is not None and fault.kind == "endless"
        sent = min(limit, len(self.pieces))
        while endless or n < sent:
            text = self.pieces[n % len(self.pieces)]
            last = (fault is None or fault.finish) and n == sent - 1
            if not await emit(docs.piece(text, "length" if last else None)):
                return False
            n += 1
            if endless and fault is not None:
                await asyncio.wait({watch}, timeout=fault.interval)
        return True

    async def _stream_fault(
        self,
        fault: Fault,
        request: HttpRequest,
        writer: asyncio.StreamWriter,
        watch: asyncio.Future[bytes],
        emit: Callable[[bytes], Awaitable[bool]],
    ) -> bool:
        if fault.kind == "drop":
            return False  # the caller closes the socket mid-body
        if fault.kind == "stall":
            if await watch == b"":
                self._left(request.path)
            return False
        if fault.kind == "bad_sse":
            await emit(b"data: " + (fault.body or b"") + b"\n\n")
        elif fault.kind == "stream_error":
            code = fault.code or 500
            await emit(_sse(_error(code, fault.message, fault.error_type)))
            await emit(b"data: [DONE]\n\n")
        elif fault.kind != "truncate":
            raise AssertionError(f"unhandled stream fault {fault.kind}")
        if watch.done():
            return self._hung_up(request, watch)
        writer.write(b"0\r\n\r\n")
        await writer.drain()
        return True

    def _hung_up(self, request: HttpRequest, watch: asyncio.Future[bytes]) -> bool:
        # Either the client hung up (EOF seen) or writing failed because it reset the socket.
        eof = watch.done() and not watch.cancelled() and watch.exception() is None and watch.result() == b""
        if eof or not watch.done():
            self._left(request.path)
        return False

    # -- vLLM-shaped bodies ----------------------------------------------------------------
    def _models(self) -> dict[str, Any]:
        created = int(time.time())
        base = {
            "id": self.model,
            "object": "model",
            "created": created,
            "owned_by": "vllm",
            "root": self.model,
            "parent": None,
            "max_model_len": self.max_model_len,
        }
        loras = [
            {
                "id": name,
                "object": "model",
                "created": created,
                "owned_by": "vllm",
                "root": f"/adapters/{name}",
                "parent": self.model,
                "max_model_len": None,
            }
            for name in self.loras
        ]
        return {"object": "list", "data": [base, *loras]}

    def _completion(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """A whole answer in vLLM's layout: a ``chat.completion`` or a ``text_completion``."""
        text = "".join(self.pieces)
        chat = path == CHAT
        ending = {"logprobs": None, "finish_reason": "length", "stop_reason": None}
        if chat:
            empty = ("refusal", "annotations", "audio", "function_call", "reasoning_content")
            message: dict[str, Any] = {
                "role": "assistant",
                "content": text,
                "tool_calls": [],
                **dict.fromkeys(empty),
            }
            choice: dict[str, Any] = {"index": 0, "message": message, **ending}
            extra: dict[str, Any] = {"prompt_logprobs": None}
        else:
            choice = {"index": 0, "text": text, **ending, "prompt_logprobs": None}
            extra = {"system_fingerprint": None}
        return {
            "id": f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}",
            "object": "chat.completion" if chat else "text_completion",
            "created": int(time.time()),
            "model": body.get("model"),
            "choices": [choice],
            "usage": _usage(body, len(self.pieces), self.cached_tokens),
            **extra,
            "kv_transfer_params": None,
        }


class _StreamDocs:
    """The server-sent documents of one streamed answer, chat or text completion."""

    def __init__(self, chat: bool, body: dict[str, Any], cached_tokens: int | None = None) -> None:
        self.chat = chat
        self.body = body
        self.cached_tokens = cached_tokens
        self.ident = f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}"
        self.created = int(time.time())
        self.usage_wanted = bool((body.get("stream_options") or {}).get("include_usage"))

    def _doc(self, choices: list[dict[str, Any]]) -> dict[str, Any]:
        return {
            "id": self.ident,
            "object": "chat.completion.chunk" if self.chat else "text_completion",
            "created": self.created,
            "model": self.body.get("model"),
            "choices": choices,
        }

    def piece(self, text: str | None, finish: str | None = None, role: bool = False) -> bytes:
        """One chunk of the answer (``role``: the chat's opening chunk that names the assistant)."""
        c: dict[str, Any]
        if self.chat:
            delta: dict[str, Any] = {"role": "assistant", "content": ""} if role else {}
            if text is not None:
                delta["content"] = text
            c = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        else:
            c = {
                "index": 0,
                "text": text or "",
                "logprobs": None,
                "finish_reason": finish,
                "stop_reason": None,
            }
        doc = self._doc([c])
        if self.usage_wanted:
            doc["usage"] = None
        return _sse(doc)

    def usage(self, completion_tokens: int) -> bytes:
        """The closing chunk with no choices and the request's token counts."""
        return _sse({**self._doc([]), "usage": _usage(self.body, completion_tokens, self.cached_tokens)})


def _usage(body: dict[str, Any], completion_tokens: int, cached_tokens: int | None = None) -> dict[str, Any]:
    prompt = body.get("prompt")
    if prompt is None:
        prompt = " ".join(str(m.get("content", "")) for m in body.get("messages") or ())
    prompt_tokens = max(1, len(str(prompt).split()))
    return {
        "prompt_tokens": prompt_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "completion_tokens": completion_tokens,
        "prompt_tokens_details": None if cached_tokens is None else {"cached_tokens": cached_tokens},
    }


def _error(status: int, message: str, error_type: str | None = None) -> dict[str, Any]:
    kind = error_type or _ERROR_TYPES.get(status, "InternalServerError")
    return {"error": {"message": message, "type": kind, "param": None, "code": status}}


def _uvicorn(headers: dict[str, str]) -> dict[str, str]:
    """``headers`` after the ones uvicorn sends with every answer."""
    return {"server": "uvicorn", "date": time.strftime("%a, %d %b %Y %H:%M:%S GMT", time.gmtime()), **headers}


def _head(status: int, headers: dict[str, str]) -> bytes:
    return response_head(status, _uvicorn(headers))


def _chunk(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


def _sse(doc: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(doc).encode() + b"\n\n"


async def _send(
    writer: asyncio.StreamWriter,
    status: int,
    data: bytes,
    content_type: str,
    headers: dict[str, str] | None = None,
) -> bool:
    return await send(writer, status, data, content_type, _uvicorn(headers or {}))


async def _send_raw(writer: asyncio.StreamWriter, answer: Raw) -> bool:
    head = {"content-type": answer.content_type} if answer.content_type is not None else {}
    if isinstance(answer.body, bytes):
        head.setdefault("content-length", str(len(answer.body)))
        head.update(answer.headers)
        writer.write(_head(answer.status, head) + answer.body)
    else:
        head.update({"transfer-encoding": "chunked", **answer.headers})
        writer.write(_head(answer.status, head))
        for piece in answer.body:
            writer.write(_chunk(piece))
            await writer.drain()
            if answer.interval:
                await asyncio.sleep(answer.interval)
        writer.write(answer.end)
    await writer.drain()
    return not answer.close


async def _send_json(
    writer: asyncio.StreamWriter, status: int, doc: Any, headers: dict[str, str] | None = None
) -> bool:
    return await _send(writer, status, json.dumps(doc).encode(), "application/json", headers)


@contextlib.contextmanager
def running(**kwargs: Any) -> Iterator[FaultServer]:
    """``with running() as server:`` — a started FaultServer, stopped on exit."""
    server = FaultServer(**kwargs)
    with server:
        yield server
