"""Run at start-up by every Python process of an engine unillm launches (its folder is put first
on the engine's PYTHONPATH): ask Linux for the AMX tile state, then hand over to the
``sitecustomize`` this one shadows, if there is one.

Linux gives a process the AMX tile registers only after it asks (``arch_prctl`` with
``ARCH_REQ_XCOMP_PERM``); the permission is per process and lost across ``exec``, so an engine's
spawned workers each need it. Without it, an AMX kernel (vLLM-CPU's bfloat16 attention) dies of
SIGILL on its first request. On a CPU or kernel without AMX the request fails and nothing changes.
"""

from __future__ import annotations

import sys


def _request_amx() -> None:
    if not sys.platform.startswith("linux"):
        return
    import platform

    if platform.machine() not in ("x86_64", "AMD64"):
        return
    import ctypes

    sys_arch_prctl, arch_req_xcomp_perm, xfeature_xtiledata = 158, 0x1023, 18
    try:
        ctypes.CDLL(None, use_errno=True).syscall(sys_arch_prctl, arch_req_xcomp_perm, xfeature_xtiledata)
    except (OSError, AttributeError):  # no libc symbol: nothing to ask
        return


def _chain() -> None:
    """Import the next ``sitecustomize`` on sys.path (the environment's own), as Python would have."""
    import importlib
    import os

    here = os.path.dirname(os.path.abspath(__file__))
    mine = sys.modules.pop(__name__, None)
    saved = sys.path[:]
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
    try:
        importlib.import_module("sitecustomize")
    except ModuleNotFoundError as e:
        if e.name != "sitecustomize":
            raise
        if mine is not None:
            sys.modules[__name__] = mine
    finally:
        sys.path[:] = saved


_request_amx()
_chain()
