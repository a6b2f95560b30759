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
import sys
from collections.abc import Sequence
from types import ModuleType

from unillm.cli import check, engines, launch, new_adapter, probe, route, setup, tiny_model
from unillm.cli.names import engine_names
from unillm.errors import UnillmError

_EXAMPLES = """\

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
  unillm new-adapter lmdeploy                 a new engine's adapter package, tests included
  unillm probe --engine vllm --url URL         which options the running engine honours, by effect
"""

# Each module holds its subcommand's HELP, DESCRIPTION and add_arguments (which sets its handler).
_SUBCOMMANDS: dict[str, ModuleType] = {
    "engines": engines,
    "probe": probe,
    "setup": setup,
    "launch": launch,
    "check": check,
    "tiny-model": tiny_model,
    "route": route,
    "new-adapter": new_adapter,
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
    """The ``unillm`` parser: each subcommand's module registers its parser and handler."""
    from unillm.batch.cli import add_batch_parser
    from unillm.bench.cli import add_bench_parser
    from unillm.deploy.cli import add_deploy_parser

    parser = argparse.ArgumentParser(
        prog="unillm",
        description=f"One command line for {engine_names()}: install, launch, check a config.\n\n"
        + _EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(required=True, metavar="COMMAND")
    for name, module in _SUBCOMMANDS.items():
        module.add_arguments(sub.add_parser(name, help=module.HELP, description=module.DESCRIPTION))
    add_bench_parser(sub)
    add_batch_parser(sub)
    add_deploy_parser(sub)
    return parser


if __name__ == "__main__":
    sys.exit(main())
