"""A two-node Ray cluster on this machine, for tests and benchmarks (needs the ``ray`` extra).

    with local_cluster() as cluster:
        where = unillm.Ray(cluster.address, placement="STRICT_SPREAD", host="127.0.0.1")

Head and worker each get one CPU on 127.0.0.1 and run on a core of their own (the first and the
last this process may use: every process of the node, a vLLM replica's included, inherits it, so
each replica's thread pool is one thread, not one per core spinning against the other's); each
node's ``ray start`` runs in a process group of its own, which
:func:`~unillm.launching.ray_watchdog.stop_groups` stops at the end (killing the worker's group
is how the node-kill test and benchmark take a node down).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from unillm.errors import LaunchError
from unillm.launching.ports import free_port
from unillm.launching.ray_watchdog import stop_groups

__all__ = ["NODE_START", "LocalCluster", "local_cluster"]

#: Seconds one ``ray start`` may take.
NODE_START = 60


@dataclass
class LocalCluster:
    """A running local cluster: its address, each node's process group and temp folder."""

    address: str
    groups: dict[str, int]  # "head" / "worker" -> the process group of that node's `ray start`
    temp: dict[str, str]  # "head" / "worker" -> that node's --temp-dir (its socket paths start so)


@contextlib.contextmanager
def local_cluster() -> Iterator[LocalCluster]:
    """Start the head and a worker node; stop both (by process group) when the block ends.

    Returns:
        A context manager yielding the :class:`LocalCluster`.

    Raises:
        LaunchError: A ``ray start`` failed or took longer than :data:`NODE_START` seconds.
    """
    port = free_port()
    common = ["--num-cpus=1", "--node-ip-address=127.0.0.1", "--disable-usage-stats"]
    common.append("--object-store-memory=100000000")
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}  # PYTHONPATH included: the actors import unillm
    groups: dict[str, int] = {}
    with tempfile.TemporaryDirectory(prefix="unillm-ray-") as tmp:  # short: Ray's socket paths
        temp = {"head": f"{tmp}/head", "worker": f"{tmp}/worker"}
        try:
            head = ["--head", f"--port={port}", "--include-dashboard=false", f"--temp-dir={temp['head']}"]
            cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
            groups["head"] = _ray_start([*head, *common], env, cores[:1])
            worker = [f"--address=127.0.0.1:{port}", f"--temp-dir={temp['worker']}"]
            groups["worker"] = _ray_start([*worker, *common], env, cores[-1:])
            yield LocalCluster(f"127.0.0.1:{port}", groups, temp)
        finally:
            stop_groups(set(groups.values()))


def _ray_start(args: list[str], env: dict[str, str], cores: list[int]) -> int:
    """Run one ``ray start`` in a process group of its own (its node's processes stay in it),
    on ``cores`` (none given: every core)."""
    command = [str(Path(sys.executable).with_name("ray")), "start", *args]
    pin = frozenset(cores)
    process = subprocess.Popen(
        command,
        env=env,
        start_new_session=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        preexec_fn=(lambda: os.sched_setaffinity(0, pin)) if pin else None,
    )
    try:
        out, _ = process.communicate(timeout=NODE_START)
    except subprocess.TimeoutExpired:
        stop_groups({process.pid})
        raise LaunchError(
            f"ray start took over {NODE_START} s", command=" ".join(command), log_tail=[]
        ) from None
    if process.returncode != 0:
        tail = out.decode(errors="replace").splitlines()[-20:]
        raise LaunchError("ray start failed", command=" ".join(command), log_tail=tail)
    return process.pid
