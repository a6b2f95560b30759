"""``unillm launch``: start an engine (or a fleet, nodes, a router) from one spec and serve it.

``--dry-run`` prints each command instead (:func:`print_command`, the one place that prints them).
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from unillm.cli.launch_settings import SCALAR_FLAGS, fleet_settings, node_ranks, spec_settings
from unillm.cli.names import engine_names
from unillm.cli.serve import serve
from unillm.config.subcommands import add_repeatable
from unillm.errors import validation_problems

if TYPE_CHECKING:
    from unillm.adapter.launch_spec import LaunchCommand
    from unillm.launching.fleet_launch import FleetLaunch
    from unillm.launching.ray_cluster import RayLaunch
    from unillm.launching.supervisor import Launch


HELP = "start an engine and serve until Ctrl-C"
DESCRIPTION = "Start an engine from one unified spec and serve until Ctrl-C. Raw engine flags go after --."


def add_arguments(launch: argparse.ArgumentParser) -> None:
    """Add the arguments (and the handler) of ``unillm launch`` to its parser."""
    launch.add_argument("engine", nargs="?", help=f"{engine_names('or')} (not with --config)")
    launch.add_argument("--model", help="model path or hub id (required without --config)")
    launch.add_argument(
        "--config",
        metavar="FILE",
        help="launch what a unillm.toml/.yaml's [launch] describes (replicas, [launch.cluster], ...); "
        "only --dry-run goes with it",
    )
    launch.add_argument(
        "--cpu",
        action="store_true",
        help="apply the engine's CPU recipe: settings that run on a CPU-only "
        "machine in little memory (the flags you give win)",
    )
    for name, text in SCALAR_FLAGS.items():
        launch.add_argument("--" + name.replace("_", "-"), dest=name, help=text)
    launch.add_argument(
        "--tensor-parallel", type=int, default=1, metavar="N", help="split each layer over N devices"
    )
    launch.add_argument(
        "--pipeline-parallel", type=int, default=1, metavar="N", help="split the layers over N devices"
    )
    launch.add_argument(
        "--data-parallel", type=int, default=1, metavar="N", help="N model replicas in one engine"
    )
    launch.add_argument("--expert-parallel", action="store_true", help="spread MoE experts over the devices")
    launch.add_argument(
        "--prefix-caching",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="reuse the KV cache of shared prompt prefixes (default: the engine's)",
    )
    launch.add_argument(
        "--cpus",
        metavar="LIST",
        help="cores the engine may run on, e.g. 0-3 or 0,2 (Linux; with --cpu --replicas N the "
        "cores are split among the replicas unless given)",
    )
    _add_serving_flags(launch)
    _add_fleet_flags(launch)
    launch.set_defaults(run=run, launch_parser=launch)


def _add_serving_flags(launch: argparse.ArgumentParser) -> None:
    """LoRA, speculative decoding, the API key, the environment and --dry-run."""
    add_repeatable(launch, "--lora", "serve a LoRA adapter under NAME (repeatable)", "NAME=PATH")
    launch.add_argument("--runtime-lora", action="store_true", help="allow loading adapters at runtime")
    launch.add_argument(
        "--speculative",
        metavar="METHOD",
        help="speculative decoding: ngram | draft | eagle | eagle3 | mtp | suffix",
    )
    launch.add_argument(
        "--speculative-tokens", type=int, default=4, metavar="K", help="tokens proposed per step (default 4)"
    )
    launch.add_argument(
        "--draft-model", metavar="MODEL", help="draft model for --speculative draft / eagle / eagle3"
    )
    launch.add_argument("--api-key", help="'auto' (generated, the default), 'none', or a key")
    add_repeatable(
        launch,
        "--env",
        "environment variable for the engine (repeatable); values of names like "
        "HF_TOKEN or *_API_KEY are masked when printed",
        "KEY=VALUE",
    )
    add_repeatable(
        launch, "--secret-env", "also mask this --env variable's value when printed (repeatable)", "NAME"
    )
    launch.add_argument(
        "--dry-run", action="store_true", help="print the command and environment, start nothing"
    )


def _add_fleet_flags(launch: argparse.ArgumentParser) -> None:
    """Replicas, a router, Ray, nodes, prefill/decode."""
    from unillm.fleet.picker import POLICIES
    from unillm.launching.routers import ROUTERS

    fleet = launch.add_argument_group("fleets", "several engines, a router, nodes, prefill/decode")
    fleet.add_argument("--replicas", type=int, default=1, help="engines to start (default 1)")
    fleet.add_argument(
        "--router",
        choices=sorted(ROUTERS),
        help="also start this router in front (install: unillm setup <router>)",
    )
    fleet.add_argument(
        "--policy", choices=POLICIES, default="round_robin", help="how requests are spread over the engines"
    )
    fleet.add_argument(
        "--prefill",
        type=int,
        metavar="N",
        help="prefill engines (prefill/decode disaggregation; needs --router)",
    )
    fleet.add_argument("--decode", type=int, metavar="N", help="decode engines")
    fleet.add_argument(
        "--kv-transfer",
        choices=("nixl", "mooncake"),
        default="nixl",
        help="KV-cache transfer between prefill and decode engines",
    )
    fleet.add_argument(
        "--ray",
        metavar="ADDRESS",
        help="place the replicas on this Ray cluster ('head:6379', or 'auto'); needs unillm-sdk[ray]",
    )
    fleet.add_argument(
        "--ray-placement",
        choices=("SPREAD", "STRICT_SPREAD", "PACK", "STRICT_PACK"),
        default="SPREAD",
        help="how Ray places the replicas (default SPREAD: different nodes where possible)",
    )
    fleet.add_argument("--nodes", type=int, metavar="N", help="machines one engine spans")
    fleet.add_argument(
        "--node-rank",
        type=int,
        metavar="R",
        help="this machine's rank (0 = head); with --dry-run and no rank: every node",
    )
    fleet.add_argument(
        "--head-address", metavar="HOST[:PORT]", help="where the nodes meet (the head node, rank 0)"
    )


def run(args: argparse.Namespace) -> int:
    """Launch what the flags (or ``--config``) describe and serve it, or print it (``--dry-run``)."""
    from pydantic import ValidationError

    from unillm.api import launch
    from unillm.errors import InvalidOptions

    if args.config is not None:
        return _launch_config(args)
    if args.engine is None or args.model is None:
        args.launch_parser.error("give an engine and --model, or --config FILE")
    try:
        settings = spec_settings(args)
        fleet = fleet_settings(args)
        ranks = node_ranks(args, settings)
    except ValidationError as e:
        problems = validation_problems(e)
        raise InvalidOptions(f"invalid launch settings: {problems}") from None
    if args.dry_run:  # one command as is; several (nodes, replicas, router) each labelled
        for rank in ranks:
            if rank is not None:
                settings["nodes"] = settings["nodes"].model_copy(update={"rank": rank})
            run = launch(args.engine, **fleet, **settings)
            _say_routing_note(run)
            commands = _commands(run)
            for label, command in commands:
                labelled = len(commands) > 1 or len(ranks) > 1
                node = f", node {rank}" if rank is not None else ""
                print_command(command, f"{label}{node}" if labelled else None)
        return 0
    if ranks != [None] and len(ranks) != 1:
        raise InvalidOptions("--nodes needs --node-rank R on each machine (or --dry-run to see all)")
    run = launch(args.engine, **fleet, **settings)
    _say_routing_note(run)
    return serve(run)


def _say_routing_note(run: object) -> None:
    """Why a client-side ``cache_aware`` fleet routes by its prefix tree, not the engines' events."""
    note = getattr(run, "kv_events_note", None)
    if note:
        print(f"[unillm] cache_aware: {note}", file=sys.stderr)


