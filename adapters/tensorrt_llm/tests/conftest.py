"""Fixtures for the TensorRT-LLM adapter's tests: an OpenAI look-alike (the suite's FaultServer)
whose every generation body is checked against trtllm-serve's transcribed protocol models."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from pydantic import ValidationError
from trtllm_protocol import REQUESTS, check_request

from unillm.testing.fault_server import FaultServer


@pytest.fixture
def server() -> Iterator[FaultServer]:
    """A trtllm-serve stand-in; the test fails if a body it got is not trtllm-serve's protocol."""
    with FaultServer(model="tiny", version="1.2.1") as s:
        yield s
    problems = []
    for seen in s.requests:
        if seen.path in REQUESTS:
            try:
                check_request(seen.path, seen.body)
            except ValidationError as e:
                problems.append(f"{seen.path}: {e}")
    assert problems == [] and s.errors == [], problems or s.errors
