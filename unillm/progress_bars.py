"""rich progress bars on stderr, laid out alike for ``unillm bench`` and ``unillm batch`` (rich is
imported only when a bar is made: the batch and probe extras bring it)."""

from __future__ import annotations

from typing import Any

__all__ = ["rich_bars"]


def rich_bars(fields: tuple[str, ...], *, eta: bool) -> Any:
    """rich progress bars on stderr (None without rich): each task's description, bar, done of total,
    failures, the ``fields`` it is given, then the elapsed time or an ETA.

    Args:
        fields: The task's text fields shown after the failures, in order (e.g. "rate").
        eta: Show the time left; False shows the time elapsed.

    Returns:
        An unstarted ``rich.progress.Progress`` (use it with ``with``), or None.
    """
    try:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )
    except ImportError:
        return None
    clock = [TextColumn("ETA"), TimeRemainingColumn()] if eta else [TimeElapsedColumn()]
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("failed {task.fields[failed]}"),
        *(TextColumn(f"{{task.fields[{field}]}}") for field in fields),
        *clock,
        console=Console(stderr=True),
        transient=False,
    )
