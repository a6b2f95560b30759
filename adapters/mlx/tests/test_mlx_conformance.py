"""MLX passes unillm's adapter conformance kit, with answers recorded from a real mlx_lm.server 0.32.2.

The 400 body is recorded (data/mlx_error_400.json); mlx_lm.server has no other error answers worth
recording, so the other statuses reuse its ``{"error": "..."}`` layout. mlx_lm.server has no
authentication: MLX ignores an API key on a loopback address (``passes_api_key = False``: the key must
then appear nowhere) and refuses one on any other address (see test_mlx_golden.py).
"""

from __future__ import annotations

import json
from pathlib import Path
from types import MappingProxyType

from unillm_mlx import MLXAdapter

from unillm.adapter.base import EngineInfo
from unillm.options import make_request
from unillm.testing.conformance import ERROR_STATUSES, AdapterConformance, sse_payloads

DATA = Path(__file__).parent / "data"
RECORDED_400 = json.loads((DATA / "mlx_error_400.json").read_text())
CHAT = [{"role": "user", "content": "hi"}]
ERROR_BODIES = {
    status: RECORDED_400["body"].encode()
    if status == RECORDED_400["status"]
    else json.dumps({"error": f"failed with {status}"}).encode()
    for status in ERROR_STATUSES
}


class TestMLXConformance(AdapterConformance):
    adapter = MLXAdapter()
    info = EngineInfo(engine="mlx", model="default_model", version=None)
    answer_request = make_request(None, CHAT, None, {"max_tokens": 3}, stream=False)
    answer_body = json.loads((DATA / "mlx_chat.json").read_text())
    answer_text = "oder 92"
    stream_request = make_request(None, CHAT, None, {"max_tokens": 3}, stream=True)
    stream_events = sse_payloads((DATA / "mlx_chat_stream.sse").read_text())
    stream_text = "oder 92"
    error_bodies = ERROR_BODIES
    capability_versions = (None, "0.32.2+in-process")
    passes_api_key = False  # mlx_lm.server has no authentication
    unchanged_launch_settings = MappingProxyType(
        {
            "prefix_caching=True": "mlx_lm.server keeps a prompt cache by default",
            "lora": "served per request: bind() sends the adapter's path in each request's "
            "`adapters` field (mlx_lm.server has no flag that names several adapters)",
        }
    )


def test_the_recorded_error_is_a_400() -> None:
    assert RECORDED_400["status"] == 400
