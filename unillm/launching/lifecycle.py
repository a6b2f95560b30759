"""What every launch shares: ``async with`` stops what it started, ``.blocking()`` for plain code.

One engine (:class:`~unillm.launching.supervisor.Launch`), local replicas
(:class:`~unillm.launching.fleet_launch.FleetLaunch`) and replicas on a Ray cluster
(:class:`~unillm.launching.ray_cluster.RayLaunch`) each start in ``__aenter__`` and stop in
``_stop``, which also runs when a start fails half-way.
"""

from __future__ import annotations

import contextlib
from abc import ABC, abstractmethod
from types import TracebackType

from unillm.client.blocking import BlockingLLM, blocking_launch


class Stoppable(ABC):
    """A launch whose ``async with`` ends by stopping everything it started."""

    @abstractmethod
    async def _stop(self) -> None:
        """Stop every process, actor or router this launch started (idempotent)."""

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self._stop()

    def blocking(self) -> contextlib.AbstractContextManager[BlockingLLM]:
        """Start from blocking code: ``with unillm.launch(...).blocking() as llm:``."""
        return blocking_launch(self)  # type: ignore[arg-type]  # __aenter__ is each launch's own
