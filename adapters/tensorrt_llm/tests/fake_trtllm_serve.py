"""A stand-in for ``trtllm-serve``: checks its flags against serve.py's, reads the YAML options
file it is given, logs it, and serves the suite's OpenAI look-alike until SIGTERM, answering 400
to a body trtllm-serve's protocol models refuse (trtllm_protocol.py).

Used to prove the launch seam end to end on a machine without a GPU: the core wrote the options
file next to the command, put its path in argv, and the engine could read it at start.
"""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parents[2] / "tests")]

import yaml  # noqa: E402
from fault_server import FaultServer  # type: ignore[import-not-found]  # noqa: E402
from trtllm_protocol import BACKENDS, SERVE_FLAGS, request_problem  # noqa: E402


def main() -> None:
    if sys.argv[1:2] != ["serve"]:
        sys.exit(f"fake trtllm-serve: only `serve` is known, got {sys.argv[1:]}")
    unknown = [a for a in sys.argv[3:] if a.startswith("--") and a not in SERVE_FLAGS]
    if unknown:
        sys.exit(f"Error: No such option: {unknown[0]}")
    parser = argparse.ArgumentParser(prog="trtllm-serve serve")
    parser.add_argument("model")
    parser.add_argument("--host", default="localhost")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--backend", choices=BACKENDS, default="pytorch")
    parser.add_argument("--extra_llm_api_options")
    args, _ = parser.parse_known_args(sys.argv[2:])
    options = (
        yaml.safe_load(Path(args.extra_llm_api_options).read_text()) if args.extra_llm_api_options else {}
    )
    print(f"[TRT-LLM] [I] extra_llm_api_options: {options}", flush=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    with FaultServer(model=Path(args.model).name, version="1.2.1", port=args.port) as server:
        server.check = request_problem  # trtllm-serve's protocol: 400 to what it refuses
        print(f"INFO:     Uvicorn running on http://{args.host}:{args.port}", flush=True)
        signal.pause()


if __name__ == "__main__":
    main()
