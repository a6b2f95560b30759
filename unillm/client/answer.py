"""An engine's HTTP answer as the client sees it, whichever HTTP library received it.

Both wires (aiohttp's, the default, and httpx's) hand the transport an :class:`Answer`: the
status, the headers (a case-insensitive mapping) and the body, either read whole
(``content``) or still arriving (``aiter_bytes()``, decoded from any Content-Encoding).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any


async def _nothing() -> AsyncIterator[bytes]:
    return
    yield  # pragma: no cover - makes this an async generator


async def _closed() -> None:
    return None


class Answer:
    """An HTTP answer: ``status_code``, ``headers``, and a body read whole or streamed.

    Args:
        status_code: The HTTP status.
        headers: The response headers, looked up case-insensitively.
        content: The whole body, once read (``b""`` while it is still streamed).
        chunks: The body still to arrive, as decoded bytes; None when ``content`` is all.
        close: Releases the connection (back to the pool once the body was read to its end).
    """

    __slots__ = ("_chunks", "_close", "content", "headers", "status_code")

    def __init__(
        self,
        status_code: int,
        headers: Mapping[str, str],
        content: bytes = b"",
        chunks: AsyncIterator[bytes] | None = None,
        close: Callable[[], Awaitable[None]] = _closed,
    ) -> None:
        self.status_code, self.headers, self.content = status_code, headers, content
        self._chunks, self._close = chunks, close

    @property
    def text(self) -> str:
        """The body as text (UTF-8; bytes that are not UTF-8 replaced)."""
        return self.content.decode("utf-8", "replace")

    def json(self) -> Any:
        """The body parsed as JSON (a ``json.JSONDecodeError`` if it is not)."""
        return json.loads(self.content)

    def aiter_bytes(self) -> AsyncIterator[bytes]:
        """The body still to arrive, decoded from its Content-Encoding (one iterator: a second
        call goes on where the first stopped)."""
        if self._chunks is None:
            self._chunks = _nothing()
        return self._chunks

    async def aread(self) -> bytes:
        """Read the rest of the body into ``content`` (unbounded: the transport caps reads)."""
        self.content += b"".join([chunk async for chunk in self.aiter_bytes()])
        return self.content

    async def aclose(self) -> None:
        """Release the connection; safe to call more than once."""
        close, self._close = self._close, _closed
        await close()
