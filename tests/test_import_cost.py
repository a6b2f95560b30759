"""``connect`` loads no more than it needs (issue 33 item 7): no timing asserts, only which modules load."""

from __future__ import annotations

import subprocess
import sys

import pytest

from unillm.errors import InvalidOptions
from unillm.schema_refs import check_refs

# modules ``connect`` (one engine or a fleet) must not load: schema checking, launching, optional extras
HEAVY = (
    "referencing",
    "jsonschema",
    "rpds",
    "openai",
    "numpy",
    "mcp",
    "opentelemetry",
    "yaml",
    "prometheus_client",
    "tokenizers",
    "unillm.launching",
    "unillm.semantic",
    "unillm.bench",
    "unillm.testing",
)


def test_connect_one_engine_and_a_fleet_load_none_of_the_heavy_modules() -> None:
    code = (
        "import sys, unillm\n"
        "unillm.connect('vllm', 'http://127.0.0.1:1')\n"
        "unillm.connect('vllm', ['http://127.0.0.1:1', 'http://127.0.0.1:2'])\n"
        f"print(sorted(m for m in {HEAVY!r} if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_a_remote_schema_ref_is_still_refused_once_referencing_loads_on_first_use() -> None:
    with pytest.raises(InvalidOptions, match="never fetches"):
        check_refs({"$ref": "https://example.com/s.json"}, "the output schema")
    with pytest.raises(InvalidOptions, match="resolves to nothing"):
        check_refs({"$ref": "#/$defs/missing"}, "the output schema")
