"""The httpx transport of in-process MLX: each method and path routed to the engine."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from importlib.metadata import version as _dist_version

import httpx

from unillm.adapter import LaunchSpec
from unillm_mlx import IN_PROCESS_SUFFIX, refuse_unsupported
from unillm_mlx.inprocess.engine import Engine
from unillm_mlx.inprocess.parsing import RequestError, read_body, require_str
from unillm_mlx.inprocess.responses import json_response, respond

__all__ = ["InProcessTransport"]

_Handler = Callable[[httpx.Request], Awaitable[httpx.Response]]
_OK = {"status": "ok"}


class InProcessTransport(httpx.AsyncBaseTransport):
    """An httpx transport backed by mlx-lm in this process (``unillm.launch(..., in_process=True)``).

    Args:
        spec: The launch settings (refused if in-process MLX cannot honour them).
    """

    def __init__(self, spec: LaunchSpec) -> None:
        refuse_unsupported(spec, in_process=True)
        self._engine = Engine(spec)
        self._routes: dict[tuple[str, str], _Handler] = {
            ("GET", "/health"): self._health,
            ("GET", "/version"): self._version,
            ("GET", "/v1/models"): self._models,
            ("GET", "/metrics"): self._metrics,
            ("POST", "/v1/chat/completions"): self._chat,
            ("POST", "/v1/completions"): self._completion,
            ("POST", "/tokenize"): self._tokenize,
            ("POST", "/v1/load_lora_adapter"): self._load_lora,
            ("POST", "/v1/unload_lora_adapter"): self._unload_lora,
        }

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        """Answer ``request`` as mlx_lm.server would (404 for a path it does not serve)."""
        handler = self._routes.get((request.method, request.url.path))
        if handler is None:
            return httpx.Response(404, content=b"Not Found")
        try:
            return await handler(request)
        except RequestError as e:
            return json_response(e.status, {"error": str(e)})

    async def aclose(self) -> None:
        """Stop the engine: cancel its requests and free its models."""
        await self._engine.aclose()

    async def _health(self, request: httpx.Request) -> httpx.Response:
        return json_response(200, _OK)

    async def _version(self, request: httpx.Request) -> httpx.Response:
        return json_response(200, {"version": _dist_version("mlx-lm") + IN_PROCESS_SUFFIX})

    async def _models(self, request: httpx.Request) -> httpx.Response:
        return json_response(200, {"object": "list", "data": self._engine.models()})

    async def _metrics(self, request: httpx.Request) -> httpx.Response:
        return httpx.Response(
            200, text=self._engine.metrics(), headers={"content-type": "text/plain; version=0.0.4"}
        )

    async def _chat(self, request: httpx.Request) -> httpx.Response:
        return await self._generate(request, chat=True)

    async def _completion(self, request: httpx.Request) -> httpx.Response:
        return await self._generate(request, chat=False)

    async def _generate(self, request: httpx.Request, *, chat: bool) -> httpx.Response:
        job = self._engine.parse(read_body(await request.aread()), chat=chat)
        return await respond(request, job, await self._engine.submit(job))

    async def _tokenize(self, request: httpx.Request) -> httpx.Response:
        return json_response(200, await self._engine.tokenize(read_body(await request.aread())))

    async def _load_lora(self, request: httpx.Request) -> httpx.Response:
        body = read_body(await request.aread())
        self._engine.add_lora(require_str(body, "lora_name"), require_str(body, "lora_path"))
        return json_response(200, _OK)

    async def _unload_lora(self, request: httpx.Request) -> httpx.Response:
        self._engine.remove_lora(require_str(read_body(await request.aread()), "lora_name"))
        return json_response(200, _OK)
