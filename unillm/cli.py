"""The ``unillm`` command.

    unillm engines                              # capability table of every installed adapter
    unillm setup vllm                           # install an engine into its own venv
    unillm launch vllm --model M --dry-run      # print the exact command (secrets masked)
    unillm launch vllm --model M --max-model-len 512 --lora sql=/adapters/sql -- --enforce-eager
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from unillm.errors import UnillmError

if TYPE_CHECKING:
    from unillm.supervisor import Launch

_SCALAR_FLAGS = ("served_name", "host", "port", "dtype", "max_model_len", "max_num_seqs",
                 "memory_fraction", "quantization", "max_lora_rank", "max_loras", "python",
                 "ready_timeout")


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``unillm`` console script."""
    argv = list(sys.argv[1:] if argv is None else argv)
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
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
    from unillm.launch_spec import LaunchSpec

    parser = argparse.ArgumentParser(prog="unillm", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(required=True, metavar="COMMAND")

    engines = sub.add_parser("engines", help="capability table of the installed adapters")
    engines.add_argument("--json", action="store_true", help="machine-readable output")
    engines.set_defaults(run=_engines)

    setup = sub.add_parser("setup", help="install an engine into its own managed venv")
    setup.add_argument("engine")
    setup.add_argument("--gpu", action=argparse.BooleanOptionalAction, default=None,
                       help="force the GPU (or CPU) build; default: detect")
    setup.add_argument("--pip-arg", action="append", default=[],
                       help="extra pip argument (e.g. an index for CPU torch wheels)")
    setup.set_defaults(run=_setup)

    launch = sub.add_parser("launch", help="start an engine and serve until Ctrl-C")
    launch.add_argument("engine")
    launch.add_argument("--model", required=True)
    fields = LaunchSpec.model_fields
    for name in _SCALAR_FLAGS:
        launch.add_argument("--" + name.replace("_", "-"), dest=name,
                            help=fields[name].description)
    launch.add_argument("--tensor-parallel", type=int, default=1)
    launch.add_argument("--pipeline-parallel", type=int, default=1)
    launch.add_argument("--data-parallel", type=int, default=1)
    launch.add_argument("--expert-parallel", action="store_true")
    launch.add_argument("--prefix-caching", action=argparse.BooleanOptionalAction, default=None)
    launch.add_argument("--lora", action="append", default=[], metavar="NAME=PATH")
    launch.add_argument("--runtime-lora", action="store_true",
                        help="allow loading adapters at runtime")
    launch.add_argument("--speculative", metavar="METHOD",
                        help="ngram | draft | eagle | eagle3 | mtp | suffix")
    launch.add_argument("--speculative-tokens", type=int, default=4)
    launch.add_argument("--draft-model")
    launch.add_argument("--api-key", default="auto",
                        help="'auto' (generated, default), 'none', or a key")
    launch.add_argument("--env", action="append", default=[], metavar="KEY=VALUE")
    launch.add_argument("--dry-run", action="store_true",
                        help="print the command and environment, start nothing")
    launch.set_defaults(run=_launch)
    return parser


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
    from unillm.launch_spec import Parallel, Speculative

    settings: dict[str, Any] = {"model": args.model}
    settings.update({k: getattr(args, k) for k in _SCALAR_FLAGS if getattr(args, k) is not None})
    settings["parallel"] = Parallel(tensor=args.tensor_parallel, pipeline=args.pipeline_parallel,
                                    data=args.data_parallel, expert=args.expert_parallel)
    settings["prefix_caching"] = args.prefix_caching
    settings["lora"] = _pairs(args.lora, "--lora")
    settings["runtime_lora"] = args.runtime_lora
    settings["env"] = _pairs(args.env, "--env")
    settings["api_key"] = None if args.api_key == "none" else args.api_key
    if args.speculative:
        settings["speculative"] = Speculative(method=args.speculative,
                                              num_tokens=args.speculative_tokens,
                                              draft_model=args.draft_model)
    settings["extra_args"] = args.extra_args
    return settings


def _launch(args: argparse.Namespace) -> int:
    import anyio
    from pydantic import ValidationError

    from unillm.entrypoints import launch
    from unillm.errors import InvalidOptions

    try:
        settings = _spec_settings(args)
    except ValidationError as e:
        problems = "; ".join(f"{'.'.join(map(str, x['loc']))}: {x['msg']}" for x in e.errors())
        raise InvalidOptions(f"invalid launch settings: {problems}") from None
    run = launch(args.engine, **settings)
    if args.dry_run:
        print(run.command().render())
        return 0

    def stop_on_sigterm(signum: int, frame: object) -> None:
        raise KeyboardInterrupt  # same clean teardown as Ctrl-C

    signal.signal(signal.SIGTERM, stop_on_sigterm)

    async def serve() -> None:
        async with run as llm:
            info = await llm.info()
            print(f"[unillm] {llm.engine} {info.version or ''} serving {info.model!r} at "
                  f"{run.base_url} ({_key_note(run)}; log: {run.log_path}). Ctrl-C stops it.",
                  file=sys.stderr)
            await anyio.sleep_forever()

    anyio.run(serve)
    return 0


def _key_note(run: Launch) -> str:
    """Where a generated API key can be read (never printed): a 0600 file beside the log."""
    key = run.spec.key()
    if key is None:
        return "no API key"
    path = run.log_path.with_suffix(".key")
    path.touch(mode=0o600)
    path.chmod(0o600)
    path.write_text(key + "\n")
    return f"API key in {path}"


def _setup(args: argparse.Namespace) -> int:
    from unillm.engine_env import setup_engine

    setup_engine(args.engine, gpu=args.gpu, pip_args=args.pip_arg)
    return 0


def _engines(args: argparse.Namespace) -> int:
    from unillm.adapter import get_adapter, installed_engines
    from unillm.capabilities import Feature

    names = installed_engines()
    columns = []  # (json key, column label, capabilities): one per engine mode (e.g. MLX in-process)
    for n in names:
        adapter = get_adapter(n)
        for i, (label, version) in enumerate(adapter.modes().items()):
            columns.append((n if i == 0 else f"{n} ({label})", label, adapter.capabilities(version)))
    if args.json:
        print(json.dumps({key: {f.value: c.support(f).model_dump() for f in Feature}
                          for key, _, c in columns}, indent=2))
        return 0
    if not names:
        print("no unillm adapters installed (pip install 'unillm[vllm]')")
        return 0
    marks = {"native": "yes", "emulated": "unillm", "no": "-"}
    width = max(len(f.value) for f in Feature)
    print("feature".ljust(width), *(label.ljust(max(8, len(label))) for _, label, _ in columns))
    for f in Feature:
        print(f.value.ljust(width),
              *(marks[c.support(f).level].ljust(max(8, len(label))) for _, label, c in columns))
    print("\nyes = the engine does it; unillm = unillm provides it; - = refused before sending")
    return 0


if __name__ == "__main__":
    sys.exit(main())
