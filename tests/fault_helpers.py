"""Shared by the tests that run against the vLLM look-alike (:mod:`unillm.testing.fault_server`)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from unillm.testing.fault_server import FaultServer

#: The answer every look-alike streams unless a test says otherwise.
PIECES = ("Hello", ",", " world", "!")
TEXT = "".join(PIECES)


def checked_server(**kwargs: Any) -> Iterator[FaultServer]:
    """A running :class:`FaultServer` (``kwargs`` to its constructor) that must end with no
    error of its own; ``yield from`` it in a fixture."""
    with FaultServer(**kwargs) as s:
        yield s
    assert s.errors == [], f"the fault server itself failed: {s.errors}"
