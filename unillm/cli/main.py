"""The ``unillm`` command (see ``unillm --help``).

unillm engines                              # capability table of every installed adapter
unillm setup vllm                           # install an engine into its own venv
unillm launch vllm --cpu --model M          # serve on a CPU-only machine until Ctrl-C
unillm launch vllm --model M --dry-run      # print the exact command (secrets masked)
unillm check unillm.toml                    # every refusal the configured engine would raise
unillm tiny-model --json                    # build the tiny test model, print its paths
unillm launch vllm --model M --replicas 2 --router smg --policy prefix --dry-run
unillm launch vllm --model M --replicas 2 --ray head:6379   # replicas on a Ray cluster's nodes
unillm launch vllm --model M --nodes 2 --head-address 10.0.0.1 --port 8000 --dry-run
unillm launch vllm --model M --prefill 1 --decode 1 --router vllm-router --dry-run
unillm bench vllm --url http://127.0.0.1:8000 --max-concurrency 1,4,16   # see `unillm bench -h`
unillm batch in.jsonl --out out.jsonl --engine vllm --url URL   # resumable; see `unillm batch -h`
unillm deploy kubernetes --config unillm.toml --out k8s/   # KServe manifests; see `unillm deploy -h`
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from unillm.errors import UnillmError, validation_problems

if TYPE_CHECKING:
    from unillm.adapter.launch_spec import LaunchCommand
    from unillm.launching.fleet_launch import FleetLaunch
    from unillm.launching.ray_cluster import RayLaunch
    from unillm.launching.supervisor import Launch

_DESCRIPTION = """\
One command line for vLLM, SGLang, TGI and MLX: install, launch, check a config.

