"""TGI passes unillm's adapter conformance kit (canned answers in TGI 3.3's /generate layout).

Error bodies follow TGI's ErrorResponse ``{"error": ..., "error_type": ...}``; its auth layer and
router answer 401 and unknown routes (404) with an empty body, as ``tgi_server.py`` does.
"""

from __future__ import annotations

import json
from types import MappingProxyType

from tgi_fakes import tgi_info
from unillm_tgi import TGIAdapter

from unillm.options import make_request
from unillm.testing.conformance import ERROR_STATUSES, AdapterConformance


def _token(i: int, text: str, *, special: bool = False, last: dict[str, object] | None = None) -> str:
    event: dict[str, object] = {
        "index": i,
        "token": {"id": 100 + i, "text": text, "logprob": -0.5, "special": special},
        "generated_text": None,
        "details": None,
        "top_tokens": None,
    }
    if last is not None:
        event.update(last)
    return json.dumps(event)


_ERRORS: dict[int, bytes] = {
    400: b'{"error":"Input validation error: `inputs` cannot be empty","error_type":"validation"}',
    401: b"",
    403: b'{"error":"Forbidden","error_type":"forbidden"}',
    404: b"",
    422: b'{"error":"Input validation error: `top_p` must be > 0.0 and < 1.0","error_type":"validation"}',
    429: b'{"error":"Model is overloaded","error_type":"overloaded"}',
    500: b'{"error":"Incomplete generation","error_type":"incomplete_generation"}',
    502: b"Bad Gateway",
    503: b'{"error":"unhealthy","error_type":"healthcheck"}',
}


ANSWER = {
    "generated_text": " the sea",
    "details": {"finish_reason": "length", "generated_tokens": 2, "seed": None, "prefill": [], "tokens": []},
}


class TestTGIConformance(AdapterConformance):
    adapter = TGIAdapter(runtime="launcher", cache_dir="/cache")
    info = tgi_info(
        version="3.3.6", max_model_len=128, max_input_tokens=64, max_best_of=2, max_stop_sequences=4
    )
    answer_body = ANSWER
    answer_text = " the sea"
    stream_request = make_request("Hi", None, None, {"max_tokens": 8}, stream=True)  # /generate_stream
    stream_events = (
        _token(1, "Hel"),
        _token(2, "lo"),
        _token(
            3,
            "</s>",
            special=True,
            last={
                "generated_text": "Hello",
                "details": {
                    "finish_reason": "eos_token",
                    "generated_tokens": 3,
                    "seed": None,
                    "input_length": 2,
                },
            },
        ),
    )
    stream_text = "Hello"
    error_bodies = _ERRORS
    capability_versions = (None, "3.3.6", "2.0.4", "1.3.0")
    unchanged_launch_settings = MappingProxyType(
        {
            "served_name": "TGI has no served-name flag: served_name is the model name unillm "
            "reports in its results",
            "python": "text-generation-launcher is not a Python program (the core fills python "
            "in for every engine)",
        }
    )


assert set(_ERRORS) == set(ERROR_STATUSES)
