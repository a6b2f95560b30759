"""``unillm launch``'s flags turned into launch settings (a ``LaunchSpec``'s, a fleet's, the nodes')."""

from __future__ import annotations

import argparse
from typing import Any

SCALAR_FLAGS = {
    "served_name": "name the engine serves the model under (default: the model path)",
    "host": "address to bind (default 127.0.0.1)",
    "port": "port to listen on (default: a free one)",
    "dtype": "weights and activations dtype, e.g. bfloat16 (default: the engine's)",
    "max_model_len": "longest context in tokens (default: the model's, or what fits with --cpu)",
    "max_num_seqs": "most sequences decoded at once",
    "max_queued_requests": "most requests held before the engine answers 503 (vLLM, SGLang)",
    "scheduling": "fcfs, or priority: serve requests by their priority=, lower first (vLLM, SGLang)",
    "memory_fraction": "fraction of accelerator memory the engine may take (0-1]",
    "quantization": "quantization method, e.g. awq, fp8",
    "max_lora_rank": "highest LoRA rank to reserve room for",
    "max_loras": "most LoRA adapters in one batch",
    "python": "interpreter of the env the engine is installed in (default: its managed env)",
    "ready_timeout": "seconds to wait until the engine answers (default 900)",
}


def spec_settings(args: argparse.Namespace) -> dict[str, Any]:
    """The ``LaunchSpec`` settings the launch flags give (unset flags are left out)."""
    from unillm.adapter.launch_spec import Parallel, Speculative
    from unillm.config.pairs import pairs

    settings: dict[str, Any] = {"model": args.model}
    settings.update({k: getattr(args, k) for k in SCALAR_FLAGS if getattr(args, k) is not None})
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
    if args.cpus is not None:
        settings["cpus"] = core_list(args.cpus)
    settings["lora"] = pairs(args.lora, "--lora")
    settings["runtime_lora"] = args.runtime_lora
    settings["env"] = pairs(args.env, "--env")
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


def core_list(text: str) -> list[int]:
    """``--cpus``'s cores: ``"0-3,6"`` -> ``[0, 1, 2, 3, 6]``.

    Args:
        text: Comma-separated core numbers and inclusive ranges.

    Returns:
        The cores, in the order given.

    Raises:
        InvalidOptions: A part that is not a number or a low-high range.
    """
    from unillm.errors import InvalidOptions

    cores: list[int] = []
    for part in text.split(","):
        low, _, high = part.strip().partition("-")
        if not low.isdigit() or (high and not high.isdigit()) or (high and int(high) < int(low)):
            raise InvalidOptions(f"--cpus {text!r}: give core numbers and ranges, e.g. 0-3,6")
        cores.extend(range(int(low), int(high or low) + 1))
    return cores


def fleet_settings(args: argparse.Namespace) -> dict[str, Any]:
    """The fleet settings (replicas, router, policy, Ray, prefill/decode) the flags give."""
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


def node_ranks(args: argparse.Namespace, settings: dict[str, Any]) -> list[int | None]:
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
