"""``async with`` for anything with ``aclose()``: LLM, Fleet, Stream, the probe's peers."""

from __future__ import annotations

from types import TracebackType

from typing_extensions import Self


class AsyncClosing:
    """``async with obj:`` calls ``await obj.aclose()`` on leaving, on the loop that opened it."""

    async def aclose(self) -> None:
        """Release what the object holds (connections, a stream)."""
        raise NotImplementedError

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()


__all__ = ["AsyncClosing"]
