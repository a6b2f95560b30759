"""What unillm keeps of a starting engine's output: the tail, the first error lines, known causes.

    log = LaunchLog(adapter.launch_hints())
    for line in engine_output:
        log.add(line)
    log.tail, log.errors, log.causes      # for LaunchError

Engines often print the real cause early (vLLM: "not enough memory" at line 54) and a generic
"see root cause above" at the end, so a tail alone misses it. ``errors`` keeps, numbered and with a
line of context either side, the first few error-looking lines (where it started) and the first
exception messages (``ValueError: ...``, usually the cause, even deep in a traceback whose every
line is logged as ERROR); warnings never count. ``causes`` holds the advice of every known-cause
pattern (the adapter's, or unillm's own) that matched a line.
"""

from __future__ import annotations

import re
import signal
from collections import deque
from collections.abc import Mapping

__all__ = ["ERROR_LINE", "LaunchLog", "signal_advice"]

#: What a death by each signal usually means, and what to change.
SIGNAL_MEANING: Mapping[int, str] = {
    signal.SIGILL: "an instruction this CPU does not allow (a build for another CPU, or a kernel "
    "such as AMX used without the permission Linux asks for): try dtype='float32', or an engine "
    "build for this CPU",
    signal.SIGKILL: "most often the kernel's out-of-memory killer: give it less to hold (a smaller "
    "model or max_model_len; on a CPU-only machine, cpu=True)",
    signal.SIGSEGV: "a crash in native code (often an engine build that does not match this "
    "machine's libraries or CPU): reinstall the engine (`unillm setup <engine>`)",
    signal.SIGBUS: "a bad memory access, most often shared memory (/dev/shm) too small: give the "
    "machine or container more shared memory",
    signal.SIGABRT: "a failed check in native code: see the first error lines of the log",
    signal.SIGFPE: "an arithmetic fault in native code: see the first error lines of the log",
    signal.SIGTERM: "it was asked to stop by another process",
}
# "Worker proc VllmWorker-0 died unexpectedly (exit code: -4)", multiprocessing's "exitcode=-4"
_DEATH = re.compile(
    r"(?:exit ?code[:=]? ?|exited with code |killed by signal )(?P<code>-\d+|SIG[A-Z]+)", re.I
)
_WHO = re.compile(r"(?P<who>[\w.-]+) (?:died|exited|was killed)")


def signal_advice(code: int | str, who: str = "the engine") -> str | None:
    """Why ``who`` died, for a negative exit code (``-4``) or a signal name (``"SIGILL"``).

    Args:
        code: the process's exit code (negative: killed by that signal) or a signal's name.
        who: what died, for the sentence.

    Returns:
        A sentence naming the signal, its usual meaning and what to change; None for a normal exit.
    """
    try:
        text = str(code)
        sig = signal.Signals[text] if text.startswith("SIG") else signal.Signals(-int(text))
    except (KeyError, ValueError):
        return None
    meaning = SIGNAL_MEANING.get(sig, "see the first error lines of the log")
    return f"{who} died of {sig.name}: {meaning}"


ERROR_LINE = re.compile(
    r"Traceback \(most recent call last\)|\b[A-Z]\w*(?:Error|Exception)\b|\b(?:ERROR|FATAL|CRITICAL)\b"
    r"|(?i:\berror:)"
)
EXCEPTION_LINE = re.compile(r"\b[A-Z]\w*(?:Error|Exception): \S")  # "ValueError: not enough memory"
_MILD = re.compile(r"\b(?:DEBUG|INFO|WARN|WARNING)\b")
_SEVERE = re.compile(r"\b(?:ERROR|FATAL|CRITICAL)\b")
_CONTEXT = 1
_FIRST_ERRORS = 3  # the first error-looking lines (where it started) ...
_FIRST_EXCEPTIONS = 6  # ... and the first exception messages (usually the cause)


def _severity(line: str) -> int:
    """2: an exception message, 1: an error-looking line, 0: neither (warnings never count)."""
    if _MILD.search(line) and not _SEVERE.search(line):
        return 0  # e.g. a warning that mentions "OSError: Too many open files" as a possibility
    if EXCEPTION_LINE.search(line):
        return 2
    return 1 if ERROR_LINE.search(line) else 0


class LaunchLog:
    """Keeps the last ``tail`` lines, at most ``max_errors`` first error lines, the matched causes."""

    def __init__(
        self, hints: Mapping[str, str] | None = None, *, tail: int = 50, max_errors: int = 20
    ) -> None:
        self._hints = [(re.compile(pattern), advice) for pattern, advice in (hints or {}).items()]
        self._tail: deque[tuple[int, str]] = deque(maxlen=tail)
        self._errors: list[tuple[int, str]] = []
        self._max_errors = max_errors
        self._after = 0  # context lines still to keep after the last error line
        self._first = self._exceptions = 0
        self.causes: list[str] = []
        self.deaths: list[str] = []  # the processes the log says died of a signal (also in causes)
        self.count = 0

    def add(self, line: str) -> None:
        """Record one line of output (already stripped of its line break)."""
        self.count += 1
        number = self.count
        severity = _severity(line)
        wanted = (severity == 2 and self._exceptions < _FIRST_EXCEPTIONS) or (
            severity == 1 and self._first < _FIRST_ERRORS
        )
        if wanted:
            self._exceptions += severity == 2
            self._first += severity == 1
            if self._tail:
                self._keep(self._tail[-1])  # one line of context before
            self._keep((number, line))
            self._after = _CONTEXT
        elif self._after:
            self._keep((number, line))
            self._after -= 1
        for pattern, advice in self._hints:
            if advice not in self.causes and pattern.search(line):
                self.causes.append(advice)
        death = _DEATH.search(line) if "-" in line or "SIG" in line else None
        if death is not None:
            who = _WHO.search(line)
            died = signal_advice(death["code"], who["who"] if who else "an engine process")
            if died is not None and died not in self.deaths:
                self.deaths.append(died)
                self.add_cause(died)
        self._tail.append((number, line))

    def _keep(self, numbered: tuple[int, str]) -> None:
        if len(self._errors) < self._max_errors and (not self._errors or self._errors[-1][0] < numbered[0]):
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
