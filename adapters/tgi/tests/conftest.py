"""Fixtures for the TGI adapter's tests: the published contract and a TGI look-alike server."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from tgi_openapi import Contract
from tgi_server import TGIServer


@pytest.fixture(scope="session")
def contract() -> Contract:
    """TGI's published OpenAPI contract, kept in the repository (tests/data/tgi_openapi.json)."""
    return Contract.load()


@pytest.fixture
def server() -> Iterator[TGIServer]:
    """A TGI look-alike on a free port; the test fails if it saw a contract violation."""
    with TGIServer(loras={"sql": ("SELECT", " 1")}) as s:
        yield s
    assert s.errors == [], f"TGI look-alike saw problems: {s.errors}"
