"""A fake engine *process* for launch tests: serves the look-alike server where the engine would.

Put it before the adapter's command with ``LaunchSpec(prefix=...)``: unillm then starts this
module instead of the engine, with the adapter's whole command line after ``--``, and it serves
:class:`~unillm.testing.fault_server.FaultServer` (an OpenAI-compatible vLLM look-alike: health,
``/v1/models``, completions and chat) on the port that command line names. So a launch test
checks supervision, readiness, teardown and the rendered command with no engine installed::

    from unillm.testing import fake_engine

    async with unillm.launch("myengine", model="tiny", served_name="tiny", api_key=None,
                             prefix=fake_engine.prefix(port_flag="--port")) as llm:
        assert (await llm.generate("Hi", max_tokens=4)).text == "Hello, world!"

``--crash-after N`` exits with code 3 after answering N generation requests (unillm's readiness
probe counts as one), as an engine the kernel killed. ``FAKE_ENGINE_FAIL_PORT=P`` in its
environment: the engine given port P prints an error and exits with code 3 instead of serving.
It runs until SIGTERM, then prints one line ``SEEN {"path", "max_tokens", "kv_transfer_params",
"authorized"}`` per generation request it answered (tests read them back from the engine's log);
``authorized``: the request carried the key of ``VLLM_API_KEY`` (the look-alike checks no key).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Sequence

from unillm.testing.fault_server import GENERATION_PATHS, FaultServer

__all__ = ["main", "prefix"]


def prefix(
    *, crash_after: int | None = None, port_flag: str = "--port", name_flag: str = "--served-model-name"
) -> list[str]:
    """The ``LaunchSpec.prefix`` that starts this fake engine in place of the adapter's command.

    Args:
        crash_after: Exit abruptly (code 3) after answering this many generation requests;
            None serves until SIGTERM.
        port_flag: The flag of the adapter's command that carries the port.
        name_flag: The flag that carries the served model name (``"tiny"`` when absent).

    Returns:
        The words to put before the adapter's command line.
    """
    words = [sys.executable, "-m", __name__]
    if port_flag != "--port":  # a flag's value that is a flag itself goes after "="
        words.append(f"--port-flag={port_flag}")
    if name_flag != "--served-model-name":
        words.append(f"--name-flag={name_flag}")
    if crash_after is not None:
        words += ["--crash-after", str(crash_after)]
    return [*words, "--"]


def _value(command: Sequence[str], flag: str) -> str | None:
    """The value after ``flag`` (or of ``flag=value``) in the engine's command line."""
    for i, word in enumerate(command):
        if word == flag and i + 1 < len(command):
            return command[i + 1]
        if word.startswith(flag + "="):
            return word.split("=", 1)[1]
    return None


def _report(server: FaultServer) -> None:
    key = os.environ.get("VLLM_API_KEY")
    for seen in server.requests:
        if seen.path in GENERATION_PATHS and isinstance(seen.body, dict):
            report = {
                "path": seen.path,
                "max_tokens": seen.body.get("max_tokens"),
                "kv_transfer_params": "kv_transfer_params" in seen.body,
                "authorized": seen.headers.get("authorization") == f"Bearer {key}",
            }
            print("SEEN " + json.dumps(report), flush=True)


def main(argv: Sequence[str] | None = None) -> None:
    """Serve the look-alike on the port of the engine command after ``--`` (see the module doc).

    Args:
        argv: This module's options, ``--``, then the engine's command (default: ``sys.argv[1:]``).
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    split = argv.index("--") if "--" in argv else len(argv)
    ours = argparse.ArgumentParser(prog="python -m unillm.testing.fake_engine")
    ours.add_argument("--crash-after", type=int)
    ours.add_argument("--port-flag", default="--port")
    ours.add_argument("--name-flag", default="--served-model-name")
    args = ours.parse_args(argv[:split])
    engine = argv[split + 1 :]
    port = _value(engine, args.port_flag)
    if port is None:
        sys.exit(
            f"fake engine: no {args.port_flag} in the engine's command {engine}: pass the flag that "
            "carries the port as fake_engine.prefix(port_flag=...) (and the served model name's as "
            "name_flag=...)"
        )
    if os.environ.get("FAKE_ENGINE_FAIL_PORT") == port:
        print("ERROR fake engine: cannot allocate the KV cache", flush=True)
        sys.exit(3)
    name = _value(engine, args.name_flag) or "tiny"
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    # A crashing engine streams long answers, so that it can die in the middle of one.
    server = FaultServer(model=name, port=int(port))
    if args.crash_after is not None:
        server.pieces = tuple(f" w{i}" for i in range(16))
    with server:
        print(f"INFO fake engine: serving on 127.0.0.1:{port}", flush=True)
        if args.crash_after is None:
            stop.wait()
        else:
            while sum(server.count(p) for p in GENERATION_PATHS) < args.crash_after:
                time.sleep(0.02)
            time.sleep(0.05)  # let the last answer start streaming
            print("crashing now", flush=True)
            os._exit(3)
    _report(server)


if __name__ == "__main__":
    main()
