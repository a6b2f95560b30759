"""The HTTP client ``unillm bench`` measures with: aiohttp under httpx when installed, else httpx.

    llm = LLM("vllm", url, http_transport=measuring_transport("auto"))

A client that spends CPU on every streamed chunk reads chunks late and, on a machine whose
cores it shares with the engine, slows the engine too: both show up as latency. httpx's own
HTTP/1.1 stack (httpcore + h11, pure Python) costs several times what aiohttp's C parser costs
per chunk (``benchmarks/harness_overhead.py``), and ``vllm bench serve`` measures with aiohttp.
So the benchmark sends through ``httpx-aiohttp``'s transport (the ``bench`` extra): httpx keeps
building requests, mapping errors and timeouts, so every adapter, the stream decoding and the
typed errors stay exactly the SDK's; only the bytes on the wire are aiohttp's. The SDK itself
(``unillm.connect``) keeps httpx's own transport.
"""

from __future__ import annotations

import importlib.util
from typing import TYPE_CHECKING, Literal

from unillm.errors import InvalidOptions

if TYPE_CHECKING:
    import httpx

    from unillm.client.transport import Pool

HttpClient = Literal["auto", "aiohttp", "httpx"]
HTTP_CLIENTS: tuple[str, ...] = ("auto", "aiohttp", "httpx")


def resolve(http: str) -> Literal["aiohttp", "httpx"]:
    """The client ``http`` names: ``"auto"`` is aiohttp when ``httpx-aiohttp`` is installed.

    Asking for ``"aiohttp"`` without it raises InvalidOptions (nothing falls back silently).
    """
    if http not in HTTP_CLIENTS:
        raise InvalidOptions(
            f"unknown HTTP client {http!r} for the benchmark: choose one of {', '.join(HTTP_CLIENTS)}"
        )
    have = importlib.util.find_spec("httpx_aiohttp") is not None
    if http == "aiohttp" and not have:
        raise InvalidOptions(
            "the aiohttp client needs the httpx-aiohttp package: pip install "
            "'unillm-sdk[bench]' (or pass http='httpx' / --http httpx)"
        )
    if http == "auto":
        return "aiohttp" if have else "httpx"
    return "httpx" if http == "httpx" else "aiohttp"


def measuring_transport(http: str, pool: Pool | None = None) -> httpx.AsyncBaseTransport | None:
    """An httpx transport that sends through aiohttp, or None for httpx's own (see :func:`resolve`).

    ``pool`` sizes its connections like the SDK's (:class:`~unillm.client.transport.Pool`).
    """
    if resolve(http) == "httpx":
        return None
    from httpx_aiohttp import AiohttpTransport

    from unillm.client.transport import Pool

    return AiohttpTransport(limits=(pool or Pool()).limits())
