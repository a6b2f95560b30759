"""What a probe found: one cell per option, and the renderings (text, markdown, JSON).

report.cells[0]        # Cell(option="temperature=0", verdict="honoured", evidence="3/3 identical")
print(report.text())   # an aligned table; report.markdown(); report.model_dump_json()
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection
from typing import Literal

from pydantic import BaseModel, ConfigDict

Verdict = Literal["honoured", "refused", "rejected", "ignored", "unmeasurable"]

#: How each verdict reads in a table.
MARKS: dict[str, str] = {
    "honoured": "honoured",
    "refused": "refused before sending",
    "rejected": "rejected by the engine",
    "ignored": "IGNORED (silent drop)",
    "unmeasurable": "not measurable",
}


class Cell(BaseModel):
    """One option through one client: what happened, and the evidence measured."""

    model_config = ConfigDict(frozen=True)

    option: str
    verdict: Verdict
    evidence: str = ""
    requests: int = 0  # requests sent to the engine for this cell (0: refused before sending)


class ProbeReport(BaseModel):
    """Every cell of one probe: an engine (at its version) through one client."""

    model_config = ConfigDict(frozen=True)

    engine: str
    version: str | None = None
    model: str
    client: str = "unillm"
    samples: int
    cells: list[Cell]

    def counts(self) -> dict[str, int]:
        """How many cells got each verdict (every verdict present, zeros included)."""
        seen: Counter[str] = Counter(c.verdict for c in self.cells)
        return {v: seen[v] for v in MARKS}

    def ignored(self) -> list[Cell]:
        """The silent drops: options sent, accepted and not honoured."""
        return [c for c in self.cells if c.verdict == "ignored"]

    def problems(self, honoured: Collection[str] = ()) -> list[str]:
        """What falls short of the goal: each ignored cell, and each option in ``honoured`` not
        proven by its effect (empty: the goal is met; e.g. ``assert not report.problems()`` in CI).

        Args:
            honoured: Options (names as in the report) that must be honoured.

        Returns:
            One line per problem.
        """
        verdicts = {c.option: c.verdict for c in self.cells}
        found = [f"{c.option}: ignored ({c.evidence})" for c in self.ignored()]
        return found + [
            f"{o}: {verdicts.get(o, 'not probed')}, not honoured"
            for o in honoured
            if verdicts.get(o) != "honoured"
        ]

    def text(self) -> str:
        """An aligned plain-text table with a summary line."""
        width = max([len(c.option) for c in self.cells] + [6])
        marks = max(len(m) for m in MARKS.values())
        lines = [self._title(), "", f"{'option'.ljust(width)}  {'verdict'.ljust(marks)}  evidence"]
        lines += [
            f"{c.option.ljust(width)}  {MARKS[c.verdict].ljust(marks)}  {c.evidence}" for c in self.cells
        ]
        return "\n".join([*lines, "", self._summary()])

    def markdown(self) -> str:
        """A markdown table with a summary line."""
        lines = [f"**{self._title()}**", "", "| option | verdict | evidence |", "|---|---|---|"]
        lines += [f"| `{c.option}` | {MARKS[c.verdict]} | {_cell(c.evidence)} |" for c in self.cells]
        return "\n".join([*lines, "", self._summary()])

    def _title(self) -> str:
        return f"{self.engine} {self.version or '(version unknown)'}, model {self.model!r}, via {self.client}"

    def _summary(self) -> str:
        return ", ".join(f"{n} {v}" for v, n in self.counts().items())


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")
