"""A vLLM look-alike *process* that crashes mid-run: for the benchmark's crashed-engine path.

Launched by ``unillm.launch("vllm", ..., prefix=[python, this file, "--crash-after", "N", "--"])``:
the adapter's vLLM command line follows ``--`` and only its ``--port`` is read. It serves like
:class:`tests.fault_server.FaultServer` (completions and chat, streamed or not, ``/health``),
and after answering N generation requests (unillm's readiness probe counts as one) it exits
abruptly with code 3, as an engine killed by the kernel would.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fault_server import GENERATION_PATHS, FaultServer


def main() -> None:
    argv = sys.argv[1:]
    split = argv.index("--") if "--" in argv else len(argv)
    ours = argparse.ArgumentParser()
    ours.add_argument("--crash-after", type=int, required=True)
    args = ours.parse_args(argv[:split])
    engine = argv[split + 1 :]
    port = int(engine[engine.index("--port") + 1])
    name = engine[engine.index("--served-model-name") + 1] if "--served-model-name" in engine else "tiny"
    server = FaultServer(model=name, port=port, pieces=tuple(f" w{i}" for i in range(16))).start()
    print(f"look-alike engine on port {server.port}; exits after {args.crash_after} generations", flush=True)
    while sum(server.count(p) for p in GENERATION_PATHS) < args.crash_after:
        time.sleep(0.02)
    time.sleep(0.05)  # let the last answer start streaming
    print("crashing now", flush=True)
    os._exit(3)


if __name__ == "__main__":
    main()
