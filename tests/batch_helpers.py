"""Batch test helpers: input files, reading results, and a slow vLLM look-alike."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from unillm.testing.fault_server import FaultServer


def write_input(path: Path, n: int) -> Path:
    lines = [
        {
            "custom_id": f"r{i}",
            "method": "POST",
            "url": "/v1/chat/completions",
            "body": {
                "model": "gpt-4o-mini",
                "messages": [{"role": "user", "content": f"q{i}"}],
                "max_tokens": 4,
            },
        }
        for i in range(n)
    ]
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return path


def results(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text().splitlines()]


def ids(path: Path) -> list[str]:
    return sorted(x["custom_id"] for x in results(path))


def every(n: int) -> list[str]:
    return sorted(f"r{i}" for i in range(n))


class SlowServer(FaultServer):
    """Answers each generation after ``delay`` seconds; ``most`` is the most answered at once."""

    def __init__(self, delay: float) -> None:
        super().__init__()
        self.delay, self.now, self.most = delay, 0, 0

    async def _answer(self, request: Any, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        if request.method != "POST":
            return await super()._answer(request, reader, writer)
        self.now += 1
        self.most = max(self.most, self.now)
        try:
            await asyncio.sleep(self.delay)
            return await super()._answer(request, reader, writer)
        finally:
            self.now -= 1
