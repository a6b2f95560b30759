"""A stand-in for ``text-generation-launcher``: serves the TGI look-alike on the flags it gets.

Used to prove unillm's supervision of the launcher form (spawn, health, first request,
teardown) on a machine without TGI. It honours ``--model-id``, ``--hostname``, ``--port`` and
the ``API_KEY`` environment variable like the real launcher, logs a line, and runs until
SIGTERM.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from tgi_server import TGIServer


def main() -> None:
    parser = argparse.ArgumentParser(prog="text-generation-launcher")
    parser.add_argument("--model-id", required=True)
    parser.add_argument("--hostname", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--max-total-tokens", type=int, default=128)
    args, _ = parser.parse_known_args()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with TGIServer(
        model_id=args.model_id,
        host=args.hostname,
        port=args.port,
        api_key=os.environ.get("API_KEY"),
        max_total_tokens=args.max_total_tokens,
        max_input_tokens=args.max_total_tokens - 1,
    ):
        print(f"INFO text_generation_router: Connected on {args.hostname}:{args.port}", flush=True)
        stop.wait()
    print("INFO text_generation_launcher: Terminating webserver", flush=True)


if __name__ == "__main__":
    main()
