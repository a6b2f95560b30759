"""PNG plots of benchmark results (needs matplotlib: ``pip install 'unillm-sdk[bench]'``).

write_plots(report.runs, "bench-results/")
# latency_vs_load.png        TTFT / TPOT / E2EL percentiles against load, one line per target
# throughput_vs_latency.png  output tokens/s against median E2EL, one line per target
# replica_share.png          each replica's share of generated tokens (fleets only)
# pareto.png                 output tokens/s against p99 TTFT and p99 ITL, the Pareto front drawn
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from unillm.bench.result import RunResult
from unillm.bench.stats import pareto_front
from unillm.errors import InvalidOptions

#: The Pareto plot's panels: (latency key, title).
PARETO_PANELS = (("p99_ttft_ms", "p99 TTFT (ms)"), ("p99_itl_ms", "p99 ITL (ms)"))


def _pyplot() -> Any:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise InvalidOptions(
            "plots need matplotlib: pip install 'unillm-sdk[bench]' (or pass --no-plots)"
        ) from None
    return plt


def load_value(run: RunResult) -> float:
    """The x value of a run on load plots: its concurrency, else its request rate."""
    if run.load.max_concurrency is not None and not math.isfinite(run.load.rate):
        return float(run.load.max_concurrency)
    return run.load.rate if math.isfinite(run.load.rate) else float("nan")


def load_axis(runs: Sequence[RunResult]) -> str:
    """The x-axis label matching :func:`load_value`."""
    if all(r.load.max_concurrency is not None and not math.isfinite(r.load.rate) for r in runs):
        return "max concurrency"
    return "request rate (req/s)"


def _by_target(runs: Sequence[RunResult]) -> dict[str, list[RunResult]]:
    groups: dict[str, list[RunResult]] = {}
    for r in runs:
        if r.summary is not None and r.summary.completed:
            groups.setdefault(r.target.label, []).append(r)
    return groups


def write_plots(runs: Sequence[RunResult], out_dir: str | Path) -> list[Path]:
    """Write the plots that make sense for these runs; returns their paths."""
    plt = _pyplot()
    out = Path(out_dir)
    written = []
    groups = _by_target(runs)
    if groups:
        colors = {label: f"C{i % 10}" for i, label in enumerate(groups)}
        axis = load_axis(runs)
        written.append(_latency_vs_load(plt, groups, colors, axis, out / "latency_vs_load.png"))
        written.append(_throughput_vs_latency(plt, groups, colors, axis, out / "throughput_vs_latency.png"))
    shared = [r for r in runs if len(_replica_tokens(r)) > 1]
    if shared:
        written.append(_replica_share(plt, shared, out / "replica_share.png"))
    measured = [r for rs in groups.values() for r in rs]
    if len(measured) > 1:
        written.append(_pareto(plt, measured, out / "pareto.png"))
    return written


def _save(plt: Any, fig: Any, path: Path, dpi: int = 110) -> Path:
    """Lay out, write and close a figure; returns its path."""
    fig.tight_layout()
    fig.savefig(path, dpi=dpi)
    plt.close(fig)
    return path


def _wide(values: Sequence[float]) -> bool:
    """Whether values spread over more than 30x (then a log scale reads better)."""
    return bool(values) and max(values) / max(min(values), 1e-9) > 30


def _latency_vs_load(
    plt: Any, groups: dict[str, list[RunResult]], colors: dict[str, str], axis: str, path: Path
) -> Path:
    """TTFT, TPOT and E2EL p50 (solid) and p99 (dashed) against load, one line per target."""
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.4))
    panels = (("ttft", "TTFT"), ("tpot", "TPOT"), ("e2el", "E2EL"))
    for ax, (metric, title) in zip(axes, panels, strict=True):
        values = []
        for label, rs in groups.items():
            rs = sorted(rs, key=load_value)
            xs = [load_value(r) for r in rs]
            lines = ((f"median_{metric}_ms", "-o", "p50"), (f"p99_{metric}_ms", "--x", "p99"))
            for key, style, tag in lines:
                ys = [r.metric(key) for r in rs]
                values += [y for y in ys if y]
                ax.plot(
                    xs,
                    [float("nan") if y is None else y for y in ys],
                    style,
                    color=colors[label],
                    label=f"{label} {tag}",
                )
        if _wide(values):
            ax.set_yscale("log")
        ax.set_title(f"{title} (ms): p50 solid, p99 dashed")
        ax.set_xlabel(axis)
        ax.grid(alpha=0.3, which="both")
    axes[0].legend(fontsize=7)
    return _save(plt, fig, path)


def _throughput_vs_latency(
    plt: Any, groups: dict[str, list[RunResult]], colors: dict[str, str], axis: str, path: Path
) -> Path:
    """Output tokens/s against median E2EL, one line per target, each point labelled by its load."""
    fig, ax = plt.subplots(figsize=(7, 4.8))
    spread = []
    for label, rs in groups.items():
        rs = sorted(rs, key=load_value)
        xs = [r.metric("median_e2el_ms") or float("nan") for r in rs]
        ys = [r.metric("output_throughput") or float("nan") for r in rs]
        spread += [x for x in xs if x == x]
        ax.plot(xs, ys, "-o", color=colors[label], label=label)
        for r, x, y in zip(rs, xs, ys, strict=True):
            ax.annotate(f"{load_value(r):g}", (x, y), fontsize=7, xytext=(3, 3), textcoords="offset points")
    if _wide(spread):
        ax.set_xscale("log")
    ax.set_xlabel("median end-to-end latency (ms)")
    ax.set_ylabel("output tokens/s")
    ax.set_title(f"Throughput vs latency (points labelled by {axis})")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7)
    return _save(plt, fig, path)


def _replica_share(plt: Any, shared: list[RunResult], path: Path) -> Path:
    """Each replica's share of the generated tokens, one stacked bar per run."""
    fig, ax = plt.subplots(figsize=(7, 4.5))
    names = sorted({k for r in shared for k in _replica_tokens(r)})
    bottoms = [0.0] * len(shared)
    for name in names:
        shares = []
        for r in shared:
            tokens = _replica_tokens(r)
            total = sum(tokens.values()) or 1.0
            shares.append(tokens.get(name, 0.0) / total)
        ax.bar(range(len(shared)), shares, bottom=bottoms, label=name)
        bottoms = [b + s for b, s in zip(bottoms, shares, strict=True)]
    ax.set_xticks(range(len(shared)), [f"{r.target.label}\n{r.load.label()}" for r in shared], fontsize=7)
    ax.set_ylabel("share of generated tokens")
    ax.set_title("Per-replica share")
    ax.legend(fontsize=7)
    return _save(plt, fig, path)


