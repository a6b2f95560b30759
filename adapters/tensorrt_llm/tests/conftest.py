"""Fixtures for the TensorRT-LLM adapter's tests: an OpenAI look-alike (the suite's FaultServer)
that answers 400 to what trtllm-serve's protocol models refuse (an unknown field among them:
``extra="forbid"``), and fails the test that sent it."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.append(str(Path(__file__).resolve().parents[3] / "tests"))  # the suite's fault_server.py

from fault_server import FaultServer  # type: ignore[import-not-found]
from trtllm_protocol import request_problem


@pytest.fixture
def server() -> Iterator[FaultServer]:
    """A trtllm-serve stand-in; the test fails if a body it got is not trtllm-serve's protocol."""
    with FaultServer(model="tiny", version="1.2.1") as s:
        s.check = request_problem
        yield s
    problems = [p for seen in s.requests if (p := request_problem(seen.path, seen.body))]
    assert problems == [] and s.errors == [], problems or s.errors
