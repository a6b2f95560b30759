"""``unillm bench``: the command line over :mod:`unillm.bench` (arguments in, report files out).

    unillm bench vllm --url http://127.0.0.1:8000 --num-prompts 200 --max-concurrency 1,4,16
    unillm bench vllm --url http://a:8000 --url http://b:8000          # a fleet
    unillm bench --config unillm.toml --request-rate 2,4,8 --goodput ttft:500 tpot:50
    unillm bench vllm,sglang --model /models/tiny --vary prefix_caching=true,false \\
        --vary speculative=none,ngram:4 --launch max_model_len=2048
    unillm bench vllm --url http://127.0.0.1:8000 --workload multi-turn --sessions 20 --turns 5 \\
        --system-prompt-len 256 --think-time 1 --max-concurrency 4 --runs 3
    unillm bench vllm --url http://127.0.0.1:8000 --trace mooncake_trace.jsonl --cancel-rate 0.1
"""

from __future__ import annotations

import argparse
import math
import sys
from typing import Any

from unillm.config.pairs import json_or_text, settings
from unillm.config.subcommands import add_repeatable, examples_parser
from unillm.errors import InvalidOptions, validation_problems


def add_bench_parser(sub: Any) -> None:
    """Add the ``bench`` subcommand to the ``unillm`` parser."""
    p = examples_parser(
        sub,
        "bench",
        __doc__,
        summary="measure engines under load (vllm bench serve's definitions)",
        description="Measure TTFT, TPOT, ITL, latency and throughput under load, with the "
        "definitions of `vllm bench serve`, and write JSON, a markdown table and plots.",
    )
    p.add_argument("engine", nargs="?", help="engine name (several, comma-separated, to launch a matrix)")
    _target_arguments(p.add_argument_group("target (one of)"))
    _workload_arguments(p.add_argument_group("workload"))
    _session_arguments(p.add_argument_group("multi-turn sessions and traces"))
    _load_arguments(p.add_argument_group("load"))
    _output_arguments(p.add_argument_group("output"))
    p.set_defaults(run=run_bench_command)


def _target_arguments(t: Any) -> None:
    add_repeatable(t, "--url", "a running engine; repeat for a fleet of replicas")
    t.add_argument("--config", help="a unillm config (TOML/YAML): connect or launch as it says")
    t.add_argument("--model", help="launch ENGINE(s) with this model, measure, stop")
    t.add_argument("--api-key", help="API key of the running engine(s)")
    t.add_argument("--policy", help="fleet routing policy (round_robin, least_load, prefix, ...)")
    add_repeatable(
        t, "--launch", "launch setting for every matrix cell (LaunchSpec field; JSON values)", "KEY=VALUE"
    )
    t.add_argument(
        "--http",
        choices=("auto", "aiohttp", "httpx"),
        default="auto",
        help="HTTP client that measures a URL or launched engine: aiohttp under httpx "
        "(auto: when httpx-aiohttp is installed, as in unillm-sdk[bench]) or httpx's own",
    )
    add_repeatable(
        t,
        "--vary",
        "matrix axis: tensor, pipeline, data, prefix_caching, speculative "
        "(none | METHOD:TOKENS), max_num_seqs, ...",
        "KEY=V1,V2",
    )


def _session_arguments(w: Any) -> None:
    w.add_argument(
        "--workload",
        choices=("single", "multi-turn"),
        default="single",
        help="single requests (--dataset) or multi-turn chat sessions (--sessions, --turns); "
        "with multi-turn, --request-rate and --max-concurrency apply to session starts",
    )
    w.add_argument("--sessions", type=int, default=10, help="multi-turn: sessions (default 10)")
    w.add_argument("--turns", type=int, default=3, help="multi-turn: turns per session (default 3)")
    w.add_argument(
        "--system-prompt-len", type=int, default=0, help="multi-turn: system prompt tokens (default none)"
    )
    w.add_argument(
        "--system-prompts", type=int, default=1, help="multi-turn: distinct system prompts the sessions share"
    )
    w.add_argument(
        "--think-time",
        type=float,
        default=0.0,
        help="multi-turn: mean seconds between a turn's answer and the next",
    )
    w.add_argument(
        "--reasoning",
        choices=("strip", "echo"),
        default="strip",
        help="multi-turn: drop an answer's thinking from the history, or echo it in <think> tags",
    )
    w.add_argument(
        "--session-key", action="store_true", help="multi-turn: send session=<id> (a fleet's affinity key)"
    )
    w.add_argument(
        "--trace",
        metavar="FILE.jsonl",
        help="replay a Mooncake-format trace on its own schedule (timestamp, input_length, "
        "output_length, hash_ids)",
    )
    w.add_argument(
        "--trace-block-size", type=int, default=512, help="tokens per hash id of the trace (Mooncake: 512)"
    )
    w.add_argument(
        "--trace-time-scale",
        type=float,
        default=1.0,
        help="multiply the trace's timestamps (0.5: twice as fast)",
    )


