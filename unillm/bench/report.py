"""Write a benchmark's results: one vLLM-layout JSON per run, all runs together, a markdown table.

paths = write_report(report, "bench-results/")   # run-*.json, bench.json, summary.md, report.html
print(markdown_table(report.runs))
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path

from unillm.bench.result import RunResult
from unillm.bench.suite import BenchReport
from unillm.bench.tables import intervals, table_rows


def markdown_table(runs: Sequence[RunResult]) -> str:
    """One row per run: target, load, completed/failed, throughputs and latency medians/tails.

    Args:
        runs: The runs to tabulate, one row each.
    """
    head, rows = table_rows(runs)
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(c.replace("|", "/") for c in cells) + " |" for cells in rows]
    errors = [r for r in runs if r.error]
    if errors:
        lines.append("")
        lines += [
            f"* {r.target.label} ({r.load.label()}): {r.error.splitlines()[0]}" for r in errors if r.error
        ]
    lines += [
        "",
        "TTFT: time to the first streamed chunk. TPOT: (latency - TTFT) / (output tokens - 1), "
        "per request. ITL: every gap between chunks, pooled. E2EL: request latency. "
        "(`vllm bench serve` definitions.)",
    ]
    ci_head, ci_rows = intervals(runs)
    if ci_rows:
        lines += ["", "Repeated runs, mean ± 95% confidence half-width (Student's t):", ""]
        lines += ["| " + " | ".join(ci_head) + " |", "|" + "---|" * len(ci_head)]
        lines += ["| " + " | ".join(c.replace("|", "/") for c in cells) + " |" for cells in ci_rows]
    return "\n".join(lines) + "\n"


def write_report(report: BenchReport, out_dir: str | Path, *, plots: bool = True) -> list[Path]:
    """Write every file of the report into ``out_dir``; returns the paths written.

    Args:
        report: The suite's report.
        out_dir: The folder to write into (created if missing).
        plots: Also write the plots (needs matplotlib).
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for i, run in enumerate(report.runs):
        path = out / f"run-{i:02d}-{_slug(run.target.label)}-{_slug(run.load.label())}.json"
        path.write_text(json.dumps(run.to_vllm_json(), indent=1) + "\n")
        written.append(path)
    everything = out / "bench.json"
    everything.write_text(json.dumps({"runs": [r.to_vllm_json() for r in report.runs]}) + "\n")
    table = out / "summary.md"
    table.write_text(markdown_table(report.runs))
    written += [everything, table]
    if plots:
        from unillm.bench.html import write_html
        from unillm.bench.plots import write_plots

        pngs = write_plots(report.runs, out)
        written += pngs
        written.append(write_html(report.runs, out / "report.html", pngs))
    return written


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9.=]+", "-", text).strip("-")[:60]
