"""Batch test helpers: input files, reading results, and a slow vLLM look-alike."""

from __future__ import annotations

import asyncio
import errno
import json
import os
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


def result(custom_id: str, *, ok: bool = True) -> str:
    """One output line: a success, or (``ok=False``) a failure."""
    response: dict[str, object] = {"status_code": 200 if ok else 500, "request_id": "r", "body": {}}
    error = None if ok else {"code": "EngineInternalError", "message": "boom"}
    return json.dumps({"id": "x", "custom_id": custom_id, "response": response, "error": error}) + "\n"


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


class Poisoned:
    """A client that sends through ``client``, except that the prompt ``poison`` raises ``error``
    inside unillm (an exception no request should let out, e.g. jsonschema's on a bad ``$ref``)."""

    def __init__(self, client: Any, error: Exception) -> None:
        self.client, self.error = client, error

    async def generate(self, prompt: str | None = None, **kwargs: Any) -> Any:
        if prompt == "poison":
            raise self.error
        return await self.client.generate(prompt, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.client, name)


def write_poisoned(path: Path, n: int) -> Path:
    """``n`` simple requests r0.., the middle one's prompt ``poison``."""
    lines = [{"custom_id": f"r{i}", "prompt": "poison" if i == n // 2 else f"q{i}"} for i in range(n)]
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return path


class DiskFullAfter:
    """Stands in for the ``os`` module of :mod:`unillm.batch.journal` (``monkeypatch.setattr(journal,
    "os", DiskFullAfter(3))``): the disk fills once ``lines`` lines are written, so the write that
    crosses it writes part of its data, then fails with ENOSPC. Everything else is the real ``os``."""

    def __init__(self, lines: int) -> None:
        self.left = lines

    def write(self, fd: int, data: Any) -> int:
        data = bytes(data)
        if data.count(b"\n") > self.left:
            os.write(fd, data[: len(data) // 2])
            raise OSError(errno.ENOSPC, "No space left on device")
        self.left -= data.count(b"\n")
        return os.write(fd, data)

    def __getattr__(self, name: str) -> Any:
        return getattr(os, name)