def _pareto(plt: Any, runs: list[RunResult], path: Path) -> Path:
    """Throughput against tail latency, every run a point, the front (nothing beats it) joined."""
    fig, axes = plt.subplots(1, len(PARETO_PANELS), figsize=(12, 4.6))
    labels = list(dict.fromkeys(r.target.label for r in runs))
    for ax, (key, title) in zip(axes, PARETO_PANELS, strict=True):
        points = [(r.metric("output_throughput") or math.nan, r.metric(key) or math.nan) for r in runs]
        for i, label in enumerate(labels):
            mine = [p for r, p in zip(runs, points, strict=True) if r.target.label == label]
            ax.scatter([x for x, _ in mine], [y for _, y in mine], color=f"C{i % 10}", label=label, s=28)
        front = pareto_front(points)
        if front:
            ax.step(
                [points[i][0] for i in front],
                [points[i][1] for i in front],
                where="post",
                color="black",
                lw=1.2,
                alpha=0.7,
                label="Pareto front",
            )
            for i in front:
                ax.annotate(
                    runs[i].load.label(), points[i], fontsize=7, xytext=(4, -10), textcoords="offset points"
                )
        ax.set_xlabel("output tokens/s")
        ax.set_ylabel(title)
        ax.set_title(f"Throughput vs {title}: lower right is better")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    return _save(plt, fig, path, dpi=100)


def _replica_tokens(run: RunResult) -> dict[str, float]:
    tokens = {k: v for k, v in run.engine.replica_generation_tokens.items() if v is not None}
    if tokens:
        return tokens
    counts = run.summary.replica_counts if run.summary else {}
    return {k: float(v) for k, v in counts.items()}
