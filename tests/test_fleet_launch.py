"""Launching fleets: replicas, a router in front, prefill/decode workers (unillm.launching.fleet_launch).

Rendering is checked with plain data; supervision with stand-in engines (unillm.testing.fake_engine)
that serve the vLLM look-alike, so no model loads. Real replicas: tests/integration/test_fleets.py.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
from pathlib import Path
from typing import Any

import pytest
from launch_helpers import alive

import unillm
from unillm.adapter.launch_spec import Disaggregation, LaunchSpec, Nodes
from unillm.errors import InvalidOptions, LaunchError, UnsupportedFeature
from unillm.launching.fleet_launch import FleetLaunch, split_cpus
from unillm.launching.ports import free_port
from unillm.launching.supervisor import Launch
from unillm.testing import fake_engine

pytestmark = pytest.mark.anyio


def spec(**kw: object) -> LaunchSpec:
    return LaunchSpec(**{"model": "M", "python": "py", **kw})


def value(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


def two_free_ports() -> int:
    """A port P with P and P+1 free right now (below the ephemeral range, as unillm picks)."""
    for _ in range(50):
        port = free_port()
        with socket.socket() as probe, contextlib.suppress(OSError):
            probe.bind(("127.0.0.1", port + 1))
            return port
    raise RuntimeError("no two consecutive free ports")


def test_launch_gives_a_fleet_launch_only_for_fleet_settings() -> None:
    assert isinstance(unillm.launch("vllm", model="M", python="py"), Launch)
    assert isinstance(unillm.launch("vllm", model="M", python="py", replicas=2), FleetLaunch)


def test_replicas_get_their_own_ports_and_logs_and_one_shared_key() -> None:
    run = FleetLaunch("vllm", spec(), replicas=3, progress=None)
    commands = [c for _, c in run.commands()]
    ports = {value(c.argv, "--port") for c in commands}
    assert len(ports) == 3 and len({e.log_path for e in run.engines}) == 3
    keys = {c.env["VLLM_API_KEY"] for c in commands}
    assert len(keys) == 1 and keys == {run.spec.key()}
    assert [label for label, _ in run.commands()] == ["vllm replica 0", "vllm replica 1", "vllm replica 2"]


def test_a_given_port_numbers_the_replicas_from_it() -> None:
    run = FleetLaunch("vllm", spec(port=9000), replicas=2, progress=None)
    assert [e.base_url for e in run.engines] == ["http://127.0.0.1:9000", "http://127.0.0.1:9001"]


def test_a_router_is_put_in_front_of_every_replica_and_clients_go_to_it() -> None:
    run = FleetLaunch(
        "vllm",
        spec(port=7000),
        replicas=2,
        router="smg",
        policy="prefix",
        router_python="/smg/bin/python",
        progress=None,
    )
    label, router = run.commands()[-1]
    assert label == "smg"
    i = router.argv.index("--worker-urls")
    assert router.argv[i + 1 : i + 3] == [e.base_url for e in run.engines]
    assert value(router.argv, "--policy") == "prefix_hash"
    assert value(router.argv, "--port") == "7000" and run.base_url == "http://127.0.0.1:7000"
    assert f"--api-key={run.spec.key()}" in router.argv
    assert "7000" not in {value(e.command().argv, "--port") for e in run.engines}


def test_a_router_without_the_policy_is_refused_before_anything_starts() -> None:
    with pytest.raises(UnsupportedFeature, match="least_load"):
        FleetLaunch("vllm", spec(), replicas=2, router="vllm-router", policy="least_load")


@pytest.mark.parametrize(("transfer", "bootstrap"), [("nixl", False), ("mooncake", True)])
def test_pd_fleet_renders_roles_unique_transfer_ports_and_the_routers_pd_flags(
    transfer: str, bootstrap: bool
) -> None:
    pd = Disaggregation(prefill=2, decode=1, transfer=transfer)
    run = FleetLaunch(
        "vllm", spec(), router="vllm-router", disaggregation=pd, router_python="/r/bin/python", progress=None
    )
    labels = [label for label, _ in run.commands()]
    assert labels == ["vllm prefill 0", "vllm prefill 1", "vllm decode 0", "vllm-router"]
    env = {"nixl": "VLLM_NIXL_SIDE_CHANNEL_PORT", "mooncake": "VLLM_MOONCAKE_BOOTSTRAP_PORT"}[transfer]
    ports = [e.command().env.get(env) for e in run.engines]
    prefill_ports = ports[:2]
    assert None not in prefill_ports and len(set(prefill_ports)) == 2
    assert (ports[2] is None) == bootstrap  # NIXL: every worker has a side channel
    router = run.commands()[-1][1].argv
    assert "--vllm-pd-disaggregation" in router and value(router, "--kv-connector") == transfer
    first = router.index("--prefill")
    expected = [run.engines[0].base_url, *([prefill_ports[0]] if bootstrap else [])]
    assert router[first + 1 : first + 1 + len(expected)] == expected
    assert value(router, "--decode") == run.engines[2].base_url


async def test_pd_is_refused_on_a_machine_without_gpu_and_nothing_starts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("unillm.launching.envs.has_gpu", lambda: False)
    run = FleetLaunch(
        "vllm",
        spec(),
        router="smg",
        disaggregation=Disaggregation(),
        router_python="/r/bin/python",
        progress=None,
    )
    with pytest.raises(UnsupportedFeature, match="no NVIDIA driver"):
        async with run:
            pass
    assert all(launch.pid is None for launch in run.launches)


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"disaggregation": Disaggregation()}, "needs a router"),
        ({"disaggregation": Disaggregation(), "replicas": 2, "router": "smg"}, "not both"),
        ({"replicas": 0}, "at least 1"),
    ],
)
def test_contradictory_fleet_settings_are_invalid(kw: dict[str, object], match: str) -> None:
    with pytest.raises(InvalidOptions, match=match):
        FleetLaunch("vllm", spec(), **kw)  # type: ignore[arg-type]


def test_a_fleet_refuses_per_engine_topology_settings() -> None:
    with pytest.raises(InvalidOptions, match="nodes="):
        FleetLaunch("vllm", spec(port=8000, nodes=Nodes(count=2, head="h")), replicas=2)


async def test_every_engine_is_stopped_when_one_fails_to_start(tmp_path: Path) -> None:
    port = two_free_ports()
    run = FleetLaunch(
        "vllm",
        spec(
            model="tiny",
            python=None,
            prefix=fake_engine.prefix(),
            port=port,
            env={"FAKE_ENGINE_FAIL_PORT": str(port + 1)},
            api_key=None,
            ready_timeout=60,
        ),
        replicas=2,
        progress=None,
        log_dir=tmp_path,
    )
    with pytest.raises(LaunchError, match="exited with code 3") as e:
        async with run:
            pass
    assert "cannot allocate the KV cache" in "\n".join(e.value.log_tail)
    pids = [launch.pid for launch in run.engines]
    assert None not in pids
    assert not any(alive(pid) for pid in pids if pid is not None)


def stand_in(port: int, **kw: Any) -> LaunchSpec:
    """Settings that start unillm.testing.fake_engine (the vLLM look-alike) instead of vLLM."""
    return spec(
        model="tiny",
        served_name="tiny",
        python=None,
        port=port,
        api_key=None,
        prefix=fake_engine.prefix(),
        ready_timeout=60,
        **kw,
    )


async def test_stand_in_replicas_start_concurrently_as_a_client_fleet_and_all_stop(tmp_path: Path) -> None:
    run = FleetLaunch("vllm", stand_in(two_free_ports()), replicas=2, progress=None, log_dir=tmp_path)
    async with run as fleet:
        assert isinstance(fleet, unillm.Fleet) and fleet.base_urls == [e.base_url for e in run.engines]
        for _ in range(4):
            assert (await fleet.generate("Hi", max_tokens=4)).text == "Hello, world!"
        assert [r.requests for r in fleet.stats().replicas] == [2, 2]  # round robin
        pids = [launch.pid for launch in run.engines]
        assert all(pid is not None and alive(pid) for pid in pids)
    assert not any(alive(pid) for pid in pids if pid is not None)


def test_blocking_fleet_launch(tmp_path: Path) -> None:
    run = FleetLaunch("vllm", stand_in(two_free_ports()), replicas=2, progress=None, log_dir=tmp_path)
    with run.blocking() as fleet:
        assert fleet.generate("Hi", max_tokens=4).text == "Hello, world!"
    assert all(launch.pid is not None and not alive(launch.pid) for launch in run.engines)


def test_each_replica_can_get_its_own_environment() -> None:
    run = FleetLaunch(
        "vllm",
        spec(env={"A": "1"}),
        replicas=2,
        progress=None,
        replica_env=[{"CUDA_VISIBLE_DEVICES": "0"}, {"CUDA_VISIBLE_DEVICES": "1"}],
    )
    envs = [dict(e.command().env) for e in run.engines]
    assert [{k: v for k, v in env.items() if k != "PYTHONPATH"} for env in envs] == [
        {"A": "1", "CUDA_VISIBLE_DEVICES": "0", "VLLM_API_KEY": run.spec.key()},
        {"A": "1", "CUDA_VISIBLE_DEVICES": "1", "VLLM_API_KEY": run.spec.key()},
    ]
    with pytest.raises(InvalidOptions, match="one mapping per engine"):
        FleetLaunch("vllm", spec(), replicas=2, replica_env=[{"X": "1"}])


def test_each_replica_can_get_its_own_cores_and_the_cpu_recipe_splits_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: {0, 1, 2, 4, 5}, raising=False)
    monkeypatch.setattr("os.sched_setaffinity", lambda pid, cores: None, raising=False)
    run = FleetLaunch("vllm", spec(), replicas=2, progress=None, replica_cpus=[[1], [0]])
    assert [e.spec.cpus for e in run.engines] == [[1], [0]]
    with pytest.raises(InvalidOptions, match="one list per engine"):
        FleetLaunch("vllm", spec(), replicas=2, replica_cpus=[[0]])
    for bad in ([], [-1]):
        with pytest.raises(InvalidOptions, match="one core number or more"):
            FleetLaunch("vllm", spec(), replicas=2, replica_cpus=[[0], bad])
    with pytest.raises(InvalidOptions, match="may run on cores"):
        FleetLaunch("vllm", spec(), replicas=2, replica_cpus=[[0], [3]])
    assert split_cpus(2) == [[0, 1, 2], [4, 5]] and split_cpus(6) is None
    recipe = FleetLaunch("vllm", spec(cpu=True), replicas=2, progress=None)
    assert [e.spec.cpus for e in recipe.engines] == [[0, 1, 2], [4, 5]]
    mine = FleetLaunch("vllm", spec(cpu=True, cpus=[4]), replicas=2, progress=None)
    assert [e.spec.cpus for e in mine.engines] == [[4], [4]]  # the caller's cores win
    assert [e.spec.cpus for e in FleetLaunch("vllm", spec(), replicas=2, progress=None).engines] == [
        None,
        None,
    ]


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity"), reason="pinning needs Linux's sched_setaffinity")
async def test_a_stand_in_replica_runs_on_the_cores_it_was_given(tmp_path: Path) -> None:
    cores = sorted(os.sched_getaffinity(0))
    given = [[cores[-1]], [cores[0]]]
    run = FleetLaunch(
        "vllm", stand_in(two_free_ports()), replicas=2, progress=None, log_dir=tmp_path, replica_cpus=given
    )
    async with run:
        assert [sorted(os.sched_getaffinity(e.pid or 0)) for e in run.engines] == given
    with pytest.raises(InvalidOptions, match="may run on cores"):
        async with Launch("vllm", stand_in(free_port(), cpus=[max(cores) + 1]), progress=None):
            pass


def test_a_cache_aware_fleet_turns_on_each_engines_kv_cache_events(tiny: Any) -> None:
    run = FleetLaunch("vllm", spec(model=str(tiny.path)), replicas=2, policy="cache_aware", progress=None)
    configs = [json.loads(value(c.argv, "--kv-events-config")) for _, c in run.commands()]
    assert [c["endpoint"] for c in configs] == run.kv_endpoints and run.kv_events_note is None
    assert len(set(run.kv_endpoints)) == 2 and all(e.startswith("ipc://") for e in run.kv_endpoints)
    assert all(c["enable_kv_cache_events"] and c["publisher"] == "zmq" for c in configs)
    assert [c["replay_endpoint"] for c in configs] == run.kv_replay_endpoints
    assert not set(run.kv_replay_endpoints) & set(run.kv_endpoints)


@pytest.mark.parametrize(
    ("kw", "note"),
    [
        ({"model": "org/hub-name"}, "no tokenizer.json"),  # no local folder: nothing to tokenize with
        ({"extra_args": ["--kv-events-config", "{}"]}, "own --kv-events-config is kept"),
    ],
)
def test_where_events_cannot_be_read_the_fleet_says_why_and_keeps_the_tree(
    tiny: Any, kw: dict[str, Any], note: str
) -> None:
    run = FleetLaunch(
        "vllm", spec(**{"model": str(tiny.path), **kw}), replicas=2, policy="cache_aware", progress=None
    )
    assert run.kv_endpoints == [] and note in (run.kv_events_note or "")
    assert all(
        c.argv.count("--kv-events-config") == len(kw.get("extra_args", [])) // 2 for _, c in run.commands()
    )


def test_other_policies_and_routers_get_no_kv_cache_events(tiny: Any) -> None:
    for run in (
        FleetLaunch("vllm", spec(model=str(tiny.path)), replicas=2, progress=None),
        FleetLaunch(
            "vllm", spec(model=str(tiny.path)), replicas=2, router="vllm-router", policy="cache_aware"
        ),
    ):
        assert run.kv_endpoints == [] and run.kv_events_note is None
        assert not any("--kv-events-config" in c.argv for _, c in run.commands())
