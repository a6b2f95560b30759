"""``unillm route``: evaluate semantic routes, import other routers' configs."""

from __future__ import annotations

import argparse
import json
import sys

from unillm.errors import UnillmError

HELP = "semantic routing: evaluate routes, import other routers' configs"
DESCRIPTION = (
    "Semantic routing tools: measure a [router] config on labelled prompts, or "
    "turn vLLM Semantic Router / LiteLLM auto-router configs into unillm routes."
)


def add_arguments(route: argparse.ArgumentParser) -> None:
    """Add the arguments (and the handler) of ``unillm route`` to its parser."""
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
    ev.set_defaults(run=run_eval)
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
    imp.set_defaults(run=run_import)


def run_eval(args: argparse.Namespace) -> int:
    """Route every labelled prompt once and print the report."""
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


def run_import(args: argparse.Namespace) -> int:
    """Print the imported routes as TOML; what does not map goes to stderr."""
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
