"""Write a benchmark's results: one vLLM-layout JSON per run, all runs together, a markdown table.

paths = write_report(report, "bench-results/")   # run-*.json, bench.json, summary.md
print(markdown_table(report.runs))
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path

from unillm.bench.result import RunResult
from unillm.bench.suite import BenchReport

#: Columns of the markdown table: (header, vLLM key, format).
COLUMNS = (
    ("req/s", "request_throughput", "{:.2f}"),
    ("out tok/s", "output_throughput", "{:.1f}"),
    ("TTFT p50 ms", "median_ttft_ms", "{:.1f}"),
    ("TTFT p99 ms", "p99_ttft_ms", "{:.1f}"),
    ("TPOT p50 ms", "median_tpot_ms", "{:.2f}"),
    ("ITL p50 ms", "median_itl_ms", "{:.2f}"),
    ("E2EL p50 ms", "median_e2el_ms", "{:.1f}"),
    ("E2EL p99 ms", "p99_e2el_ms", "{:.1f}"),
)


def markdown_table(runs: Sequence[RunResult]) -> str:
    """One row per run: target, load, completed/failed, throughputs and latency medians/tails.

    Args:
        runs: The runs to tabulate, one row each.
    """
    goodput = any(r.summary is not None and r.summary.request_goodput is not None for r in runs)
    head = ["target", "load", "ok/failed", *(h for h, _, _ in COLUMNS)]
    if goodput:
        head.append("goodput req/s")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in runs:
        s = r.summary
        cells = [r.target.label, r.load.label(), f"{s.completed}/{s.failed}" if s else "-"]
        cells += [_fmt(r.metric(key), fmt) for _, key, fmt in COLUMNS]
        if goodput:
            cells.append(_fmt(s.request_goodput if s else None, "{:.2f}"))
        lines.append("| " + " | ".join(c.replace("|", "/") for c in cells) + " |")
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
        from unillm.bench.plots import write_plots

        written += write_plots(report.runs, out)
    return written


def _fmt(value: float | None, fmt: str) -> str:
    return "-" if value is None else fmt.format(value)


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9.=]+", "-", text).strip("-")[:60]
