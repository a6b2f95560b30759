"""Parse unillm's vLLM launch argv with vLLM's own server argument parser.

Runs INSIDE the vLLM env (``unillm setup vllm``), so it imports vLLM itself; nothing starts and
no model loads. Checks (through :mod:`unillm.testing.verdicts`)
``{"name": {"argv": [...], "expect": {attr: value}}}`` as JSON on stdin (argv without the
interpreter, ``-m`` and module, nor ``serve``) and prints
``{"name": "ok" | "<why it was rejected>"}``.

Each argv goes through ``make_arg_parser`` (the flags of ``vllm serve`` and of the OpenAI
server module), ``validate_parsed_serve_args`` and ``AsyncEngineArgs.from_cli_args`` (which
builds typed configs such as ``KVTransferConfig`` from their JSON). ``expect`` keys are engine
argument attributes, dotted into configs (``kv_transfer_config.kv_role``), or ``ns.<name>`` for
server-only flags (``ns.headless``).
"""

from __future__ import annotations

from typing import Any


def check(case: dict[str, Any]) -> None:
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.entrypoints.launchers.cli_args import make_arg_parser, validate_parsed_serve_args
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = make_arg_parser(FlexibleArgumentParser(prog="vllm serve"))
    ns = parser.parse_args(case["argv"])
    validate_parsed_serve_args(ns)
    args = AsyncEngineArgs.from_cli_args(ns)
    for attr, want in case.get("expect", {}).items():
        obj: Any = ns if attr.startswith("ns.") else args
        for part in attr.removeprefix("ns.").split("."):
            obj = obj[part] if isinstance(obj, dict) else getattr(obj, part)
        if obj != want and str(obj) != str(want):
            raise ValueError(f"{attr}={obj!r}, expected {want!r}")
