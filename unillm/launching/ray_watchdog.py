"""Stop a Ray actor's engines when the actor dies: ``python -m unillm.launching.ray_watchdog PID``.

A replica's actor starts its engine in a process group of its own (the supervisor's
``start_new_session``). Ray kills an actor with SIGKILL (``ray.kill``, a lost node's worker), so
nothing in the actor runs to stop the engine, and the engine's parent-death signal reaches only
its first process, not the engine's own workers (and Ray kills a dead worker's children with it,
the engine's first process included, leaving its workers behind). This watchdog, started by the
actor as no child of its own (:func:`start_detached`), notes every process group the actor starts
and, once the actor is gone, sends each SIGTERM, then SIGKILL, and exits.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time

import psutil

POLL = 0.5  # seconds between looks at the actor's children
GRACE = 10.0  # seconds between SIGTERM and SIGKILL


def engine_groups(actor: psutil.Process) -> set[int]:
    """The process groups the actor leads through its children: each child that leads its own group.

    Args:
        actor: The actor's process.

    Returns:
        The process group ids (each the id of the engine process that leads it).
    """
    groups = set()
    for child in actor.children():
        with contextlib.suppress(psutil.Error, ProcessLookupError):
            if child.pid != os.getpid() and os.getpgid(child.pid) == child.pid:
                groups.add(child.pid)
    return groups


def group_alive(pgid: int) -> bool:
    """Whether a process of group ``pgid`` is left that is not a zombie.

    Args:
        pgid: The process group id.
    """
    for process in psutil.process_iter(["status"]):
        with contextlib.suppress(psutil.Error, ProcessLookupError):
            if os.getpgid(process.pid) == pgid and process.info["status"] != psutil.STATUS_ZOMBIE:
                return True
    return False


def stop_groups(groups: set[int], grace: float = GRACE) -> None:
    """SIGTERM every group, wait up to ``grace`` s for them to go, then SIGKILL what is left.

    Args:
        groups: Process group ids.
        grace: Seconds to wait between SIGTERM and SIGKILL.
    """
    for sig in (signal.SIGTERM, signal.SIGKILL):
        left = {g for g in groups if group_alive(g)}
        for pgid in left:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pgid, sig)
        deadline = time.monotonic() + grace
        while any(group_alive(g) for g in left) and time.monotonic() < deadline:
            time.sleep(0.2)


def watch(actor_pid: int) -> None:
    """Note the actor's engine groups while it lives; stop them once it is gone.

    Args:
        actor_pid: The actor's process id.
    """
    groups: set[int] = set()
    try:
        actor = psutil.Process(actor_pid)
        while actor.is_running() and actor.status() != psutil.STATUS_ZOMBIE:
            groups |= engine_groups(actor)
            time.sleep(POLL)
    except psutil.Error:
        pass
    stop_groups(groups)


def start_detached(actor_pid: int) -> None:
    """Start a watchdog of ``actor_pid`` that is no child of it (Ray kills a dead worker's children).

    Args:
        actor_pid: The actor's process id.
    """
    middle = subprocess.Popen(
        [sys.executable, "-m", "unillm.launching.ray_watchdog", "--detach", str(actor_pid)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    middle.wait()  # it starts the watchdog and exits at once: the watchdog is then init's child


if __name__ == "__main__":
    if sys.argv[1] == "--detach":
        subprocess.Popen(
            [sys.executable, "-m", "unillm.launching.ray_watchdog", sys.argv[2]],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
    else:
        watch(int(sys.argv[1]))
