"""A benchmark's report as one self-contained HTML page: headline figures, plots, tables.

    write_html(report.runs, "bench-results/report.html", pngs)

The plots are embedded (base64 PNG), so the page can be mailed or attached as it is.
"""

from __future__ import annotations

import base64
import html
from collections.abc import Sequence
from pathlib import Path

from unillm.bench.result import RunResult
from unillm.bench.tables import intervals, table_rows

_STYLE = """
body{font-family:system-ui,sans-serif;margin:2em auto;max-width:1200px;color:#222;padding:0 1em}
h1{font-size:1.5em}h2{font-size:1.15em;margin-top:2em;border-bottom:1px solid #ddd}
table{border-collapse:collapse;font-size:.85em;margin:.5em 0}
td,th{border:1px solid #ddd;padding:.3em .6em;text-align:right}
td:first-child,td:nth-child(2),th{text-align:left}th{background:#f4f4f4}
tr:nth-child(even){background:#fafafa}img{max-width:100%;border:1px solid #eee;margin:.5em 0}
.cards{display:flex;gap:1em;flex-wrap:wrap}.card{background:#f6f8fa;border-radius:8px;padding:.8em 1.2em}
.card b{display:block;font-size:1.4em}.err{color:#b00}.note{color:#666;font-size:.85em}
"""

_CAPTIONS = {
    "pareto.png": "Throughput against tail latency: each point one run, the black line the Pareto front.",
    "latency_vs_load.png": "Latency percentiles against load, per target.",
    "throughput_vs_latency.png": "Output throughput against median end-to-end latency.",
    "replica_share.png": "Each replica's share of the generated tokens.",
}


def write_html(runs: Sequence[RunResult], path: str | Path, pngs: Sequence[Path] = ()) -> Path:
    """Write the report page to ``path``; returns it.

    Args:
        runs: The benchmark's runs.
        path: The HTML file to write.
        pngs: Plots to embed, in order (the Pareto plot goes first).
    """
    out = Path(path)
    out.write_text(render(runs, pngs), encoding="utf-8")
    return out


def render(runs: Sequence[RunResult], pngs: Sequence[Path] = ()) -> str:
    """The report page as a string (see :func:`write_html`).

    Args:
        runs: The benchmark's runs.
        pngs: Plots to embed.
    """
    parts = [f"<!doctype html><meta charset=utf-8><title>unillm bench</title><style>{_STYLE}</style>"]
    parts.append("<h1>unillm bench</h1>")
    parts.append(_cards(runs))
    ordered = sorted(pngs, key=lambda p: p.name != "pareto.png")
    if ordered:
        parts.append("<h2>Plots</h2>")
    for png in ordered:
        data = base64.b64encode(png.read_bytes()).decode()
        caption = _CAPTIONS.get(png.name, png.stem)
        img = f'<img alt="{png.stem}" src="data:image/png;base64,{data}">'
        parts.append(f"<p class=note>{html.escape(caption)}</p>{img}")
    head, rows = table_rows(runs)
    parts += ["<h2>Every run</h2>", _table(head, rows)]
    ci_head, ci_rows = intervals(runs)
    if ci_rows:
        parts += ["<h2>Repeated runs: mean ± 95% confidence interval</h2>", _table(ci_head, ci_rows)]
    errors = [r for r in runs if r.error]
    if errors:
        parts.append("<h2>Errors</h2><ul>")
        parts += [
            f"<li class=err>{html.escape(r.target.label)} ({html.escape(r.load.label())}): "
            f"{html.escape((r.error or '').splitlines()[0])}</li>"
            for r in errors
        ]
        parts.append("</ul>")
    workloads = {repr(sorted(r.workload.items())): r.workload for r in runs}
    parts.append("<h2>Workload</h2>")
    parts += [f"<pre>{html.escape(repr(w))}</pre>" for w in workloads.values()]
    parts.append(
        "<p class=note>TTFT: time to the first streamed chunk. TPOT: (latency - TTFT) / (output tokens - 1), "
        "per request. ITL: every gap between chunks, pooled. E2EL: request latency (vllm bench serve's "
        "definitions). Cancelled: requests the benchmark cancelled on purpose; engine aborted: what the "
        "engine's own counters say it aborted. Prefix hit: the engine's prefix-cache hits / queries.</p>"
    )
    return "\n".join(parts) + "\n"


def _cards(runs: Sequence[RunResult]) -> str:
    done = [r for r in runs if r.summary is not None and r.summary.completed]
    if not done:
        return "<p class=err>No run completed a request.</p>"
    best = max(done, key=lambda r: r.metric("output_throughput") or 0.0)
    fastest = min(done, key=lambda r: r.metric("median_ttft_ms") or float("inf"))
    cards = [
        ("runs", f"{len(runs)}", f"{sum(r.summary.completed for r in done if r.summary)} requests"),
        (
            "best output throughput",
            f"{best.metric('output_throughput') or 0:.1f} tok/s",
            f"{best.target.label}, {best.load.label()}",
        ),
        (
            "lowest median TTFT",
            f"{fastest.metric('median_ttft_ms') or 0:.1f} ms",
            f"{fastest.target.label}, {fastest.load.label()}",
        ),
    ]
    hits = [r.engine.prefix_cache_hit_ratio for r in done if r.engine.prefix_cache_hit_ratio is not None]
    if hits:
        cards.append(("prefix-cache hit rate", f"{100 * max(hits):.1f}% max", "from the engine's counters"))
    return (
        "<div class=cards>"
        + "".join(
            f"<div class=card>{html.escape(t)}<b>{html.escape(v)}</b>"
            f"<span class=note>{html.escape(n)}</span></div>"
            for t, v, n in cards
        )
        + "</div>"
    )


def _table(head: list[str], rows: list[list[str]]) -> str:
    th = "".join(f"<th>{html.escape(h)}</th>" for h in head)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><tr>{th}</tr>{body}</table>"
