"""TensorRT-LLM passes unillm's adapter conformance kit, fed with the hand-written fixtures in data/.

The canned answer is a ``/v1/completions`` CompletionResponse, the stream a chat SSE stream
(ChatCompletionStreamResponse chunks, a usage chunk, ``[DONE]``), error bodies trtllm-serve's
``ErrorResponse``. trtllm-serve has no API keys: on a loopback address a key is ignored
(``passes_api_key = False``), elsewhere refused.
"""

from __future__ import annotations

from types import MappingProxyType

from pydantic import SecretStr
from trtllm_fixtures import ERRORS, answer, stream
from unillm_tensorrt_llm import TensorRTLLMAdapter

from unillm.adapter.base import EngineInfo
from unillm.adapter.launch_spec import LaunchSpec
from unillm.testing.conformance import ERROR_STATUSES, SECRET, AdapterConformance, sse_payloads


class TestTensorRTLLMConformance(AdapterConformance):
    adapter = TensorRTLLMAdapter()
    info = EngineInfo(engine="tensorrt_llm", model="tiny", version="1.2.1")
    answer_body = answer("completion")
    answer_text = " is calm"
    stream_events = sse_payloads(stream("chat_stream"))
    stream_text = "Hello"
    error_bodies = ERRORS
    launch_spec = LaunchSpec(model="/models/tiny", port=8000, api_key=SecretStr(SECRET))
    capability_versions = (None, "1.2.1")
    passes_api_key = False
    unchanged_launch_settings = MappingProxyType(
        {"structured_backend": "xgrammar is the guided-decoding backend unillm's launch sets by default"}
    )


assert set(ERRORS) == set(ERROR_STATUSES)
