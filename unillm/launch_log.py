"""What unillm keeps of a starting engine's output: the tail, the first error lines, known causes.

    log = LaunchLog(adapter.launch_hints())
    for line in engine_output:
        log.add(line)
    log.tail, log.errors, log.causes      # for LaunchError

Engines often print the real cause early (vLLM: "not enough memory" at line 52) and a generic
"see root cause above" at the end, so a tail alone misses it. ``errors`` keeps the first lines that
look like errors (with one line of context either side, numbered); ``causes`` holds the advice of
every known-cause pattern (from the adapter, or unillm's own) that matched a line.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Mapping

__all__ = ["ERROR_LINE", "LaunchLog"]

ERROR_LINE = re.compile(
    r"Traceback \(most recent call last\)|\b[A-Z]\w*(?:Error|Exception)\b|\b(?:ERROR|FATAL|CRITICAL)\b"
    r"|(?i:\berror:)")
_CONTEXT = 1


class LaunchLog:
    """Keeps the last ``tail`` lines, the first ``max_errors`` error lines and the matched causes."""

    def __init__(self, hints: Mapping[str, str] | None = None, *, tail: int = 50,
                 max_errors: int = 20) -> None:
        self._hints = [(re.compile(pattern), advice) for pattern, advice in (hints or {}).items()]
        self._tail: deque[tuple[int, str]] = deque(maxlen=tail)
        self._errors: list[tuple[int, str]] = []
        self._max_errors = max_errors
        self._after = 0  # context lines still to keep after the last error line
        self.causes: list[str] = []
        self.count = 0

    def add(self, line: str) -> None:
        """Record one line of output (already stripped of its line break)."""
        self.count += 1
        number = self.count
        if ERROR_LINE.search(line):
            previous = self._tail[-1] if self._tail else None
            if previous is not None and (not self._errors or self._errors[-1][0] < previous[0]):
                self._keep(previous)
            self._keep((number, line))
            self._after = _CONTEXT
        elif self._after:
            self._keep((number, line))
            self._after -= 1
        for pattern, advice in self._hints:
            if advice not in self.causes and pattern.search(line):
                self.causes.append(advice)
        self._tail.append((number, line))

    def _keep(self, numbered: tuple[int, str]) -> None:
        if len(self._errors) < self._max_errors:
            self._errors.append(numbered)

    def add_cause(self, advice: str) -> None:
        """Record a cause found outside the log (e.g. how the process died)."""
        if advice not in self.causes:
            self.causes.append(advice)

    @property
    def tail(self) -> list[str]:
        """The last lines the engine printed."""
        return [line for _, line in self._tail]

    @property
    def errors(self) -> list[str]:
        """The first error-looking lines with context, as ``"<line number>| text"``.

        Empty when they are all in :attr:`tail` anyway.
        """
        if not self._errors or (self._tail and self._errors[0][0] >= self._tail[0][0]):
            return []
        return [f"{number}| {line}" for number, line in self._errors]
