"""Record llama-cpp-python's answers for the conformance kit into data/ (run it by hand).

    python adapters/llamacpp/tests/record_wire.py     # launches the tiny model, records, stops

Records the completions answer to "Hi", a streamed chat answer to "Hi", and the error bodies the
server really sends (400 context overflow, 400 grammar guard, 401 wrong key, 500 for a validation error).
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import httpx

import unillm
from unillm.testing.engines import cpu_launch_settings
from unillm.testing.tiny_model import build_tiny_model

DATA = Path(__file__).parent / "data"


def record(base: str, key: str) -> None:
    auth = {"Authorization": f"Bearer {key}"}
    with httpx.Client(base_url=base, headers=auth, timeout=120) as client:
        answer = client.post(
            "/v1/completions", json={"model": "tiny", "prompt": "Hi", "max_tokens": 8, "temperature": 0}
        )
        (DATA / "llamacpp_completion.json").write_text(json.dumps(answer.json(), indent=1) + "\n")
        chat = {
            "model": "tiny",
            "messages": [{"role": "user", "content": "Hi"}],
            "max_tokens": 8,
            "temperature": 0,
            "stream": True,
        }
        with client.stream("POST", "/v1/chat/completions", json=chat) as stream:
            (DATA / "llamacpp_chat_stream.sse").write_text(stream.read().decode())
        errors = {
            "400": client.post("/v1/completions", json={"prompt": "Hi " * 2000, "max_tokens": 4}),
            "400-grammar": client.post("/v1/completions", json={"prompt": "Hi", "grammar": 'root ::= "a'}),
            "401": httpx.post(
                base + "/v1/completions", json={"prompt": "Hi"}, headers={"Authorization": "Bearer wrong"}
            ),
            "500-validation": client.post("/v1/completions", json={"prompt": "Hi", "top_p": 7}),
        }
    bodies = {name: {"status": r.status_code, "body": r.text} for name, r in errors.items()}
    (DATA / "llamacpp_errors.json").write_text(json.dumps(bodies, indent=1) + "\n")


def main() -> None:
    DATA.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory() as workdir:
        settings = cpu_launch_settings("llamacpp", build_tiny_model(), Path(workdir), served_name="tiny")
        launch = unillm.launch("llamacpp", **settings)
        with launch.blocking():
            record(launch.base_url, str(launch.spec.key()))


if __name__ == "__main__":
    main()
