"""Ollama passes unillm's adapter conformance kit, fed with the hand-written fixtures in data/.

The canned answer is a ``/api/generate`` GenerateResponse, the stream a ``/api/chat`` NDJSON
stream (the core reads ``application/x-ndjson`` line by line); error bodies are Ollama's
StatusError ``{"error": ...}``. Ollama has no API keys: on a loopback address a key is ignored
(``passes_api_key = False``), elsewhere refused.
"""

from __future__ import annotations

from types import MappingProxyType

from ollama_fixtures import ERRORS, answer, lines
from pydantic import SecretStr
from unillm_ollama import OllamaAdapter

from unillm.adapter.base import EngineInfo
from unillm.adapter.launch_spec import LaunchSpec
from unillm.testing.conformance import ERROR_STATUSES, SECRET, AdapterConformance


class TestOllamaConformance(AdapterConformance):
    adapter = OllamaAdapter()
    info = EngineInfo(engine="ollama", model="llama3.2:1b", version="0.32.15")
    answer_body = answer("generate")
    answer_text = " is calm"
    stream_events = lines("chat_stream")
    stream_text = "Hello"
    error_bodies = ERRORS
    launch_spec = LaunchSpec(model="llama3.2:1b", port=11500, api_key=SecretStr(SECRET))
    capability_versions = (None, "0.32.15", "0.5.0", "0.2.8")
    passes_api_key = False
    unchanged_launch_settings = MappingProxyType(
        {
            "task": "Ollama serves an embedding model like any other: the model decides (llm.embed works)",
            "python": "ollama is a Go program, not a Python one (the core fills python in for every engine)",
            "prefix_caching=True": "Ollama reuses a slot's cached prompt prefix by default",
        }
    )


assert set(ERRORS) == set(ERROR_STATUSES)
