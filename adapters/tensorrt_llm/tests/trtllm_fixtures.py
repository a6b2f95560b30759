"""Hand-written trtllm-serve answers (see data/README.md): shapes from the serve protocol models."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

DATA = Path(__file__).with_name("data")


def answer(name: str) -> Any:
    """One recorded JSON answer (``data/<name>.json``)."""
    return json.loads((DATA / f"{name}.json").read_text())


def stream(name: str) -> str:
    """One recorded SSE stream (``data/<name>.sse``)."""
    return (DATA / f"{name}.sse").read_text()


ERRORS: dict[int, bytes] = {
    int(status): json.dumps(
        {"object": "error", "message": message, "type": kind, "param": None, "code": int(status)}
    ).encode()
    for status, (kind, message) in answer("errors").items()
}
