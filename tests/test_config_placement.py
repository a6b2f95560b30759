"""The ``[launch]`` placement keys (replicas, disaggregation, router, [launch.cluster]) in a config.

One vocabulary for every target: what ``unillm.from_config`` launches on this machine or a Ray
cluster, what ``unillm check`` names, and where ``[deploy]`` keys of earlier versions went. Nothing
starts: a launch object is built and inspected, never entered.
"""

from __future__ import annotations

from typing import Any

import pytest

import unillm
from unillm.config.check import check_config
from unillm.config.cluster import Placement, split_launch
from unillm.errors import ConfigError, InvalidOptions

PY = "/usr/bin/python3"  # never run: no launch here is entered
PD = {"prefill": 2, "decode": 1}


def config(policy: str | None = None, **launch: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"engine": "vllm", "launch": {"model": "m", "python": PY, **launch}}
    if policy is not None:
        out["policy"] = policy
    return out


# -- split_launch ---------------------------------------------------------------------------------


def test_split_launch_separates_the_placement_from_the_engines_settings() -> None:
    settings, placement = split_launch(
        {"model": "m", "disaggregation": {**PD, "transfer": "mooncake"}, "router": "smg"}
    )
    assert settings == {"model": "m"}
    assert placement == Placement(
        disaggregation=unillm.Disaggregation(prefill=2, decode=1, transfer="mooncake"), router="smg"
    )


def test_without_placement_keys_the_placement_is_one_local_engine() -> None:
    assert split_launch({"model": "m"})[1].single


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ({"prefill": 0}, r"\[launch\] disaggregation: prefill: Input should be greater than or equal to 1"),
        ({"prefil": 1}, r"\[launch\] disaggregation: prefil: Extra inputs are not permitted"),
        ({"transfer": "tcp"}, r"\[launch\] disaggregation: transfer: Input should be 'nixl' or 'mooncake'"),
        (2, r"\[launch\] disaggregation = 2: give a table"),
    ],
)
def test_a_bad_disaggregation_is_refused_naming_the_key(value: Any, problem: str) -> None:
    with pytest.raises(InvalidOptions, match=problem):
        split_launch({"disaggregation": value})


def test_an_unknown_router_is_refused_naming_the_key_and_the_routers() -> None:
    with pytest.raises(InvalidOptions, match=r"\[launch\] router: unknown router 'nginx'.*vllm-router, smg"):
        split_launch({"router": "nginx"})


def test_replicas_and_disaggregation_together_are_refused() -> None:
    with pytest.raises(InvalidOptions, match="replicas = 2 and disaggregation: give one of them"):
        split_launch({"replicas": 2, "disaggregation": PD})


# -- from_config ----------------------------------------------------------------------------------


def test_disaggregation_gives_a_fleet_launch_of_prefill_and_decode_engines_behind_the_router() -> None:
    run = unillm.from_config(config(disaggregation=PD, router="vllm-router"), env={})
    assert isinstance(run, unillm.FleetLaunch)
    assert run.disaggregation == unillm.Disaggregation(prefill=2, decode=1)
    assert [r.role if r else None for r in run.roles] == ["prefill", "prefill", "decode"]
    assert run.tool is not None and run.tool.name == "vllm-router"


def test_the_top_level_policy_routes_a_disaggregated_launch() -> None:
    run = unillm.from_config(config("prefix", disaggregation=PD, router="vllm-router"), env={})
    assert isinstance(run, unillm.FleetLaunch) and run.policy == "prefix"


def test_a_router_in_front_of_replicas_is_started_with_them() -> None:
    run = unillm.from_config(config(replicas=2, router="smg"), env={})
    assert isinstance(run, unillm.FleetLaunch) and run.router is not None and len(run.engines) == 2


def test_disaggregation_on_this_machine_without_a_router_is_a_config_error_naming_the_key() -> None:
    with pytest.raises(ConfigError, match=r'disaggregation needs a router.*router = "vllm-router"'):
        unillm.from_config(config(disaggregation=PD), env={})


def test_disaggregation_with_replicas_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="give one of them"):
        unillm.from_config(config(replicas=2, disaggregation=PD, router="vllm-router"), env={})


@pytest.mark.parametrize(("key", "value"), [("disaggregation", PD), ("router", "smg")])
def test_a_ray_cluster_with_disaggregation_or_a_router_is_a_config_error(key: str, value: Any) -> None:
    cluster = {"kind": "ray", "address": "h:6379"}
    with pytest.raises(ConfigError, match=rf"\[launch\] {key} with \[launch.cluster\]: a Ray launch"):
        unillm.from_config(config(**{key: value, "cluster": cluster}), env={})


def test_a_bad_disaggregation_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"invalid \[launch\]: \[launch\] disaggregation: decode"):
        unillm.from_config(config(disaggregation={"decode": 0}, router="smg"), env={})


def test_a_deploy_key_that_moved_is_a_config_error_for_a_local_launch_too() -> None:
    with pytest.raises(ConfigError, match=r"\[deploy\] replicas: replicas goes in \[launch\]"):
        unillm.from_config({**config(), "deploy": {"replicas": 2}}, env={})


def test_the_kubernetes_table_does_not_change_a_local_launch() -> None:
    local = config(replicas=2)
    run = unillm.from_config({**local, "deploy": {"kubernetes": {"namespace": "llm"}}}, env={})
    assert isinstance(run, unillm.FleetLaunch) and len(run.engines) == 2


# -- unillm check ---------------------------------------------------------------------------------


def settings_named(found: unillm.ConfigCheck) -> list[str]:
    return [p.setting for p in found.problems]


def test_check_accepts_a_disaggregated_launch_with_its_router() -> None:
    found = check_config(config("prefix", disaggregation=PD, router="vllm-router"), env={})
    assert found.problems == []


def test_check_names_each_bad_placement_key() -> None:
    bad = config(replicas=0, disaggregation={"prefil": 1}, router="nginx")
    assert settings_named(check_config(bad, env={})) == [
        "launch.replicas",
        "launch.disaggregation",
        "launch.router",
    ]


def test_check_names_placement_keys_that_do_not_go_together_as_launch() -> None:
    found = check_config(config(replicas=2, disaggregation=PD, router="smg"), env={})
    assert settings_named(found) == ["launch"]
    assert "give one of them" in found.problems[0].message


def test_check_names_a_deploy_key_that_moved() -> None:
    found = check_config({**config(), "deploy": {"replicas": 2, "policy": "prefix"}}, env={})
    assert settings_named(found) == ["deploy.replicas", "deploy.policy"]
    assert "replicas goes in [launch]" in found.problems[0].message
