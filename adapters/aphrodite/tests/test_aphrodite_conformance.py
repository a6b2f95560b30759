"""The conformance kit on the Aphrodite Engine adapter. The canned answers are OpenAI-shaped guesses:
replace them with answers recorded from Aphrodite Engine (docs/adapters.md, "Recording wire fixtures")."""

from collections.abc import Mapping
from typing import ClassVar

from unillm_aphrodite import AphroditeAdapter

from unillm.adapter import EngineInfo
from unillm.testing.conformance import ERROR_STATUSES, AdapterConformance, openai_error

ANSWER = {
    "object": "text_completion",
    "model": "tiny",
    "choices": [{"index": 0, "text": " world", "finish_reason": "length"}],
    "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
}
STREAM = [
    '{"choices": [{"index": 0, "delta": {"role": "assistant", "content": "Hel"}}]}',
    '{"choices": [{"index": 0, "delta": {"content": "lo"}, "finish_reason": "stop"}]}',
    "[DONE]",
]


class TestAphroditeAdapterConformance(AdapterConformance):
    adapter = AphroditeAdapter()
    info = EngineInfo(engine="aphrodite", model="tiny")
    answer_body = ANSWER
    answer_text = " world"
    stream_events = STREAM
    stream_text = "Hello"
    error_bodies: ClassVar[Mapping[int, bytes]] = {s: openai_error(f"failed: {s}", s) for s in ERROR_STATUSES}
    unchanged_launch_settings: ClassVar[Mapping[str, str]] = {
        "prefix_caching=False": "prefix caching is off unless --enable-prefix-caching is given",
    }
