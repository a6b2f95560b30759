"""The hand-written wire fixtures in ``data/`` (see data/README.md), loaded for the tests."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

DATA = Path(__file__).with_name("data")


def answer(name: str) -> Any:
    """One recorded JSON answer (``data/<name>.json``)."""
    return json.loads((DATA / f"{name}.json").read_text())


def lines(name: str) -> list[str]:
    """The lines of one recorded NDJSON stream (``data/<name>.ndjson``)."""
    return [line for line in (DATA / f"{name}.ndjson").read_text().splitlines() if line.strip()]


ERRORS: dict[int, bytes] = {int(k): json.dumps(v).encode() for k, v in answer("errors").items()}
