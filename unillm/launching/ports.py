"""Free TCP ports for the engines unillm starts, chosen where no outgoing connection can take them.

A port found free (bound, then released) can be taken before the engine binds it. Any port in
the kernel's ephemeral range (``net.ipv4.ip_local_port_range``) can go to the local end of an
outgoing connection at any moment, from any process; a port below that range is only taken by
a program that asks for it. So unillm picks from below the range, and falls back to a port the
kernel hands out only where that range leaves no room.
"""

from __future__ import annotations

import random
import socket
from pathlib import Path

#: The lowest port unillm picks at random: above the well-known and most registered services.
LOWEST = 20000
#: Where Linux keeps the ephemeral range; elsewhere the IANA range (49152-65535) is assumed.
_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
_TRIES = 64


def ephemeral_low(range_file: Path = _RANGE_FILE) -> int:
    """The first port of the kernel's ephemeral range (49152, IANA's, where it cannot be read)."""
    try:
        return int(range_file.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 49152


def free_port(host: str = "127.0.0.1", *, range_file: Path = _RANGE_FILE) -> int:
    """A TCP port free on ``host`` right now, below the ephemeral range where there is room.

    Args:
        host: The address the engine will bind.
        range_file: Where the kernel's ephemeral range is read (a test points it elsewhere).

    Returns:
        A port number that nothing listens on or is connected from at this moment.
    """
    high = ephemeral_low(range_file)
    if high - LOWEST >= _TRIES:
        for port in random.sample(range(LOWEST, high), _TRIES):
            if _bindable(host, port):
                return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def _bindable(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True