def _workload_arguments(w: Any) -> None:
    w.add_argument(
        "--dataset",
        default="random",
        help="'random', 'shared-prefix', or a JSONL file of {prompt} / {messages} lines",
    )
    w.add_argument("--num-prompts", type=int, default=100, help="requests to send (default 100)")
    w.add_argument("--input-len", type=int, default=128, help="prompt tokens (synthetic; default 128)")
    w.add_argument("--output-len", type=int, default=64, help="tokens to generate (default 64)")
    w.add_argument(
        "--range-ratio",
        type=float,
        default=0.0,
        help="draw lengths uniformly within +/- this fraction of the means",
    )
    w.add_argument(
        "--prefix-len",
        type=int,
        default=None,
        help="shared prefix tokens (shared-prefix default: 3/4 of --input-len)",
    )
    w.add_argument("--tokenizer", help="model folder or tokenizer.json for exact prompt lengths")
    w.add_argument("--chat", action="store_true", help="send prompts as chat messages")
    w.add_argument("--temperature", type=float, help="sampling temperature (engine default if unset)")
    w.add_argument(
        "--ignore-eos", action="store_true", help="generate exactly the requested tokens (vllm, sglang)"
    )
    w.add_argument("--seed", type=int, default=0, help="seed of prompts and arrivals")


def _load_arguments(a: Any) -> None:
    a.add_argument(
        "--request-rate",
        default=None,
        help="requests/s, comma-separated to sweep (default: inf, all at once)",
    )
    a.add_argument(
        "--arrival",
        choices=("poisson", "fixed"),
        default="poisson",
        help="poisson (gamma with --burstiness) or fixed intervals, with --request-rate",
    )
    a.add_argument("--burstiness", type=float, default=1.0, help="gamma shape of poisson arrivals")
    a.add_argument("--max-concurrency", default=None, help="requests in flight, comma-separated to sweep")
    a.add_argument("--warmup", type=int, default=0, help="unmeasured requests first")
    a.add_argument(
        "--cancel-rate",
        type=float,
        default=0.0,
        help="share of requests (0-1) to cancel at a seeded random point (counted apart)",
    )
    a.add_argument("--runs", type=int, default=1, help="repeat each point N times: mean +/- 95%% CI")
    a.add_argument(
        "--goodput", nargs="+", default=[], metavar="KEY:MS", help="SLOs for goodput: ttft:MS tpot:MS e2el:MS"
    )
    a.add_argument("--percentiles", default="50,90,99", help="percentiles to report (default 50,90,99)")


def _output_arguments(o: Any) -> None:
    o.add_argument("--out", default="bench-results", help="folder for JSON, summary.md and plots")
    o.add_argument(
        "--no-plots", action="store_true", help="skip the PNG plots and HTML report (no matplotlib needed)"
    )
    o.add_argument("--no-progress", action="store_true", help="no live progress display")
    o.add_argument(
        "--no-engine-metrics", action="store_true", help="do not sample the engine's metrics during the run"
    )


def run_bench_command(args: argparse.Namespace) -> int:
    """Build targets, workload and loads from the arguments, run, write and print the report."""
    import anyio

    from unillm.bench.live import live_progress
    from unillm.bench.report import markdown_table, write_report
    from unillm.bench.suite import run_suite

    targets = _targets(args)
    workload = _workload(args)
    loads = _loads(args)
    slo = _slo(args.goodput)
    options: dict[str, Any] = {}
    if args.temperature is not None:
        options["temperature"] = args.temperature
    if args.ignore_eos:
        engines = {getattr(t, "engine", None) for t in targets}
        if not engines <= {"vllm", "sglang"}:
            raise InvalidOptions(
                "--ignore-eos is honoured by vllm and sglang only "
                f"(targets: {', '.join(sorted(map(str, engines)))}); drop it"
            )
        options["extra_body"] = {"ignore_eos": True}
    percentiles = [float(x) for x in args.percentiles.split(",") if x.strip()]

    async def go() -> Any:
        with live_progress(not args.no_progress) as hook:
            return await run_suite(
                targets,
                workload,
                loads,
                options=options,  # type: ignore[arg-type]
                warmup=args.warmup,
                slo=slo,
                percentiles=percentiles,
                seed=args.seed,
                progress=hook,
                sample_every_s=None if args.no_engine_metrics else 1.0,
                runs=args.runs,
                cancel_rate=args.cancel_rate,
            )

    report = anyio.run(go)
    paths = write_report(report, args.out, plots=not args.no_plots)
    print(markdown_table(report.runs))
    print(f"[unillm bench] wrote {len(paths)} files to {args.out}", file=sys.stderr)
    return 1 if all(r.error or (r.summary and not r.summary.completed) for r in report.runs) else 0