def _launch_config(args: argparse.Namespace) -> int:
    """``unillm launch --config FILE``: what the file's ``[launch]`` describes, nothing from flags."""
    from unillm.config.load import from_config
    from unillm.errors import InvalidOptions
    from unillm.launching.fleet_launch import FleetLaunch
    from unillm.launching.ray_cluster import RayLaunch
    from unillm.launching.supervisor import Launch

    parser: argparse.ArgumentParser = args.launch_parser
    ignored = {"config", "dry_run", "extra_args", "run", "launch_parser", "command"}
    given = sorted(k for k, v in vars(args).items() if k not in ignored and v != parser.get_default(k))
    if given or args.extra_args:
        flags = ", ".join("--" + k.replace("_", "-") for k in given) or "engine flags after --"
        raise InvalidOptions(
            f"--config takes every setting from the file; also given: {flags}. Put them in the "
            "file's [launch] table (or override one with UNILLM_LAUNCH__<KEY>=...)"
        )
    run = from_config(args.config)
    if not isinstance(run, Launch | FleetLaunch | RayLaunch):
        raise InvalidOptions(
            f"{args.config} connects to engines already running (base_url) or routes between "
            "routes ([router]): unillm launch needs a [launch] table"
        )
    _say_routing_note(run)
    if args.dry_run:
        for label, command in _commands(run):
            print_command(command, label)
        return 0
    return serve(run)


def print_command(command: LaunchCommand, heading: str | None) -> None:
    """One engine's command for --dry-run: its heading, notes (prerequisites, files), the line.

    The one place ``unillm launch --dry-run`` prints a command.
    """
    if heading is not None:
        print(f"# {heading}")
    for note in command.described():
        print(f"# {note}")
    print(command.render())


def _commands(run: Launch | FleetLaunch | RayLaunch) -> list[tuple[str, LaunchCommand]]:
    from unillm.launching.supervisor import Launch

    if isinstance(run, Launch):
        return [(run.name, run.command())]
    return run.commands()
