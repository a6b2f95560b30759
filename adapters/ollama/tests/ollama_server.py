"""A small Ollama look-alike: Ollama's native API on 127.0.0.1, for end-to-end tests of the adapter.

    with OllamaServer(library={"tiny:1b": ["Hel", "lo"]}) as server:
        llm = unillm.connect("ollama", server.url, model="tiny:1b")
        server.requests[-1]          # (path, body) the adapter sent

It serves ``/``, ``/api/version``, ``/api/tags``, ``/api/pull`` (NDJSON progress, the model
added to the store), ``/api/copy``, ``/api/generate`` and ``/api/chat`` (one JSON answer, or
NDJSON lines with ``done`` last), ``/api/embed``, and Ollama's errors (``{"error": ...}``, 404
``model '<name>' not found``). Every request body is decoded as Ollama's Go handlers would
(``ollama_types.decode``): a key Go would drop silently is dropped here too and recorded in
``dropped`` (the ``server`` fixture fails a test that sent one), a value Ollama answers 400 to is
recorded in ``errors`` and answered 400. Every answer line is validated against the answer
types. A model in ``thinking`` thinks as Ollama's thinking models do (on unless ``think`` is
false, the thought in ``thinking`` fields); ``think`` to another model is a 400.
``fault`` makes pulls or generations fail: an error status, an ``{"error"}`` line mid-stream, or
a connection dropped mid-stream.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, Literal

from ollama_types import NDJSON, check_answer, decode
from pydantic import ValidationError

import unillm
from unillm import RetryPolicy, Timeouts
from unillm.testing.probing import schema_instance

VERSION = "0.32.15"
CREATED = "2026-08-21T10:00:00.000000Z"
FaultKind = Literal["pull_status", "pull_error_line", "status", "error_line", "drop"]


@dataclass
class Fault:
    """What the next pulls or generations get instead of a normal answer."""

    kind: FaultKind
    status: int = 500
    message: str = "injected fault"


@dataclass
class OllamaServer:
    """The look-alike; ``library`` is what it can pull (name -> answer pieces), ``store`` what is pulled."""

    library: dict[str, list[str]] = field(default_factory=lambda: {"tiny:1b": ["Hel", "lo"]})
    store: set[str] = field(default_factory=set)
    host: str = "127.0.0.1"
    port: int = 0
    fault: Fault | None = None
    thinking: dict[str, list[str]] = field(default_factory=dict)  # model -> its thought's pieces
    requests: list[tuple[str, Any]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)  # "path: key" Ollama would have dropped
    _server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://{self.host}:{self._server.server_address[1]}"

    def __enter__(self) -> OllamaServer:
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:  # quiet
                return

            def do_GET(self) -> None:
                owner._get(self)

            def do_HEAD(self) -> None:
                owner._get(self)

            def do_POST(self) -> None:
                owner._post(self)

        self._server = ThreadingHTTPServer((self.host, self.port), Handler)
        self._server.daemon_threads = True
        threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        ).start()
        return self

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        assert self._server is not None
        self._server.shutdown()
        self._server.server_close()

    def serve_forever(self) -> None:
        """Serve on ``host:port`` in this thread (the fake ``ollama serve``)."""
        assert self._server is not None
        self._server.serve_forever()

    # -- answers ---------------------------------------------------------------------------
    def _get(self, h: BaseHTTPRequestHandler) -> None:
        if h.path == "/":
            return _send(h, 200, b"Ollama is running", "text/plain")
        if h.path == "/api/version":
            return _json(h, 200, {"version": VERSION})
        if h.path == "/api/tags":
            models = [
                {"name": n, "model": n, "modified_at": CREATED, "size": 1, "digest": "sha256:0"}
                for n in sorted(self.store)
            ]
            self._check("/api/tags", {"models": models})
            return _json(h, 200, {"models": models})
        return _send(h, 404, b"404 page not found", "text/plain")

    def _post(self, h: BaseHTTPRequestHandler) -> None:
        raw = h.rfile.read(int(h.headers.get("content-length") or 0))
        try:
            body = json.loads(raw)
        except ValueError:
            return _json(h, 400, {"error": "invalid request body"})
        self.requests.append((h.path, body))
        if h.path not in ("/api/pull", "/api/copy", "/api/generate", "/api/chat", "/api/embed"):
            return _send(h, 404, b"404 page not found", "text/plain")
        try:
            request, dropped = decode(h.path, body)
        except ValidationError as e:
            self.errors.append(f"{h.path}: {e}")
            return _json(h, 400, {"error": f"invalid request: {e.errors()[0]['msg']}"})
        self.dropped += [f"{h.path}: {key}" for key in dropped]
        problem = getattr(request, "route_problem", lambda: None)()
        if problem:
            self.errors.append(f"{h.path}: {problem}")
            return _json(h, 400, {"error": problem})
        body = request.model_dump(by_alias=True, exclude_unset=True)  # what Go kept
        if h.path == "/api/pull":
            return self._pull(h, body)
        if h.path == "/api/copy":
            if body["source"] not in self.store:
                return _json(h, 404, {"error": f"model {body['source']!r} not found"})
            self.store.add(body["destination"])
            self.library[body["destination"]] = self.library[body["source"]]
            return _send(h, 200, b"", "application/json")
        model = body["model"]
        if model not in self.store:
            return _json(h, 404, {"error": f"model '{model}' not found"})
        if h.path == "/api/embed":
            inputs = body["input"] if isinstance(body["input"], list) else [body["input"]]
            size = body.get("dimensions") or 3
            return self._answer(
                h,
                h.path,
                {
                    "model": model,
                    "embeddings": [[0.5] * size for _ in inputs],
                    "prompt_eval_count": len(inputs),
                },
            )
        return self._generate(h, body)

    def _pull(self, h: BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
        name = body["model"]
        if self.fault is not None and self.fault.kind == "pull_status":
            return _json(h, self.fault.status, {"error": self.fault.message})
        if name not in self.library:
            return _json(h, 500, {"error": "pull model manifest: file does not exist"})
        lines: list[dict[str, Any]] = [
            {"status": "pulling manifest"},
            {
                "status": "pulling 0123abcd",
                "digest": "sha256:0123abcd",
                "total": 2000000,
                "completed": 1000000,
            },
            {
                "status": "pulling 0123abcd",
                "digest": "sha256:0123abcd",
                "total": 2000000,
                "completed": 2000000,
            },
        ]
        if self.fault is not None and self.fault.kind == "pull_error_line":
            lines.append({"error": self.fault.message})
        else:
            lines += [
                {"status": "verifying sha256 digest"},
                {"status": "writing manifest"},
                {"status": "success"},
            ]
            self.store.add(name)
        self._stream(h, "/api/pull", lines)

    def _generate(self, h: BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
        path, chat = h.path, h.path == "/api/chat"
        fault = self.fault
        if fault is not None and fault.kind == "status":
            return _json(h, fault.status, {"error": fault.message})
        think = body.get("think")
        thoughts = self.thinking.get(body["model"])
        if thoughts is None and think not in (None, False):
            return _json(h, 400, {"error": f"{body['model']!r} does not support thinking"})
        if think is False:
            thoughts = None  # routes.go: a thinking model thinks unless think is false
        pieces = list(self.library[body["model"]])
        limit = (body.get("options") or {}).get("num_predict")
        done_reason = "stop"
        if limit is not None and limit < len(pieces):
            pieces, done_reason = pieces[:limit], "length"
        if isinstance(body.get("format"), dict):  # a JSON schema: an instance of it
            pieces = [json.dumps(schema_instance(body["format"]))]
        elif body.get("format") is not None:
            pieces = ['{"ok": ', "true}"]
        final = {
            "model": body["model"],
            "created_at": CREATED,
            "done": True,
            "done_reason": done_reason,
            "prompt_eval_count": 2,
            "eval_count": len(pieces),
            "total_duration": 1000,
            "eval_duration": 500,
        }

        def chunk(text: str, thought: str = "") -> dict[str, Any]:
            extra = {"thinking": thought} if thought else {}
            part = (
                {"message": {"role": "assistant", "content": text, **extra}}
                if chat
                else {"response": text, **extra}
            )
            return {"model": body["model"], "created_at": CREATED, "done": False, **part}

        if body.get("logprobs"):  # one logprob per piece, each with top_logprobs alternatives
            final["logprobs"] = [_logprob(p, body.get("top_logprobs") or 0) for p in pieces]
        if body.get("stream", True) is False:
            text = "".join(pieces)
            return self._answer(h, path, {**chunk(text, "".join(thoughts or ())), **final})
        lines = [chunk("", t) for t in thoughts or ()] + [chunk(p) for p in pieces]
        if body.get("logprobs"):
            for line, logprob in zip(lines[len(thoughts or ()) :], final.pop("logprobs"), strict=True):
                line["logprobs"] = [logprob]
        if fault is not None and fault.kind == "error_line":
            lines = [lines[0], {"error": fault.message}]
        elif fault is not None and fault.kind == "drop":
            return self._stream(h, path, lines[:1], drop=True)
        else:
            lines.append({**chunk(""), **final})
        self._stream(h, path, lines)

    def _answer(self, h: BaseHTTPRequestHandler, path: str, body: dict[str, Any]) -> None:
        self._check(path, body)
        _json(h, 200, body)

    def _stream(
        self, h: BaseHTTPRequestHandler, path: str, lines: list[dict[str, Any]], *, drop: bool = False
    ) -> None:
        h.send_response(200)
        h.send_header("Content-Type", NDJSON)
        h.send_header("Transfer-Encoding", "chunked")
        h.end_headers()
        for line in lines:
            self._check(path, line)
            data = json.dumps(line).encode() + b"\n"
            h.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            h.wfile.flush()
        if drop:
            h.close_connection = True
            h.wfile.flush()
            h.connection.shutdown(2)
            return
        h.wfile.write(b"0\r\n\r\n")

    def _check(self, path: str, body: dict[str, Any]) -> None:
        try:
            check_answer(path, body)
        except ValidationError as e:
            self.errors.append(f"answer to {path}: {e}")


def connect(server: OllamaServer, **kw: Any) -> unillm.LLM:
    """A client of the look-alike that does not retry and gives up fast; ``kw`` as ``unillm.connect``'s."""
    return unillm.connect(
        "ollama",
        server.url,
        retry=RetryPolicy(attempts=1),
        timeouts=Timeouts(connect=2, read=5),
        **kw,
    )


def _json(h: BaseHTTPRequestHandler, status: int, body: Any) -> None:
    _send(h, status, json.dumps(body).encode(), "application/json; charset=utf-8")


def _send(h: BaseHTTPRequestHandler, status: int, data: bytes, content_type: str) -> None:
    h.send_response(status)
    h.send_header("Content-Type", content_type)
    h.send_header("Content-Length", str(len(data)))
    h.end_headers()
    if h.command != "HEAD":
        h.wfile.write(data)


def _logprob(piece: str, top: int) -> dict[str, Any]:
    """A piece's logprob with ``top`` alternatives (the piece first), as Ollama's Logprob."""
    alternatives = [piece, *(f"alt{i}" for i in range(1, top))][:top]
    return {
        "token": piece,
        "logprob": -0.5,
        "bytes": list(piece.encode()),
        "top_logprobs": [
            {"token": t, "logprob": -0.5 - i, "bytes": list(t.encode())} for i, t in enumerate(alternatives)
        ],
    }
