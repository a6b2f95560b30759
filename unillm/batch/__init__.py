"""Batch jobs that lose nothing: a JSONL of requests in, a JSONL of results out, resumable.

    summary = await unillm.batch.run("in.jsonl", "out.jsonl", llm, max_concurrency=64)
    target = Target(engine="vllm", model="/m", in_process=True)  # no HTTP server
    summary = await unillm.batch.run("in.jsonl", "out.jsonl", target)
    $ unillm batch in.jsonl --out out.jsonl --url http://127.0.0.1:8000
    $ unillm batch in.jsonl --out out.jsonl --engine vllm --model /m --in-process

The input is OpenAI Batch lines (``custom_id``, ``method``, ``url``, ``body``) or the simple
form (``{"prompt": ...}`` / ``{"messages": ...}`` with unillm options); see
:mod:`unillm.batch.lines`. The output is OpenAI Batch output lines (:mod:`unillm.batch.render`).
Every line is checked before anything is sent. Each result is appended and fsynced before it
counts as done (group commit, :mod:`unillm.batch.journal`), so rerunning the same command
resumes: finished ``custom_id``s are skipped, a torn last line is cut off and redone, and
``retry_failed=True`` reruns only the failed ones.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from unillm.batch.journal import Journal, OutputWriteError, Resume, read_lines
from unillm.batch.lines import BatchItem, parse_lines
from unillm.batch.pacing import Pacer
from unillm.batch.progress import progress_bar
from unillm.batch.runner import ProgressHook, Summary, UnexpectedError, execute, resumed
from unillm.batch.target import Target, check_target, open_target
from unillm.client.protocol import Client
from unillm.errors import InvalidOptions

__all__ = [
    "BatchItem",
    "OutputWriteError",
    "Pacer",
    "Plan",
    "Summary",
    "Target",
    "UnexpectedError",
    "plan",
    "run",
]


@dataclass
class Plan:
    """A checked batch: every request, the ones still to run (prefix-grouped), the open output.

    Close it (``with plan(...) as p:``) to release the output's lock.
    """

    items: list[BatchItem]
    pending: list[BatchItem]
    journal: Journal
    summary: Summary

    def __enter__(self) -> Plan:
        return self

    def __exit__(self, *exc: object) -> None:
        self.journal.close()


def plan(
    input: str | Path,
    output: str | Path,
    *,
    retry_failed: bool = False,
    vet: Callable[[list[BatchItem]], None] | None = None,
) -> Plan:
    """Read and check the input, open and scan the output, and list what is left to run.

    Nothing is sent. Requests are ordered so that those sharing a prefix go out together
    (the engine's prefix cache then serves the shared part once).

    Args:
        input: The batch input JSONL.
        output: The results JSONL (created, or resumed when it exists).
        retry_failed: Remove failed results from the output and run those requests again.
        vet: Called with the requests still to run (when there are some) before the output
            changes: what it raises leaves both files as they were (e.g. ``check_target``).

    Returns:
        The plan; its journal holds the output's lock until closed.

    Raises:
        InvalidOptions: A bad input line (all listed), or an output that is the input itself,
            not a results file, another batch's, or being written by another run; nothing in
            either file is changed then.
        UnillmError: What ``vet`` raised; nothing changed either.
    """
    _not_the_input(input, output)
    items = parse_lines(read_lines(input))
    journal = Journal(output)
    try:
        resume: Resume = journal.scan({i.custom_id for i in items})
        done = resume.succeeded if retry_failed else resume.done
        pending = sorted((i for i in items if i.custom_id not in done), key=BatchItem.prefix_key)
        if vet is not None and pending:
            vet(pending)
        if retry_failed and resume.failed:
            journal.drop(resume.failed)
    except BaseException:
        journal.close()
        raise
    return Plan(items, pending, journal, resumed(len(items), resume, retry_failed))


def _not_the_input(input: str | Path, output: str | Path) -> None:
    """Refuse an output that is the input file (the same path, a link to it, the same inode)."""
    try:
        same = os.path.samefile(input, output)
    except OSError:  # one of them does not exist (yet): they are not one file
        same = False
    if same:
        raise InvalidOptions(
            f"--out {output} is the batch input itself; results would overwrite the requests. "
            "Give the results a file of their own"
        )


async def run(
    input: str | Path,
    output: str | Path,
    client: Client | Target,
    *,
    max_concurrency: int = 64,
    retry_failed: bool = False,
    progress: bool | ProgressHook | None = None,
    handle_sigint: bool = False,
) -> Summary:
    """Run a batch file through ``client`` (an LLM or a Fleet), resuming where the output left off.

    Args:
        input: The batch input JSONL (OpenAI Batch or simple lines).
        output: The results JSONL (OpenAI Batch output lines), appended to.
        client: Where requests go; its retry policy (or a fleet's failover) retries them. A
            :class:`Target` is opened for the run (launched, or in process, and stopped after)
            once the input is checked; an in-process one after checking every request too.
        max_concurrency: The most requests in flight; the run adapts below it to the engine.
        retry_failed: Rerun only the requests whose result is a failure.
        progress: True/False force the progress bar on/off, None draws it on a terminal; a
            callable gets the summary after each durable group instead.
        handle_sigint: First Ctrl-C stops cleanly (in-flight requests finish and are written),
            a second drops them (main thread only).

    Returns:
        The run's summary (counts, tokens, time, throughput).

    Raises:
        InvalidOptions: Bad input or output, or requests an in-process target cannot honour,
            refused before anything is sent.
        OutputWriteError: The output could not be written (a full disk); rerun to resume.
    """
    vet = functools.partial(check_target, client) if isinstance(client, Target) else None
    with plan(input, output, retry_failed=retry_failed, vet=vet) as p:
        if not isinstance(client, Target):
            return await _progress(p, client, max_concurrency, progress, handle_sigint)
        if not p.pending:
            return p.summary
        async with open_target(client) as opened:  # its requests were checked by the plan
            return await _progress(p, opened, max_concurrency, progress, handle_sigint)


async def _progress(
    p: Plan, client: Client, max_concurrency: int, progress: bool | ProgressHook | None, handle_sigint: bool
) -> Summary:
    if callable(progress):
        return await _execute(p, client, max_concurrency, progress, handle_sigint)
    with progress_bar(len(p.items), p.summary.skipped, progress) as hook:
        return await _execute(p, client, max_concurrency, hook, handle_sigint)


async def _execute(
    p: Plan, client: Client, max_concurrency: int, hook: ProgressHook | None, handle_sigint: bool
) -> Summary:
    return await execute(
        client,
        p.pending,
        p.journal,
        p.summary,
        max_concurrency=max_concurrency,
        progress=hook,
        handle_sigint=handle_sigint,
    )
