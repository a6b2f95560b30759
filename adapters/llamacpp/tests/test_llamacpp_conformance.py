"""llama.cpp passes unillm's adapter conformance kit, with answers recorded from a real
llama-cpp-python 0.3.36 server (``record_wire.py``): a completion, a streamed chat, and the error
bodies it sends (400 context overflow, 400 from the grammar guard, 401, and 500 for a request that
fails validation, which unillm maps to InvalidRequest). Other statuses reuse its error layout.
"""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import SecretStr
from unillm_llamacpp import LlamaCppAdapter, LlamaCppInfo

from unillm.adapter.launch_spec import LaunchSpec
from unillm.errors import InvalidRequest, Unauthorized
from unillm.options import make_request
from unillm.testing.conformance import ERROR_STATUSES, SECRET, AdapterConformance, openai_error, sse_payloads

DATA = Path(__file__).parent / "data"
RECORDED = json.loads((DATA / "llamacpp_errors.json").read_text())
# An internal error in the layout of its error handler (what a failing llama_decode answers).
INTERNAL = json.dumps(
    {
        "error": {
            "message": "llama_decode returned -3",
            "type": "internal_server_error",
            "param": None,
            "code": None,
        }
    }
).encode()
ERROR_BODIES = {
    status: RECORDED[str(status)]["body"].encode()
    if str(status) in RECORDED
    else INTERNAL
    if status == 500
    else openai_error(f"failed with {status}", status)
    for status in ERROR_STATUSES
}
ANSWER = json.loads((DATA / "llamacpp_completion.json").read_text())
STREAM = sse_payloads((DATA / "llamacpp_chat_stream.sse").read_text())
INFO = LlamaCppInfo(engine="llamacpp", model="tiny", version="0.3.36", aliases=("tiny",))


class TestLlamaCppConformance(AdapterConformance):
    adapter = LlamaCppAdapter()
    info = INFO
    answer_request = make_request("Hi", None, None, {"max_tokens": 8, "temperature": 0.0}, stream=False)
    answer_body = ANSWER
    answer_text = ANSWER["choices"][0]["text"]
    stream_request = make_request(
        None, [{"role": "user", "content": "Hi"}], None, {"max_tokens": 8, "temperature": 0.0}, stream=True
    )
    stream_events = STREAM
    stream_text = "".join(
        json.loads(e)["choices"][0]["delta"].get("content") or ""
        for e in STREAM
        if e != "[DONE]" and json.loads(e).get("choices")
    )
    error_bodies = ERROR_BODIES
    launch_spec = LaunchSpec(model="/models/tiny.gguf", port=8000, api_key=SecretStr(SECRET))
    capability_versions = (None, "0.3.36")


def test_the_recorded_errors_have_the_statuses_the_kit_expects() -> None:
    assert {name: r["status"] for name, r in RECORDED.items()} == {
        "400": 400,
        "400-grammar": 400,
        "401": 401,
        "500-validation": 500,
    }
    adapter = LlamaCppAdapter()
    for name, typed in (
        ("400", InvalidRequest),
        ("400-grammar", InvalidRequest),
        ("401", Unauthorized),
        ("500-validation", InvalidRequest),
    ):
        error = adapter.parse_error(RECORDED[name]["status"], RECORDED[name]["body"].encode(), None, INFO)
        assert isinstance(error, typed), (name, error)
        assert error.engine_message
