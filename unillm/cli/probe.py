"""``unillm probe``: measure, by effect, which options a running engine honours.

unillm probe --engine vllm --url http://127.0.0.1:8000            # a table
unillm probe --engine vllm --url URL --json                        # the report as JSON
unillm probe --engine vllm --url URL --markdown --only stop,seed   # some cells, as markdown
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

HELP = "measure which options a running engine honours"
DESCRIPTION = (
    "Send small requests to a running engine and judge, by their effect, whether "
    "each option is honoured, refused before sending, rejected, ignored (a silent drop) or "
    "not measurable there. Exit status 1 when an option is ignored."
)


def add_arguments(probe: argparse.ArgumentParser) -> None:
    """Add the arguments (and the handler) of ``unillm probe`` to its parser."""
    probe.add_argument("--engine", required=True, help="the engine's adapter: vllm, sglang, tgi, ...")
    probe.add_argument("--url", required=True, help="the engine's base URL, e.g. http://127.0.0.1:8000")
    probe.add_argument("--model", help="the served model (default: what the engine lists first)")
    probe.add_argument("--api-key", help="the engine's API key, if it needs one")
    probe.add_argument("--samples", type=int, default=3, help="samples per sampling cell (default 3)")
    probe.add_argument(
        "--only", help="comma-separated options to probe, named as in the report (default: all)"
    )
    out = probe.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="print the report as JSON")
    out.add_argument("--markdown", action="store_true", help="print the report as a markdown table")
    probe.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Probe the engine and print the report (exit 1 when any option is ignored)."""
    import anyio

    from unillm.api import connect
    from unillm.probing.runner import probe

    only = [o.strip() for o in args.only.split(",")] if args.only else None

    async def go() -> Any:
        async with connect(args.engine, args.url, model=args.model, api_key=args.api_key) as llm:
            with _progress() as progress:
                return await probe(llm, samples=args.samples, only=only, progress=progress)

    report = anyio.run(go)
    print(
        report.model_dump_json(indent=2)
        if args.json
        else report.markdown()
        if args.markdown
        else report.text()
    )
    return 1 if report.ignored() else 0


class _progress:
    """A progress bar on stderr (rich, when installed and stderr is a terminal)."""

    def __enter__(self) -> Any:
        self.bar: Any = None
        try:
            from rich.progress import Progress
        except ImportError:
            return None
        if not sys.stderr.isatty():
            return None
        from rich.console import Console

        self.bar = Progress(console=Console(stderr=True), transient=True)
        self.bar.__enter__()
        task = self.bar.add_task("probing", total=None)

        def update(option: str, done: int, total: int) -> None:
            self.bar.update(task, completed=done, total=total, description=f"probing {option}")

        return update

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.__exit__(None, None, None)