def _targets(args: argparse.Namespace) -> list[Any]:
    from unillm.bench.targets import Config, Fleet, Url, matrix

    chosen = [bool(args.url), bool(args.config), bool(args.model)]
    if sum(chosen) != 1:
        raise InvalidOptions(
            "give exactly one target: --url URL (repeat for a fleet), "
            "--config FILE, or --model M to launch ENGINE(s)"
        )
    engines = [e.strip() for e in (args.engine or "").split(",") if e.strip()]
    if args.config:
        return [Config(args.config)]
    if not engines:
        raise InvalidOptions("name the engine, e.g. `unillm bench vllm --url ...`")
    if args.url:
        if len(engines) != 1:
            raise InvalidOptions("--url measures one engine; name exactly one")
        if len(args.url) == 1:
            return [Url(engines[0], args.url[0], api_key=args.api_key, http=args.http)]
        return [Fleet(engines[0], args.url, api_key=args.api_key, policy=args.policy)]
    base = {"model": args.model, **{k: json_or_text(v) for k, v in settings(args.launch, "--launch").items()}}
    vary = {k: [json_or_text(x) for x in v.split(",")] for k, v in settings(args.vary, "--vary").items()}
    return list(matrix(engines, base, vary, http=args.http))


def _workload(args: argparse.Namespace) -> Any:
    from pydantic import ValidationError

    from unillm.bench.sessions import MultiTurn
    from unillm.bench.trace import MooncakeTrace
    from unillm.bench.workload import JsonlPrompts, Synthetic

    if not 0 <= args.cancel_rate <= 1:
        raise InvalidOptions(f"--cancel-rate is a share of the requests, 0 to 1; got {args.cancel_rate}")
    if args.runs < 1:
        raise InvalidOptions(f"--runs must be at least 1, got {args.runs}")
    try:
        if args.trace and args.workload == "multi-turn":
            raise InvalidOptions("--trace replays a trace; drop --workload multi-turn (or --trace)")
        if args.trace:
            return MooncakeTrace(
                path=args.trace,
                block_size=args.trace_block_size,
                time_scale=args.trace_time_scale,
                chat=args.chat,
                seed=args.seed,
            )
        if args.workload == "multi-turn":
            return MultiTurn(
                sessions=args.sessions,
                turns=args.turns,
                input_len=args.input_len,
                output_len=args.output_len,
                range_ratio=args.range_ratio,
                system_prompt_len=args.system_prompt_len,
                system_prompts=args.system_prompts,
                think_time_s=args.think_time,
                reasoning=args.reasoning,
                session_key=args.session_key,
                tokenizer=args.tokenizer,
                seed=args.seed,
            )
        if args.dataset in ("random", "shared-prefix"):
            prefix = args.prefix_len
            if prefix is None:
                prefix = args.input_len * 3 // 4 if args.dataset == "shared-prefix" else 0
            return Synthetic(
                num_prompts=args.num_prompts,
                input_len=args.input_len,
                output_len=args.output_len,
                range_ratio=args.range_ratio,
                prefix_len=prefix,
                tokenizer=args.tokenizer,
                chat=args.chat,
                seed=args.seed,
            )
        return JsonlPrompts(path=args.dataset, output_len=args.output_len, num_prompts=args.num_prompts)
    except ValidationError as e:
        problems = validation_problems(e)
        raise InvalidOptions(f"invalid workload: {problems}") from None


def _loads(args: argparse.Namespace) -> list[Any]:
    from pydantic import ValidationError

    from unillm.bench.runner import as_load_list

    try:
        rates = (
            [math.inf if x.strip() == "inf" else float(x) for x in args.request_rate.split(",")]
            if args.request_rate
            else None
        )
        concurrencies = [int(x) for x in args.max_concurrency.split(",")] if args.max_concurrency else None
        return as_load_list(rates, concurrencies, arrival=args.arrival, burstiness=args.burstiness)
    except (ValueError, ValidationError) as e:
        raise InvalidOptions(f"invalid load (--request-rate, --max-concurrency, --burstiness): {e}") from None


def _slo(items: list[str]) -> Any:
    from unillm.bench.stats import Slo

    values: dict[str, float] = {}
    for item in items:
        key, sep, ms = item.partition(":")
        if not sep or key not in ("ttft", "tpot", "e2el"):
            raise InvalidOptions(f"--goodput takes ttft:MS, tpot:MS or e2el:MS, got {item!r}")
        try:
            values[f"{key}_ms"] = float(ms)
        except ValueError:
            raise InvalidOptions(f"--goodput {item!r}: {ms!r} is not a number of milliseconds") from None
    try:
        return Slo(**values) if values else None
    except ValueError as e:
        raise InvalidOptions(f"--goodput: {e}") from None
