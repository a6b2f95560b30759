"""The notebooks run top to bottom against the real engine (as a user would run them)."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from unillm.testing.engines import RunningEngine

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"


@pytest.mark.engine
def test_quickstart_notebook_runs_against_vllm(
    vllm_server: RunningEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("UNILLM_BASE_URL", vllm_server.base_url)
    monkeypatch.setenv("UNILLM_API_KEY", vllm_server.api_key or "")
    nb = nbformat.read(NOTEBOOKS / "quickstart.ipynb", as_version=4)
    NotebookClient(
        nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(NOTEBOOKS)}}
    ).execute()
    outputs = [o for cell in nb.cells if cell.cell_type == "code" for o in cell.get("outputs", [])]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    text = "".join(str(o.get("data", {}).get("text/plain", "")) for o in outputs)
    assert "Answer(verdict=" in text
