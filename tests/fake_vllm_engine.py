"""A stand-in for vLLM's server process: serves the vLLM look-alike on the ``--port`` it gets.

Used to prove fleet supervision (concurrent start, one engine failing, teardown of the others)
without loading models. ``FAKE_ENGINE_FAIL_PORT=N``: the engine given ``--port N`` prints an
error and exits with code 3 instead of serving. Runs until SIGTERM, then prints one line
``SEEN {"path", "max_tokens", "kv_transfer_params", "authorized"}`` per generation request it
answered (read back from the engine's log by tests); ``authorized``: it carried the key of
``VLLM_API_KEY``, which the look-alike itself does not check.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fault_server import GENERATION_PATHS, FaultServer


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--served-model-name", default="tiny")
    args, _ = parser.parse_known_args()
    if os.environ.get("FAKE_ENGINE_FAIL_PORT") == str(args.port):
        print("ERROR fake engine: cannot allocate the KV cache", flush=True)
        sys.exit(3)
    key = os.environ.get("VLLM_API_KEY")
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with FaultServer(model=args.served_model_name, port=args.port) as server:
        print(f"INFO fake engine: serving on 127.0.0.1:{args.port}", flush=True)
        stop.wait()
    for seen in server.requests:
        if seen.path in GENERATION_PATHS and isinstance(seen.body, dict):
            print(
                "SEEN "
                + json.dumps(
                    {
                        "path": seen.path,
                        "max_tokens": seen.body.get("max_tokens"),
                        "kv_transfer_params": "kv_transfer_params" in seen.body,
                        "authorized": seen.headers.get("authorization") == f"Bearer {key}",
                    }
                ),
                flush=True,
            )


if __name__ == "__main__":
    main()
