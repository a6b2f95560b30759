"""``unillm batch``: the command line over :mod:`unillm.batch` (a JSONL in, a JSONL out).

    unillm batch in.jsonl --out out.jsonl --engine vllm --url http://127.0.0.1:8000
    unillm batch in.jsonl --out out.jsonl --engine vllm --url http://a:8000 --url http://b:8000
    unillm batch in.jsonl --out out.jsonl --config unillm.toml
    unillm batch in.jsonl --out out.jsonl --engine vllm --model /models/tiny --launch cpu=true
    unillm batch in.jsonl --out out.jsonl --engine vllm --model /models/tiny --in-process
    unillm batch in.jsonl --out out.jsonl --config unillm.toml --retry-failed

Rerun the same command to resume after a crash or Ctrl-C: finished custom_ids are skipped.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
from typing import TYPE_CHECKING, Any

from unillm.config.pairs import json_or_text, settings
from unillm.config.subcommands import add_repeatable, examples_parser
from unillm.errors import InvalidOptions

if TYPE_CHECKING:
    from unillm.batch.target import Target


def add_batch_parser(sub: Any) -> None:
    """Add the ``batch`` subcommand to the ``unillm`` parser."""
    p = examples_parser(
        sub,
        "batch",
        __doc__,
        summary="run a JSONL batch (OpenAI Batch format), resumable, on any engine or fleet",
        description="Run every request of a JSONL file (OpenAI Batch lines, or {prompt}/{messages} "
        "with unillm options) and append OpenAI Batch output lines, each fsynced before it "
        "counts. Rerun to resume; bad input is refused before anything is sent.",
    )
    p.add_argument("input", help="the batch input JSONL")
    p.add_argument("--out", required=True, help="the results JSONL (resumed when it exists)")
    t = p.add_argument_group("target (one of)")
    add_repeatable(t, "--url", "a running engine; repeat for a fleet")
    t.add_argument("--config", help="a unillm config (TOML/YAML): connect or launch as it says")
    t.add_argument("--model", help="launch --engine with this model for the run, stop it after")
    t.add_argument("--engine", help="the engine's adapter (vllm, sglang, tgi, mlx, llamacpp)")
    t.add_argument(
        "--api-key",
        default=os.environ.get("UNILLM_API_KEY"),
        help="API key of the engine(s) (default: $UNILLM_API_KEY, which keeps it out of ps)",
    )
    t.add_argument("--policy", help="fleet routing policy (round_robin, least_load, prefix, session)")
    add_repeatable(
        t,
        "--launch",
        "launch setting with --model (LaunchSpec field; JSON values), e.g. cpu=true",
        "KEY=VALUE",
    )
    t.add_argument(
        "--in-process",
        action="store_true",
        help="with --model or a launching --config: run the engine without its HTTP server "
        "(vLLM's engine in a worker); requests it cannot honour are refused before it starts",
    )
    r = p.add_argument_group("run")
    r.add_argument(
        "--max-concurrency", type=int, default=64, help="most requests in flight (default 64; adapts below)"
    )
    r.add_argument("--retry-failed", action="store_true", help="rerun only the requests that failed")
    r.add_argument("--no-progress", action="store_true", help="no progress bar (none when not a TTY)")
    r.add_argument("--json", action="store_true", help="print the summary as JSON on stdout")
    p.set_defaults(run=run_batch_command)


def run_batch_command(args: argparse.Namespace) -> int:
    """Plan (check input and output), open the target, run, print the summary.

    Returns:
        0 when every request has a successful result, 1 when some failed or remain,
        130 after Ctrl-C.
    """
    import anyio

    from unillm.batch import plan
    from unillm.batch.progress import progress_bar
    from unillm.batch.runner import execute
    from unillm.batch.target import check_target, open_target

    target = _target(args)
    vet = functools.partial(check_target, target)  # before anything starts or the output changes
    with plan(args.input, args.out, retry_failed=args.retry_failed, vet=vet) as p:
        if p.summary.torn_bytes:
            print(
                f"unillm batch: cut a torn last line ({p.summary.torn_bytes} bytes); redoing it",
                file=sys.stderr,
            )
        if not p.pending:
            print(
                f"unillm batch: all {len(p.items)} requests already have results in {args.out}",
                file=sys.stderr,
            )
            summary = p.summary
        else:

            async def go() -> Any:
                async with open_target(target) as client:  # checked by the plan
                    with progress_bar(
                        len(p.items), p.summary.skipped, False if args.no_progress else None
                    ) as hook:
                        return await execute(
                            client,
                            p.pending,
                            p.journal,
                            p.summary,
                            max_concurrency=args.max_concurrency,
                            progress=hook,
                            handle_sigint=True,
                        )

            summary = anyio.run(go)
    print(summary.line(), file=sys.stderr)
    if args.json:
        print(json.dumps(summary.as_dict()))
    if summary.interrupted:
        return 130
    return 0 if summary.failed == 0 and summary.failed_before == 0 and summary.remaining == 0 else 1


def _target(args: argparse.Namespace) -> Target:
    """What the batch runs against, checked before anything starts.

    Raises:
        InvalidOptions: A concurrency below 1, or a target that does not fit together.
    """
    from unillm.batch.target import Target

    if args.max_concurrency < 1:
        raise InvalidOptions(f"--max-concurrency must be 1 or more, got {args.max_concurrency}")
    target = Target(
        engine=args.engine,
        urls=args.url,
        config=args.config,
        model=args.model,
        api_key=args.api_key,
        policy=args.policy,
        launch=_settings(args.launch),
        in_process=args.in_process,
    )
    target.check()
    return target


def _settings(items: list[str]) -> dict[str, Any]:
    return {key: json_or_text(value) for key, value in settings(items, "--launch").items()}
