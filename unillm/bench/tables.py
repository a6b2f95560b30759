"""The benchmark's tables as rows of text cells (shared by the markdown and HTML reports).

head, rows = table_rows(runs)      # one row per run; extra columns only when some run has them
head, rows = intervals(runs)       # repeated runs: mean +/- 95% CI per (target, load) point
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from unillm.bench.result import RunResult
from unillm.bench.stats import mean_ci

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

#: Columns shown only when some run has them: (header, value of a run, format).
EXTRA_COLUMNS: tuple[tuple[str, Callable[[RunResult], float | None], str], ...] = (
    ("goodput req/s", lambda r: r.summary.request_goodput if r.summary else None, "{:.2f}"),
    ("sessions", lambda r: r.summary.sessions if r.summary else None, "{:.0f}"),
    ("good sessions/s", lambda r: r.summary.session_goodput if r.summary else None, "{:.3f}"),
    ("cancelled", lambda r: (r.summary.cancelled or None) if r.summary else None, "{:.0f}"),
    ("engine aborted", lambda r: r.engine.aborted, "{:.0f}"),
    ("prefix hit %", lambda r: _percent(r.engine.prefix_cache_hit_ratio), "{:.1f}"),
)

#: What repeated runs are summarized by (vLLM keys).
CI_KEYS = (
    ("out tok/s", "output_throughput"),
    ("TTFT p50 ms", "median_ttft_ms"),
    ("TTFT p99 ms", "p99_ttft_ms"),
    ("ITL p50 ms", "median_itl_ms"),
    ("ITL p99 ms", "p99_itl_ms"),
)


def table_rows(runs: Sequence[RunResult]) -> tuple[list[str], list[list[str]]]:
    """The summary table's header and rows (the extra columns only when some run has them).

    Args:
        runs: The runs to tabulate, one row each.
    """
    extras = [c for c in EXTRA_COLUMNS if any(c[1](r) is not None for r in runs)]
    repeats = any(r.repeat for r in runs)
    head = ["target", "load", *(["run"] if repeats else []), "ok/failed"]
    head += [h for h, _, _ in COLUMNS] + [h for h, _, _ in extras]
    rows = []
    for r in runs:
        s = r.summary
        cells = [r.target.label, r.load.label(), *([str(r.repeat + 1)] if repeats else [])]
        cells.append(f"{s.completed}/{s.failed}" if s else "-")
        cells += [_fmt(r.metric(key), fmt) for _, key, fmt in COLUMNS]
        cells += [_fmt(value(r), fmt) for _, value, fmt in extras]
        rows.append(cells)
    return head, rows


def intervals(runs: Sequence[RunResult]) -> tuple[list[str], list[list[str]]]:
    """Mean ± 95% CI of the main figures per (target, load) point measured more than once.

    Args:
        runs: The runs; those of the same target and load are one point's repeats.

    Returns:
        The header and one row per repeated point (no rows when nothing was repeated).
    """
    points: dict[tuple[str, str], list[RunResult]] = {}
    for r in runs:
        if r.summary is not None and r.summary.completed:
            points.setdefault((r.target.label, r.load.label()), []).append(r)
    head = ["target", "load", "runs", *(h for h, _ in CI_KEYS)]
    rows = []
    for (target, load), rs in points.items():
        if len(rs) < 2:
            continue
        cells = [target, load, str(len(rs))]
        for _, key in CI_KEYS:
            values = [v for r in rs if (v := r.metric(key)) is not None]
            if not values:
                cells.append("-")
                continue
            mean, half = mean_ci(values)
            cells.append(f"{mean:.4g} ± {half:.2g}" if half is not None else f"{mean:.4g}")
        rows.append(cells)
    return head, rows


def _percent(value: float | None) -> float | None:
    return None if value is None else 100 * value


def _fmt(value: float | None, fmt: str) -> str:
    return "-" if value is None else fmt.format(value)
