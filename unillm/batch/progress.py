"""The batch progress bar: done/failed, requests/s, tokens/s and ETA on a terminal, quiet elsewhere.

rich draws it (``pip install 'unillm-sdk[batch]'``); without rich, or when stderr is not a
terminal, nothing is drawn and only the closing summary line is printed.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Iterator

from unillm.batch.runner import ProgressHook, Summary
from unillm.progress_bars import rich_bars


@contextlib.contextmanager
def progress_bar(total: int, skipped: int, enabled: bool | None = None) -> Iterator[ProgressHook | None]:
    """Yield a progress hook for :func:`~unillm.batch.runner.execute` (None: no bar).

    Args:
        total: Requests in the input.
        skipped: Requests already done when the run starts.
        enabled: Force the bar on or off; None draws it when stderr is a terminal.
    """
    if enabled is None:
        enabled = sys.stderr.isatty()
    bars = rich_bars(("rate", "tokens"), eta=True) if enabled else None
    if bars is None:
        yield None
        return
    started = time.perf_counter()
    with bars:
        task = bars.add_task("batch", total=total, completed=skipped, failed=0, rate="", tokens="")

        def update(s: Summary) -> None:
            elapsed = max(time.perf_counter() - started, 1e-9)
            bars.update(
                task,
                completed=s.skipped + s.done,
                failed=s.failed,
                rate=f"{s.done / elapsed:.1f} req/s",
                tokens=f"{s.completion_tokens / elapsed:.0f} tok/s",
            )

        yield update
