"""Fixtures for the Ollama adapter's tests: an Ollama look-alike held to Ollama's transcribed types."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from ollama_server import OllamaServer


@pytest.fixture
def server() -> Iterator[OllamaServer]:
    """An Ollama look-alike with ``tiny:1b`` pulled; the test fails if it saw a contract violation
    or a key Ollama would have dropped silently."""
    with OllamaServer(store={"tiny:1b"}) as s:
        yield s
    assert s.errors == [], f"Ollama look-alike saw problems: {s.errors}"
    assert s.dropped == [], f"Ollama would drop these keys silently: {s.dropped}"
