"""A look-alike embeddings endpoint for semantic-routing tests: OpenAI or Azure OpenAI layout.

    with EmbeddingServer(azure=True, api_key="k") as server:        # insists on api-key + api-version
        OpenAIEmbedder.azure(server.url, deployment="emb", api_version="2024-10-21", api_key="k")
    with EmbeddingServer(upstream="http://127.0.0.1:8001/v1/embeddings") as server: ...  # real vectors

Vectors are a bag of hashed words (texts sharing words are close) unless ``upstream`` names a
real ``/v1/embeddings`` to forward to. ``dimension`` can change between calls and ``fail_with``
injects an HTTP status, to test how a router copes.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any
from urllib.parse import parse_qs, urlparse
from urllib.request import Request, urlopen


def bag_of_words(text: str, dimension: int) -> list[float]:
    """A deterministic vector: one count per hashed lower-case word."""
    vector = [0.0] * dimension
    for word in re.findall(r"\w+", text.lower()):
        vector[int(hashlib.sha256(word.encode()).hexdigest(), 16) % dimension] += 1.0
    return vector


@dataclass
class EmbeddingServer:
    """An embeddings server on 127.0.0.1 (a free port), stopped on exit."""

    azure: bool = False
    api_key: str | None = None
    dimension: int = 64
    upstream: str | None = None
    upstream_model: str | None = None
    fail_with: int | None = None
    requests: list[dict[str, Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        """The base URL (OpenAI layout: add ``/v1``)."""
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> EmbeddingServer:
        self._thread.start()
        return self

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def _answer(self, path: str, headers: dict[str, str], body: dict[str, Any]) -> tuple[int, Any]:
        query = parse_qs(urlparse(path).query)
        self.requests.append({"path": path, "headers": headers, "body": body})
        if self.azure:
            if self.api_key is not None and headers.get("api-key") != self.api_key:
                return 401, {
                    "error": {
                        "code": "401",
                        "message": "Access denied due to invalid subscription key or wrong API endpoint.",
                    }
                }
            if "api-version" not in query:
                return 404, {"error": {"code": "404", "message": "Resource not found"}}
            if not urlparse(path).path.startswith("/openai/deployments/"):
                return 404, {"error": {"code": "404", "message": "Resource not found"}}
        elif self.api_key is not None and headers.get("authorization") != f"Bearer {self.api_key}":
            return 401, {"error": {"message": "Incorrect API key provided", "type": "invalid_request_error"}}
        if self.fail_with is not None:
            return self.fail_with, {"error": {"message": "injected failure"}}
        texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
        if self.upstream is not None:
            forwarded = {"input": texts, "model": self.upstream_model or body.get("model")}
            request = Request(
                self.upstream,
                data=json.dumps(forwarded).encode(),
                headers={"Content-Type": "application/json"},
            )
            with urlopen(request, timeout=30) as answer:
                return 200, json.loads(answer.read())
        data = [
            {"object": "embedding", "index": i, "embedding": bag_of_words(t, self.dimension)}
            for i, t in enumerate(texts)
        ]
        return 200, {
            "object": "list",
            "data": data,
            "model": body.get("model", "look-alike"),
            "usage": {"prompt_tokens": len(texts), "total_tokens": len(texts)},
        }

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                headers = {k.lower(): v for k, v in self.headers.items()}
                status, answer = server._answer(self.path, headers, body)
                raw = json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        return Handler
