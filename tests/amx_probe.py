"""Whether this process may use AMX tiles: Linux's ``arch_prctl(ARCH_GET_XCOMP_PERM)``."""

from __future__ import annotations

import ctypes
import platform
import sys

XFEATURE_XTILEDATA = 18


def amx_permitted() -> bool:
    """True when Linux has granted this process the AMX tile state (never on a CPU without AMX)."""
    if not sys.platform.startswith("linux") or platform.machine() != "x86_64":
        return False
    mask = ctypes.c_uint64(0)
    sys_arch_prctl, arch_get_xcomp_perm = 158, 0x1022
    if ctypes.CDLL(None, use_errno=True).syscall(sys_arch_prctl, arch_get_xcomp_perm, ctypes.byref(mask)):
        return False
    return bool(mask.value >> XFEATURE_XTILEDATA & 1)
