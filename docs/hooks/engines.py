"""mkdocs hook: the engines page's capability table, generated at build time.

It reads ``unillm engines --json`` (each installed adapter's declared ``Capabilities``, one column
per engine mode), so the page says what the code says and cannot go stale.
"""

from __future__ import annotations

import io
import json
from contextlib import redirect_stdout
from typing import Any

PLACEHOLDER = "<!-- engines: capability table -->"
MARKS = {"native": "yes", "emulated": "unillm", "no": "—"}


def declared() -> dict[str, dict[str, dict[str, str]]]:
    """What ``unillm engines --json`` prints: column -> feature -> support."""
    from unillm.cli.main import main

    out = io.StringIO()
    with redirect_stdout(out):
        main(["engines", "--json"])
    data: dict[str, dict[str, dict[str, str]]] = json.loads(out.getvalue())
    return data


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render(columns: dict[str, dict[str, dict[str, str]]]) -> str:
    """The table of marks, then each column's notes and refusals with their reasons."""
    if not columns:
        return "*No unillm adapter is installed where the docs were built.*"
    names = list(columns)
    features = list(next(iter(columns.values())))
    lines = ["| feature | " + " | ".join(names) + " |", "|---" * (len(names) + 1) + "|"]
    for feature in features:
        marks = (MARKS[columns[n][feature]["level"]] for n in names)
        lines.append(f"| {_cell(feature)} | " + " | ".join(marks) + " |")
    lines += ["", "yes: the engine does it; unillm: unillm provides it; —: refused before sending.", ""]
    for name in names:
        notes = [(f, s) for f, s in columns[name].items() if s["why"] or s["alternative"]]
        lines.append(f'??? note "{name}: {len(notes)} notes and refusals"')
        for feature, support in notes:
            text = support["why"] + (
                f" *Instead:* {support['alternative']}" if support["alternative"] else ""
            )
            lines.append(f"    - **{_cell(feature)}** ({MARKS[support['level']]}): {_cell(text)}")
        lines.append("")
    return "\n".join(lines)


def on_page_markdown(markdown: str, page: Any, **kwargs: Any) -> str:
    """Replace the placeholder on the engines page with the generated table."""
    if PLACEHOLDER not in markdown:
        return markdown
    return markdown.replace(PLACEHOLDER, render(declared()))
