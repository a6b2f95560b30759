"""A live progress display for benchmarks: rich bars on a terminal, plain lines otherwise.

    with live_progress() as hook:
        await run_suite(..., progress=hook)

rich comes with ``pip install 'unillm-sdk[bench]'`` and is imported only here; without it (or when
stderr is not a terminal) a line per run and one every 10 s go to stderr.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Iterator
from typing import Any

from unillm.bench.runner import Progress, ProgressHook
from unillm.progress_bars import rich_bars


@contextlib.contextmanager
def live_progress(enabled: bool = True) -> Iterator[ProgressHook | None]:
    """Yield a progress hook for :func:`~unillm.bench.suite.run_suite` (None when disabled)."""
    if not enabled:
        yield None
        return
    rich_progress = rich_bars(("rate",), eta=False) if sys.stderr.isatty() else None
    if rich_progress is None:
        yield _Lines()
        return
    with rich_progress as bars:
        yield _Bars(bars)


class _Bars:
    def __init__(self, bars: Any) -> None:
        self.bars = bars
        self.tasks: dict[tuple[str, str], Any] = {}

    def __call__(self, p: Progress) -> None:
        key = (p.label, p.phase)
        if key not in self.tasks:
            self.tasks[key] = self.bars.add_task(f"{p.phase}: {p.label}", total=p.total, failed=0, rate="")
        rate = f"{p.output_tokens / p.elapsed_s:.0f} tok/s" if p.elapsed_s > 0 else ""
        self.bars.update(self.tasks[key], completed=p.done, failed=p.failed, rate=rate)


class _Lines:
    def __init__(self) -> None:
        self.next_at = 0.0
        self.labels: set[tuple[str, str]] = set()

    def __call__(self, p: Progress) -> None:
        now = time.monotonic()
        first = (p.label, p.phase) not in self.labels
        self.labels.add((p.label, p.phase))
        if first or now >= self.next_at or p.done == p.total:
            rate = p.output_tokens / p.elapsed_s if p.elapsed_s > 0 else 0.0
            print(
                f"[unillm bench] {p.phase} {p.label}: {p.done}/{p.total} done, {p.failed} failed, "
                f"{rate:.0f} tok/s, {p.elapsed_s:.1f} s",
                file=sys.stderr,
                flush=True,
            )
            self.next_at = now + 10.0
