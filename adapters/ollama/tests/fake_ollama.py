"""A stand-in for the ``ollama`` program: ``ollama serve`` runs the look-alike on ``$OLLAMA_HOST``.

Used to prove unillm's supervision of an Ollama launch (the binary found on PATH, health,
the model pull with progress, the first request, teardown) on a machine without Ollama. The
library it can pull is ``tiny:1b``; ``FAKE_OLLAMA_FAULT=pull_error_line`` (or ``pull_status``)
makes the pull fail.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from ollama_server import Fault, OllamaServer


def main() -> None:
    if sys.argv[1:2] != ["serve"]:
        sys.exit(f"fake ollama: only `serve` is known, got {sys.argv[1:]}")
    host, _, port = os.environ.get("OLLAMA_HOST", "127.0.0.1:11434").rpartition(":")
    kind: Any = os.environ.get("FAKE_OLLAMA_FAULT")
    server = OllamaServer(
        host=host, port=int(port), fault=Fault(kind, message="pull denied") if kind else None
    )
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    with server:
        print(f'time=2026-08-21 level=INFO msg="Listening on {host}:{port} (version 0.32.15)"', flush=True)
        signal.pause()


if __name__ == "__main__":
    main()
