"""mkdocs hook: the probe page's engine-by-option matrix, generated at build time.

It joins what was measured (``benchmarks/results/probe_matrix.json``, written by
``benchmarks/probe_matrix.py``: each engine's probe through unillm and its peers) with what each
installed adapter declares (its capability table), so the
page says what the code and the last measurement say, never a hand-written claim.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

PLACEHOLDER = "<!-- probe: option matrix -->"
CLIENTS_PLACEHOLDER = "<!-- probe: clients side by side -->"
OUTPUT_PLACEHOLDER = "<!-- probe: real output -->"
LAST_LINE_PLACEHOLDER = "<!-- probe: last line -->"
RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "probe_matrix.json"
MEASURED = {
    "honoured": "✓ measured",
    "refused": "refused",
    "rejected": "engine error",
    "ignored": "**IGNORED**",
    "unmeasurable": "n/m",
}
DECLARED = {"native": "declared", "emulated": "unillm", "no": "refused"}


def declared() -> dict[str, dict[str, str]]:
    """Each installed engine's declared level per feature (its newest capability table)."""
    from unillm.adapter.registry import get_adapter, installed_engines

    columns: dict[str, dict[str, str]] = {}
    for name in installed_engines():
        caps = get_adapter(name).capabilities()
        columns[name] = {f.value: caps.support(f).level for f in type(next(iter(caps.features)))}
    return columns


def measured() -> dict[str, Any]:
    """The recorded probe runs: engine -> client -> report (empty when none is recorded)."""
    if not RESULTS.exists():
        return {}
    runs: dict[str, Any] = json.loads(RESULTS.read_text())["runs"]
    return {engine: r for engine, r in runs.items() if isinstance(r, dict)}


def clients_of(reports: dict[str, Any]) -> list[str]:
    """The clients one run was probed through (not its other keys: a look-alike's contract errors)."""
    return [c for c, r in reports.items() if isinstance(r, dict) and "cells" in r]


def matrix(columns: dict[str, dict[str, str]], runs: dict[str, Any]) -> str:
    """Options down, runs across (an engine without a run: its own column): the measured verdict
    where probed, else the declared level of the run's engine."""
    from unillm.probing.cells import CELLS, FEATURES

    probed = {run: r["unillm"]["engine"] for run, r in runs.items() if r["unillm"]["engine"] in columns}
    names = {**probed, **{e: e for e in columns if e not in probed.values()}}
    lines = ["| option | " + " | ".join(names) + " |", "|---" * (len(names) + 1) + "|"]
    for option in CELLS:
        marks = []
        for name, engine in names.items():
            cells = {c["option"]: c for c in runs.get(name, {}).get("unillm", {}).get("cells", [])}
            feature = FEATURES.get(option)
            if option in cells:
                marks.append(MEASURED[cells[option]["verdict"]])
            elif feature is not None:
                marks.append(DECLARED[columns[engine][feature.value]])
            else:
                marks.append("·")
        lines.append(f"| `{option}` | " + " | ".join(marks) + " |")
    lines += [
        "",
        "✓ measured: honoured by its effect in the recorded probe; refused: refused before sending "
        "(measured, or declared by the adapter); declared / unillm: the capability table says the "
        "engine (or unillm) does it, not probed here; n/m: not measurable with the tiny model (or "
        "on a look-alike's fixed answers); ·: not probed on that engine. `mlx_server` is "
        "mlx_lm.server, `mlx` MLX in process; `ollama`, `tensorrt_llm` and `tgi` are probed on "
        "look-alikes held to the engines' contracts.",
    ]
    return "\n".join(lines)


def side_by_side(runs: dict[str, Any]) -> str:
    """For each probed engine: options down, clients across, silent drops counted per client."""
    from unillm.probing.cells import CELLS

    out = []
    for engine, reports in runs.items():
        clients = clients_of(reports)
        version = reports["unillm"].get("version") or ""
        labels = [reports[c]["client"] for c in clients]
        out += [f"**{engine} {version}**", "", "| option | " + " | ".join(labels) + " |"]
        out.append("|---" * (len(clients) + 1) + "|")
        for option in CELLS:
            row = []
            for c in clients:
                cell = next((x for x in reports[c]["cells"] if x["option"] == option), None)
                row.append(MEASURED[cell["verdict"]] if cell else "·")
            out.append(f"| `{option}` | " + " | ".join(row) + " |")
        drops = [str(sum(x["verdict"] == "ignored" for x in reports[c]["cells"])) for c in clients]
        out += ["| **silent drops** | " + " | ".join(drops) + " |", ""]
    return "\n".join(out) if out else "*No probe run is recorded.*"


def real_output(runs: dict[str, Any], engine: str = "vllm") -> str:
    """The recorded probe of ``engine`` through unillm, as ``unillm probe`` prints it."""
    from unillm.probing.report import ProbeReport

    if engine not in runs:
        return "*No probe run is recorded.*"
    return "```text\n" + ProbeReport(**runs[engine]["unillm"]).text() + "\n```"


def last_line() -> str:
    """The recorded benchmark's summary line, as it printed it (without the goals)."""
    if not RESULTS.exists():
        return "*No probe run is recorded.*"
    return "```json\n" + json.dumps(json.loads(RESULTS.read_text())["summary"]) + "\n```"


def on_page_markdown(markdown: str, page: Any, **kwargs: Any) -> str:
    """Replace the placeholders on the probe page with the generated tables."""
    if PLACEHOLDER in markdown:
        markdown = markdown.replace(PLACEHOLDER, matrix(declared(), measured()))
    if OUTPUT_PLACEHOLDER in markdown:
        markdown = markdown.replace(OUTPUT_PLACEHOLDER, real_output(measured()))
    if LAST_LINE_PLACEHOLDER in markdown:
        markdown = markdown.replace(LAST_LINE_PLACEHOLDER, last_line())
    if CLIENTS_PLACEHOLDER in markdown:
        markdown = markdown.replace(CLIENTS_PLACEHOLDER, side_by_side(measured()))
    return markdown
