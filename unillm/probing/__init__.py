"""Measure, by effect, which options a running engine honours (``unillm probe``).

report = await unillm.probe(llm)          # one cell per option: honoured / refused / ignored / ...
print(report.text())                      # or .markdown(), .model_dump_json()

The requests and judgements are pure and separate (:mod:`~unillm.probing.cells`,
:mod:`~unillm.probing.judge`); :mod:`~unillm.probing.peers` runs the same cells through the
openai SDK and LiteLLM, for a side-by-side count of silent drops.
"""

from __future__ import annotations

from unillm.probing.report import Cell, ProbeReport, Verdict
from unillm.probing.runner import probe, run_cells

__all__ = ["Cell", "ProbeReport", "Verdict", "probe", "run_cells"]