examples:
  unillm engines                              capability table of every installed adapter
  unillm setup vllm                           install an engine into its own venv
  unillm launch vllm --cpu --model M          serve on a CPU-only machine until Ctrl-C
  unillm launch vllm --model M --dry-run      print the exact command (secrets masked)
  unillm launch vllm --model M -- --enforce-eager   raw engine flags after --
  unillm launch vllm --model M --replicas 2 --router smg --policy prefix --dry-run
  unillm launch vllm --model M --replicas 2 --ray head:6379   one replica per Ray node
  unillm launch --config unillm.toml --dry-run   what the config's [launch] starts (here or on Ray)
  unillm check unillm.toml                    every refusal the configured engine would raise
  unillm tiny-model --json                    build the tiny test model, print its paths
  unillm bench vllm --url URL --max-concurrency 1,4,16   measure under load (vllm bench serve's definitions)
  unillm batch in.jsonl --out out.jsonl --engine vllm --url URL   a JSONL batch, resumable
  unillm deploy kubernetes --config unillm.toml --out k8s/   KServe manifests from the same config
  unillm probe --engine vllm --url URL         which options the running engine honours, by effect
"""
_SCALAR_FLAGS = {
    "served_name": "name the engine serves the model under (default: the model path)",
    "host": "address to bind (default 127.0.0.1)",
    "port": "port to listen on (default: a free one)",
    "dtype": "weights and activations dtype, e.g. bfloat16 (default: the engine's)",
    "max_model_len": "longest context in tokens (default: the model's, or what fits with --cpu)",
    "max_num_seqs": "most sequences decoded at once",
    "memory_fraction": "fraction of accelerator memory the engine may take (0-1]",
    "quantization": "quantization method, e.g. awq, fp8",
    "max_lora_rank": "highest LoRA rank to reserve room for",
    "max_loras": "most LoRA adapters in one batch",
    "python": "interpreter of the env the engine is installed in (default: its managed env)",
    "ready_timeout": "seconds to wait until the engine answers (default 900)",
}


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``unillm`` console script."""
    argv = list(sys.argv[1:] if argv is None else argv)
    extra = argv[argv.index("--") + 1 :] if "--" in argv else []
    args = _parser().parse_args(argv[: len(argv) - len(extra) - (1 if extra or "--" in argv else 0)])
    args.extra_args = extra
    try:
        return int(args.run(args))
    except UnillmError as e:
        print(f"unillm: {type(e).__name__}: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


def _parser() -> argparse.ArgumentParser:
    from unillm.fleet.picker import POLICIES
    from unillm.launching.routers import ROUTERS

    parser = argparse.ArgumentParser(
        prog="unillm", description=_DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(required=True, metavar="COMMAND")

    engines = sub.add_parser(
        "engines",
        help="capability table of the installed adapters",
        description="Print which features each installed engine honours.",
    )
    engines.add_argument("--json", action="store_true", help="machine-readable output")
    engines.set_defaults(run=_engines)
    from unillm.cli import probe

    probe.register(sub)

    setup = sub.add_parser(
        "setup",
        help="install an engine into its own managed venv",
        description="Install an engine into $UNILLM_CACHE/envs/<engine>.",
    )
    setup.add_argument("engine", help="vllm, sglang or mlx")
    setup.add_argument(
        "--gpu",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="force the GPU (or CPU) build; default: detect",
    )
    setup.add_argument(
        "--pip-arg",
        action="append",
        default=[],
        help="extra pip argument (e.g. an index for CPU torch wheels)",
    )
    setup.set_defaults(run=_setup)

    launch = sub.add_parser(
        "launch",
        help="start an engine and serve until Ctrl-C",
        description="Start an engine from one unified spec and serve until Ctrl-C. Raw engine "
        "flags go after --.",
    )
    launch.add_argument("engine", nargs="?", help="vllm, sglang, tgi or mlx (not with --config)")
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
    for name, text in _SCALAR_FLAGS.items():
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
        "--lora",
        action="append",
        default=[],
        metavar="NAME=PATH",
        help="serve a LoRA adapter under NAME (repeatable)",
    )
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
    launch.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="environment variable for the engine (repeatable); values of names like "
        "HF_TOKEN or *_API_KEY are masked when printed",
    )
    launch.add_argument(
        "--secret-env",
        action="append",
        default=[],
        metavar="NAME",
        help="also mask this --env variable's value when printed (repeatable)",
    )
    launch.add_argument(
        "--dry-run", action="store_true", help="print the command and environment, start nothing"
    )
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
        help="place the replicas on this Ray cluster ('head:6379', or 'auto'); needs unillm[ray]",
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
    launch.set_defaults(run=_launch, launch_parser=launch)

    check = sub.add_parser(
        "check",
        help="list every refusal a config would meet, start nothing",
        description="Check a unillm config against its engine's declared capabilities: every "
        "default, declared use and launch setting the engine would refuse, at once. "
        "Connects to nothing and starts nothing. Exit code 1 when something would be "
        "refused.",
    )
    check.add_argument("config", help="a .toml, .yaml or .yml unillm config")
    check.add_argument("--engine", help="check for this engine instead of the config's")
    check.add_argument(
        "--engine-version",
        metavar="VERSION",
        help="engine version to check against (default: the config's "
        "engine_version, else the newest the adapter knows)",
    )
    check.add_argument("--json", action="store_true", help="machine-readable output")
    check.set_defaults(run=_check)

    tiny = sub.add_parser(
        "tiny-model",
        help="build the tiny test model and print its paths",
        description="Build (once, cached, under a second) the tiny random-weight Llama with a "
        "locally trained tokenizer and two LoRA adapters, and print where it is. Its "
        "text is gibberish; constraints still hold. Needs unillm[testing].",
    )
    tiny.add_argument("--json", action="store_true", help="print {model, loras} as JSON")
    tiny.add_argument("--force", action="store_true", help="rebuild even if cached")
    tiny.add_argument(
        "--trained",
        action="store_true",
        help="the tiny *trained* Llama instead (sensible greedy answers and hermes tool "
        "calls; trained once in a few minutes, needs torch: the vLLM env has it)",
    )
    tiny.set_defaults(run=_tiny_model)
    _route_parser(sub)

    from unillm.batch.cli import add_batch_parser
    from unillm.bench.cli import add_bench_parser
    from unillm.deploy.cli import add_deploy_parser

    add_bench_parser(sub)
    add_batch_parser(sub)
    add_deploy_parser(sub)
    return parser


def _route_parser(sub: Any) -> None:
    route = sub.add_parser(
        "route",
        help="semantic routing: evaluate routes, import other routers' configs",
        description="Semantic routing tools: measure a [router] config on labelled prompts, or "
        "turn vLLM Semantic Router / LiteLLM auto-router configs into unillm routes.",
    )
    verbs = route.add_subparsers(required=True, metavar="VERB", help="eval | import")
    ev = verbs.add_parser(
        "eval",
        help="accuracy, confusion matrix and thresholds on a labelled JSONL",
        description="Route every labelled prompt once (embedding calls only, no generation) and "
        "print accuracy, the confusion matrix, a threshold suggestion per route and "
        "the time per decision.",
    )
    ev.add_argument("labelled", help='JSONL, one {"text": ..., "route": ...} per line')
    ev.add_argument("--config", required=True, help="unillm.toml (or .yaml) with a [router] table")
    ev.add_argument("--json", action="store_true", help="print the report as JSON")
    ev.set_defaults(run=_route_eval)
    imp = verbs.add_parser(
        "import",
        help="print unillm [router] TOML from another router's config",
        description="Print the routes that map as a unillm [router] table (TOML) on stdout; "
        "everything that does not map is listed on stderr.",
    )
    imp.add_argument(
        "kind",
        choices=["vsr", "litellm"],
        help="vsr: vLLM Semantic Router config.yaml; litellm: auto-router route JSON",
    )
    imp.add_argument("file", help="the file to import")
    imp.add_argument("--default-model", help="litellm: the auto_router_default_model")
    imp.set_defaults(run=_route_import)


def _route_eval(args: argparse.Namespace) -> int:
    import anyio

    from unillm.config.semantic import router_from_config
    from unillm.semantic.evaluation import evaluate, load_samples

    samples = load_samples(args.labelled)
    router = router_from_config(args.config)

    async def run() -> str:
        async with router:
            report = await evaluate(router, samples)
        return report.model_dump_json(indent=2) if args.json else report.markdown()

    print(anyio.run(run))
    return 0


def _route_import(args: argparse.Namespace) -> int:
    from pathlib import Path

    from unillm.config.files import load_yaml, read_text
    from unillm.errors import ConfigError
    from unillm.semantic.importers import from_litellm, from_vsr

    path = Path(args.file)
    text = read_text(path)
    try:
        if args.kind == "vsr":
            imported = from_vsr(load_yaml(text, str(path)))
        else:
            imported = from_litellm(json.loads(text), default_model=args.default_model)
    except json.JSONDecodeError as e:
        raise ConfigError(f"{path} is not JSON: {e}") from None
    except (KeyError, TypeError, AttributeError, ValueError) as e:  # a foreign file of the wrong shape
        if isinstance(e, UnillmError):
            raise
        kind = "vLLM Semantic Router config" if args.kind == "vsr" else "LiteLLM auto-router file"
        raise ConfigError(f"{path} is not a {kind} unillm can read ({type(e).__name__}: {e})") from None
    import tomli_w

    print(tomli_w.dumps(imported.to_config()), end="")
    for line in imported.unmapped:
        print(f"unillm: not imported: {line}", file=sys.stderr)
    return 0


def _pairs(items: list[str], what: str) -> dict[str, str]:
    from unillm.errors import InvalidOptions

    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise InvalidOptions(f"{what} needs KEY=VALUE, got {item!r}")
        out[key] = value
    return out


def _spec_settings(args: argparse.Namespace) -> dict[str, Any]:
    from unillm.adapter.launch_spec import Parallel, Speculative

    settings: dict[str, Any] = {"model": args.model}
    settings.update({k: getattr(args, k) for k in _SCALAR_FLAGS if getattr(args, k) is not None})
    if args.cpu:
        settings["cpu"] = True
    settings["parallel"] = Parallel(
        tensor=args.tensor_parallel,
        pipeline=args.pipeline_parallel,
        data=args.data_parallel,
        expert=args.expert_parallel,
    )
    if args.prefix_caching is not None:  # unset flags leave room for --cpu's recipe
        settings["prefix_caching"] = args.prefix_caching
    settings["lora"] = _pairs(args.lora, "--lora")
    settings["runtime_lora"] = args.runtime_lora
    settings["env"] = _pairs(args.env, "--env")
    if args.secret_env:
        settings["secret_env"] = args.secret_env
    if args.api_key is not None:
        settings["api_key"] = None if args.api_key == "none" else args.api_key
    if args.speculative:
        settings["speculative"] = Speculative(
            method=args.speculative, num_tokens=args.speculative_tokens, draft_model=args.draft_model
        )
    settings["extra_args"] = args.extra_args
    return settings


def _launch(args: argparse.Namespace) -> int:
    from pydantic import ValidationError

    from unillm.api import launch
    from unillm.errors import InvalidOptions

    if args.config is not None:
        return _launch_config(args)
    if args.engine is None or args.model is None:
        args.launch_parser.error("give an engine and --model, or --config FILE")
    try:
        settings = _spec_settings(args)
        fleet = _fleet_settings(args)
        ranks = _node_ranks(args, settings)
    except ValidationError as e:
        problems = validation_problems(e)
        raise InvalidOptions(f"invalid launch settings: {problems}") from None
    if args.dry_run:  # one command as is; several (nodes, replicas, router) each labelled
        for rank in ranks:
            if rank is not None:
                settings["nodes"] = settings["nodes"].model_copy(update={"rank": rank})
            commands = _commands(launch(args.engine, **fleet, **settings))
            for label, command in commands:
                labelled = len(commands) > 1 or len(ranks) > 1
                node = f", node {rank}" if rank is not None else ""
                _print_command(command, f"{label}{node}" if labelled else None)
        return 0
    if ranks != [None] and len(ranks) != 1:
        raise InvalidOptions("--nodes needs --node-rank R on each machine (or --dry-run to see all)")
    return _serve(launch(args.engine, **fleet, **settings))


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
    if args.dry_run:
        for label, command in _commands(run):
            _print_command(command, label)
        return 0
    return _serve(run)


def _print_command(command: LaunchCommand, heading: str | None) -> None:
    """One engine's command for --dry-run: its heading, notes (prerequisites, files), the line."""
    if heading is not None:
        print(f"# {heading}")
    for note in command.described():
        print(f"# {note}")
    print(command.render())


def _serve(run: Launch | FleetLaunch | RayLaunch) -> int:
    """Start ``run`` and serve until Ctrl-C or SIGTERM (the same clean teardown)."""
    import anyio

    def stop_on_sigterm(signum: int, frame: object) -> None:
        raise KeyboardInterrupt  # same clean teardown as Ctrl-C

    signal.signal(signal.SIGTERM, stop_on_sigterm)

    async def serve() -> None:
        async with run as llm:
            info = await llm.info()
            print(
                f"[unillm] {llm.engine} {info.version or ''} serving {info.model!r} at "
                f"{_where(run)} ({_key_note(run)}). Ctrl-C stops it.",
                file=sys.stderr,
            )
            await anyio.sleep_forever()

    anyio.run(serve)
    return 0


def _fleet_settings(args: argparse.Namespace) -> dict[str, Any]:
    from unillm.adapter.launch_spec import Disaggregation
    from unillm.errors import InvalidOptions

    out: dict[str, Any] = {}
    if args.replicas != 1:
        out["replicas"] = args.replicas
    if args.router:
        out["router"] = args.router
    if args.policy != "round_robin":
        out["policy"] = args.policy
    if args.ray:
        from unillm.launching.ray_plan import Ray

        out["cluster"] = Ray(args.ray, placement=args.ray_placement)
    if (args.prefill is None) != (args.decode is None):
        raise InvalidOptions("prefill/decode disaggregation needs both --prefill N and --decode N")
    if args.prefill is not None:
        out["disaggregation"] = Disaggregation(
            prefill=args.prefill, decode=args.decode, transfer=args.kv_transfer
        )
    return out


def _node_ranks(args: argparse.Namespace, settings: dict[str, Any]) -> list[int | None]:
    """The node ranks to render: [None] without --nodes, every rank for a dry run without one."""
    from unillm.adapter.launch_spec import Nodes
    from unillm.errors import InvalidOptions

    if args.nodes is None:
        if args.node_rank is not None or args.head_address:
            raise InvalidOptions("--node-rank and --head-address need --nodes N")
        return [None]
    if not args.head_address:
        raise InvalidOptions("--nodes needs --head-address HOST[:PORT] (the head node, rank 0)")
    settings["nodes"] = Nodes(count=args.nodes, rank=args.node_rank or 0, head=args.head_address)
    if args.node_rank is None and args.dry_run:
        return list(range(args.nodes))
    return [args.node_rank if args.node_rank is not None else 0]


def _commands(run: Launch | FleetLaunch | RayLaunch) -> list[tuple[str, LaunchCommand]]:
    from unillm.launching.supervisor import Launch

    if isinstance(run, Launch):
        return [(run.name, run.command())]
    return run.commands()


def _where(run: Launch | FleetLaunch | RayLaunch) -> str:
    from unillm.launching.ray_cluster import RayLaunch
    from unillm.launching.supervisor import Launch

    if isinstance(run, RayLaunch):
        nodes = ", ".join(f"{r.url} (node {r.node_ip}, log there: {r.log_path})" for r in run.ready)
        return f"Ray replicas {nodes}"
    logs = [run.log_path] if isinstance(run, Launch) else [x.log_path for x in run.launches]
    return f"{run.base_url}; log{'s' if len(logs) > 1 else ''}: {', '.join(map(str, logs))}"


def _key_note(run: Launch | FleetLaunch | RayLaunch) -> str:
    """Where a generated API key can be read (never printed): a 0600 file beside the log."""
    import tempfile
    from pathlib import Path

    from unillm.launching.ray_cluster import RayLaunch
    from unillm.launching.supervisor import Launch

    key = run.spec.key()
    if key is None:
        return "no API key"
    if isinstance(run, RayLaunch):  # the engines' logs are on their nodes
        log = Path(tempfile.gettempdir()) / f"{run.actor_names[0].rsplit('-', 1)[0]}.log"
    else:
        log = run.log_path if isinstance(run, Launch) else run.launches[-1].log_path
    path = log.with_suffix(".key")
    path.touch(mode=0o600)
    path.chmod(0o600)
    path.write_text(key + "\n")
    return f"API key in {path}"


def _setup(args: argparse.Namespace) -> int:
    from unillm.launching.envs import setup_engine

    setup_engine(args.engine, gpu=args.gpu, pip_args=args.pip_arg)
    return 0


def _check(args: argparse.Namespace) -> int:
    from unillm.config.check import check_config

    overrides = {"engine": args.engine} if args.engine else {}
    report = check_config(args.config, version=args.engine_version, **overrides)
    print(report.model_dump_json(indent=2) if args.json else report.render())
    return 0 if report.ok else 1


def _tiny_model(args: argparse.Namespace) -> int:
    from unillm.errors import InvalidOptions
    from unillm.testing.tiny_model import build_tiny_model
    from unillm.testing.trained_model import build_trained_model

    try:
        tiny = build_trained_model(force=args.force) if args.trained else build_tiny_model(force=args.force)
    except RuntimeError as e:
        raise InvalidOptions(str(e)) from None
    except ImportError as e:
        raise InvalidOptions(
            f"the tiny model needs numpy, tokenizers and safetensors ({e}): pip install 'unillm[testing]'"
        ) from None
    if args.json:
        print(
            json.dumps(
                {"model": str(tiny.path), "loras": {name: str(path) for name, path in tiny.loras.items()}},
                indent=2,
            )
        )
        return 0
    print(f"model: {tiny.path}")
    for name, path in tiny.loras.items():
        print(f"lora {name}: {path}")
    print(f"\ntry: unillm launch vllm --cpu --model {tiny.path} --lora sql={tiny.loras['sql']}")
    return 0


def _engines(args: argparse.Namespace) -> int:
    from unillm.adapter.registry import get_adapter, installed_engines
    from unillm.capabilities import Feature

    names = installed_engines()
    columns = []  # (json key, column label, capabilities): one per engine mode (e.g. MLX in-process)
    for n in names:
        adapter = get_adapter(n)
        for i, (label, version) in enumerate(adapter.modes().items()):
            columns.append((n if i == 0 else f"{n} ({label})", label, adapter.capabilities(version)))
    if args.json:
        print(
            json.dumps(
                {key: {f.value: c.support(f).model_dump() for f in Feature} for key, _, c in columns},
                indent=2,
            )
        )
        return 0
    if not names:
        print("no unillm adapters installed (pip install 'unillm[vllm]')")
        return 0
    marks = {"native": "yes", "emulated": "unillm", "no": "-"}
    width = max(len(f.value) for f in Feature)
    print("feature".ljust(width), *(label.ljust(max(8, len(label))) for _, label, _ in columns))
    for f in Feature:
        print(
            f.value.ljust(width),
            *(marks[c.support(f).level].ljust(max(8, len(label))) for _, label, c in columns),
        )
    print("\nyes = the engine does it; unillm = unillm provides it; - = refused before sending")
    return 0


if __name__ == "__main__":
    sys.exit(main())
