"""A stand-in for vLLM's server process: serves the vLLM look-alike on the ``--port`` it gets.

Used to prove fleet supervision (concurrent start, one engine failing, teardown of the others)
without loading models. ``FAKE_ENGINE_FAIL_PORT=N``: the engine given ``--port N`` prints an
error and exits with code 3 instead of serving. Runs until SIGTERM.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fault_server import FaultServer


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--served-model-name", default="tiny")
    args, _ = parser.parse_known_args()
    if os.environ.get("FAKE_ENGINE_FAIL_PORT") == str(args.port):
        print("ERROR fake engine: cannot allocate the KV cache", flush=True)
        sys.exit(3)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with FaultServer(model=args.served_model_name, port=args.port):
        print(f"INFO fake engine: serving on 127.0.0.1:{args.port}", flush=True)
        stop.wait()


if __name__ == "__main__":
    main()
