"""Multi-node and prefill/decode settings rendered by each engine's adapter (pure), refused where
an engine has no such flags. The engines' own parsers accept them: test_topology_parsers.py."""

from __future__ import annotations

import json

import pytest

import unillm
from unillm.adapter.launch_spec import LaunchSpec, Nodes, PDRole
from unillm.adapter.registry import get_adapter
from unillm.errors import InvalidOptions, UnsupportedFeature
from unillm.launching.supervisor import Launch


def spec(**kw: object) -> LaunchSpec:
    return LaunchSpec(**{"model": "M", "port": 8000, "api_key": None, "python": "py", **kw})


def value(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


def test_nodes_validate_rank_and_head_port() -> None:
    assert Nodes(count=2, rank=1, head="10.0.0.1").head_address() == ("10.0.0.1", 29500)
    assert Nodes(count=2, head="h:6000").head_address() == ("h", 6000)
    with pytest.raises(InvalidOptions, match="rank 2 is not below count 2"):
        Nodes(count=2, rank=2, head="h")
    with pytest.raises(InvalidOptions, match="port"):
        Nodes(count=2, head="h:http")


def test_vllm_head_node_serves_and_workers_run_headless() -> None:
    vllm = get_adapter("vllm")
    head = vllm.command(spec(parallel=unillm.Parallel(tensor=2), nodes=Nodes(count=2, head="10.0.0.1:6000")))
    worker = vllm.command(
        spec(parallel=unillm.Parallel(tensor=2), nodes=Nodes(count=2, rank=1, head="10.0.0.1:6000"))
    )
    assert head.argv[1:4] == ["-m", "vllm.entrypoints.cli.main", "serve"]
    for cmd, rank in ((head, "0"), (worker, "1")):
        assert value(cmd.argv, "--nnodes") == "2" and value(cmd.argv, "--node-rank") == rank
        assert value(cmd.argv, "--master-addr") == "10.0.0.1"
        assert value(cmd.argv, "--master-port") == "6000"
    assert "--headless" not in head.argv and "--headless" in worker.argv


def test_vllm_refuses_a_world_that_does_not_split_over_the_nodes() -> None:
    with pytest.raises(InvalidOptions, match="split the world"):
        get_adapter("vllm").command(spec(parallel=unillm.Parallel(tensor=3), nodes=Nodes(count=2, head="h")))


def test_sglang_nodes_use_its_dist_init_address() -> None:
    cmd = get_adapter("sglang").command(spec(nodes=Nodes(count=3, rank=2, head="10.0.0.1")))
    assert value(cmd.argv, "--nnodes") == "3" and value(cmd.argv, "--node-rank") == "2"
    assert value(cmd.argv, "--dist-init-addr") == "10.0.0.1:29500"


@pytest.mark.parametrize(
    ("transfer", "connector", "env"),
    [
        ("nixl", "NixlConnector", "VLLM_NIXL_SIDE_CHANNEL_PORT"),
        ("mooncake", "MooncakeConnector", "VLLM_MOONCAKE_BOOTSTRAP_PORT"),
    ],
)
@pytest.mark.parametrize(("role", "kv_role"), [("prefill", "kv_producer"), ("decode", "kv_consumer")])
def test_vllm_pd_roles_become_kv_transfer_config_and_a_port_per_worker(
    transfer: str, connector: str, env: str, role: str, kv_role: str
) -> None:
    cmd = get_adapter("vllm").command(spec(pd=PDRole(role=role, transfer=transfer, port=5601)))
    assert json.loads(value(cmd.argv, "--kv-transfer-config")) == {
        "kv_connector": connector,
        "kv_role": kv_role,
    }
    assert cmd.env[env] == "5601"


def test_sglang_pd_roles_and_the_prefill_bootstrap_port() -> None:
    sglang = get_adapter("sglang")
    prefill = sglang.command(spec(pd=PDRole(role="prefill", transfer="mooncake", port=8998)))
    decode = sglang.command(spec(pd=PDRole(role="decode", transfer="mooncake")))
    assert value(prefill.argv, "--disaggregation-mode") == "prefill"
    assert value(prefill.argv, "--disaggregation-transfer-backend") == "mooncake"
    assert value(prefill.argv, "--disaggregation-bootstrap-port") == "8998"
    assert value(decode.argv, "--disaggregation-mode") == "decode"
    assert "--disaggregation-bootstrap-port" not in decode.argv


@pytest.mark.parametrize("engine", ["tgi", "mlx"])
def test_engines_without_multi_node_or_pd_refuse_before_anything_starts(engine: str) -> None:
    with pytest.raises(UnsupportedFeature, match="multi-node"):
        Launch(engine, spec(nodes=Nodes(count=2, head="h")), progress=None)
    with pytest.raises(UnsupportedFeature, match="prefill/decode"):
        Launch(engine, spec(pd=PDRole(role="prefill")), progress=None)


def test_a_multi_node_launch_needs_the_shared_api_port() -> None:
    with pytest.raises(InvalidOptions, match="port="):
        Launch(
            "vllm",
            spec(port=None, parallel=unillm.Parallel(tensor=2), nodes=Nodes(count=2, head="h")),
            progress=None,
        )


def test_a_worker_node_is_ready_when_its_head_answers() -> None:
    run = Launch(
        "vllm",
        spec(parallel=unillm.Parallel(tensor=2), nodes=Nodes(count=2, rank=1, head="10.0.0.7:6000")),
        progress=None,
    )
    assert run.base_url == "http://10.0.0.7:8000"
