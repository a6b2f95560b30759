"""What the ``sglang_server`` fixture yields (its own module: test files import it by name)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from unillm_sglang import SGLangAdapter
from unillm_sglang.adapter import ApiChoice

import unillm
from unillm.adapter.base import Adapter
from unillm.testing.engines import RunningEngine


def kv_events_endpoint() -> tuple[str, str]:
    """Where the session's SGLang server publishes its KV-cache events, and replays them (short:
    an ipc path is limited to ~100 characters)."""
    return (
        f"ipc:///tmp/unillm-sglang-kv-{os.getpid()}.sock",
        f"ipc:///tmp/unillm-sglang-kv-{os.getpid()}-replay.sock",
    )


@dataclass(frozen=True)
class SGLangServer(RunningEngine):
    """A running SGLang server; ``connect(api=...)`` forces its "openai" or "native" API."""

    def connect(
        self, api: ApiChoice = "auto", *, adapter: Adapter | None = None, **kwargs: Any
    ) -> unillm.LLM:
        return super().connect(adapter=adapter or SGLangAdapter(api=api), **kwargs)
