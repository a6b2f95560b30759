"""Launch settings into the in-process worker's vLLM engine flags (pure), refusing the rest.

The worker takes vLLM's engine flags (``EngineArgs``), not the server's: the flags come from
the same :func:`unillm_vllm.launch.command` as a server launch, minus the server's own
(address, tool and reasoning parsers, LoRA names, API key). Settings that need the server or
several processes are refused before anything starts.
"""

from __future__ import annotations

from unillm.adapter import InvalidOptions, LaunchSpec
from unillm_vllm import launch

__all__ = ["refuse", "worker_argv", "worker_env"]

#: Server flags with a value, dropped from the worker's flags (the worker serves no HTTP).
_SERVER_VALUED = frozenset({"--host", "--port", "--tool-call-parser", "--reasoning-parser"})
_SERVER_SWITCHES = frozenset({"--enable-auto-tool-choice", "--enable-prompt-tokens-details"})
_SERVER_ENV = frozenset({"VLLM_API_KEY"})
_HINT = "launch vLLM as a server for it (drop in_process / --in-process)"


def refuse(spec: LaunchSpec) -> None:
    """Refuse launch settings the in-process worker cannot honour, before anything starts.

    Args:
        spec: The resolved launch settings.

    Raises:
        InvalidOptions: Embeddings, LoRA, several nodes, a Ray cluster, P/D disaggregation,
            a container prefix, or a reasoning parser (the worker parses no thoughts).
    """
    problems = {
        "task='embed'": spec.task == "embed",
        "lora=": bool(spec.lora) or spec.runtime_lora,
        "nodes=": spec.nodes is not None,
        "ray_address=": spec.ray_address is not None,
        "pd=": spec.pd is not None,
        "prefix=": bool(spec.prefix),
        f"reasoning_parser={spec.reasoning_parser!r}": spec.thinking_parser() is not None,
    }
    found = [name for name, bad in problems.items() if bad]
    if found:
        raise InvalidOptions(
            f"in-process vLLM runs one engine that generates text only, without {', '.join(found)}: "
            f"{_HINT}" + (", or pass reasoning_parser='none'" if spec.thinking_parser() else "")
        )


def worker_argv(spec: LaunchSpec) -> list[str]:
    """vLLM engine flags for ``spec``: the server command's, without the server's own.

    Args:
        spec: The resolved launch settings.
    """
    argv = launch.command(spec).argv
    start = argv.index("--model")
    out: list[str] = []
    skip = False
    for arg in argv[start:]:
        if skip:
            skip = False
        elif arg in _SERVER_VALUED:
            skip = True
        elif arg.split("=", 1)[0] in _SERVER_VALUED or arg in _SERVER_SWITCHES:
            continue
        else:
            out.append(arg)
    return out


def worker_env(spec: LaunchSpec) -> dict[str, str]:
    """The variables the worker adds to the environment: the spec's and the command's, no API key."""
    env = {**spec.env, **launch.command(spec).env}
    return {k: v for k, v in env.items() if k not in _SERVER_ENV}
