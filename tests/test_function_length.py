"""The house rule that keeps modules readable: no function in the SDK or its adapters runs past
60 lines (docstring included) — a longer one is split into named steps."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LIMIT = 60


def long_functions() -> list[str]:
    """``path:line name (N lines)`` for each function over the limit in unillm/ and the adapters."""
    files = [*(ROOT / "unillm").rglob("*.py"), *(ROOT / "adapters").glob("*/unillm_*/**/*.py")]
    found = []
    for path in files:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > LIMIT:
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({lines} lines)")
    return sorted(found)


def test_no_function_runs_past_sixty_lines() -> None:
    assert long_functions() == [], "split these into named steps"
