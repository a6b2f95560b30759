"""What the ``sglang_server`` fixture yields (its own module: test files import it by name)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from unillm_sglang import SGLangAdapter
from unillm_sglang.adapter import ApiChoice

import unillm
from unillm.adapter.base import Adapter
from unillm.testing.engines import RunningEngine


@dataclass(frozen=True)
class SGLangServer(RunningEngine):
    """A running SGLang server; ``connect(api=...)`` forces its "openai" or "native" API."""

    def connect(
        self, api: ApiChoice = "auto", *, adapter: Adapter | None = None, **kwargs: Any
    ) -> unillm.LLM:
        return super().connect(adapter=adapter or SGLangAdapter(api=api), **kwargs)
