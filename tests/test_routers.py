"""The router command layer (unillm.launching.routers): pure rendering, checked with plain data.

That the routers' own parsers accept these commands is proven in test_topology_parsers.py.
"""

from __future__ import annotations

import pytest

from unillm.errors import InvalidOptions, UnsupportedFeature
from unillm.fleet.picker import POLICIES
from unillm.launching.envs import install_plan
from unillm.launching.routers import ROUTERS, PrefillWorker, RouterSpec, get_router

WORKERS = ("http://127.0.0.1:8001", "http://127.0.0.1:8002")


def spec(**kw: object) -> RouterSpec:
    return RouterSpec(**{"workers": WORKERS, "port": 30000, "python": "/env/bin/python", **kw})  # type: ignore[arg-type]


def test_both_routers_are_registered_with_their_pinned_packages() -> None:
    assert sorted(ROUTERS) == ["smg", "vllm-router"]
    assert install_plan("vllm-router", gpu=False).packages == ("vllm-router==0.1.17",)
    assert install_plan("smg", gpu=True).packages == ("smg==1.13.0",)


def test_vllm_router_regular_mode_argv() -> None:
    cmd = get_router("vllm-router").command(spec(policy="prefix", metrics_port=29123))
    assert cmd.argv == [
        "/env/bin/python",
        "-m",
        "vllm_router.launch_router",
        "--host",
        "127.0.0.1",
        "--port",
        "30000",
        "--worker-urls",
        *WORKERS,
        "--policy",
        "cache_aware",
        "--prometheus-port",
        "29123",
    ]
    assert cmd.health_path == "/health"


def test_smg_regular_mode_argv_carries_the_key_masked() -> None:
    cmd = get_router("smg").command(spec(policy="least_load", api_key="-s3cret"))
    assert cmd.argv[:3] == ["/env/bin/python", "-m", "smg.launch_router"]
    assert cmd.argv[cmd.argv.index("--policy") + 1] == "least_load"
    assert "--api-key=-s3cret" in cmd.argv  # one token, even for a key that starts with "-"
    assert "s3cret" not in cmd.render() and "--api-key=***" in cmd.render()


def test_vllm_router_gets_the_key_by_environment_never_in_argv() -> None:
    cmd = get_router("vllm-router").command(spec(api_key="s3cret"))
    assert "s3cret" not in cmd.argv and "--api-key" not in cmd.argv
    assert cmd.env == {"OPENAI_API_KEY": "s3cret"}  # what it sends to PD workers
    assert "s3cret" not in cmd.render()


@pytest.mark.parametrize(
    ("router", "policy", "own"),
    [
        ("vllm-router", "round_robin", "round_robin"),
        ("vllm-router", "prefix", "cache_aware"),
        ("vllm-router", "session", "consistent_hash"),
        ("smg", "round_robin", "round_robin"),
        ("smg", "least_load", "least_load"),
        ("smg", "prefix", "prefix_hash"),
        ("smg", "session", "consistent_hashing"),
        ("vllm-router", "cache_aware", "cache_aware"),
        ("smg", "cache_aware", "cache_aware"),
    ],
)
def test_unified_policies_map_to_each_routers_own(router: str, policy: str, own: str) -> None:
    assert get_router(router).policy(policy) == own


def test_a_policy_the_router_lacks_is_refused_naming_the_alternatives() -> None:
    with pytest.raises(UnsupportedFeature) as e:
        get_router("vllm-router").command(spec(policy="least_load"))
    assert "vllm-router" in str(e.value) and "round_robin" in str(e.value)


def test_unknown_policy_and_router_are_invalid() -> None:
    with pytest.raises(InvalidOptions, match="round_robin"):
        get_router("smg").policy("fastest")
    with pytest.raises(InvalidOptions, match="vllm-router"):
        get_router("nginx")
    assert set(POLICIES) == {"round_robin", "least_load", "prefix", "session", "cache_aware"}


def test_vllm_router_pd_mode_lists_prefill_with_bootstrap_and_decode() -> None:
    cmd = get_router("vllm-router").command(
        spec(
            workers=(),
            prefill=(PrefillWorker("http://p:1", 9000), PrefillWorker("http://p:2")),
            decode=("http://d:1",),
            transfer="mooncake",
        )
    )
    argv = cmd.argv
    i = argv.index("--vllm-pd-disaggregation")
    assert argv[i + 1 : i + 8] == [
        "--prefill",
        "http://p:1",
        "9000",
        "--prefill",
        "http://p:2",
        "--decode",
        "http://d:1",
    ]
    assert argv[argv.index("--kv-connector") + 1] == "mooncake"
    assert "--worker-urls" not in argv


def test_smg_pd_mode_names_the_engine_protocol() -> None:
    cmd = get_router("smg").command(
        spec(
            workers=(), prefill=(PrefillWorker("http://p:1", 8998),), decode=("http://d:1",), engine="sglang"
        )
    )
    assert "--pd-disaggregation" in cmd.argv
    assert cmd.argv[cmd.argv.index("--backend") + 1] == "sglang"


def test_workers_and_pd_workers_are_exclusive_and_pd_needs_both_roles() -> None:
    smg = get_router("smg")
    with pytest.raises(InvalidOptions, match="not both"):
        smg.command(spec(prefill=(PrefillWorker("http://p:1"),), decode=("http://d:1",)))
    with pytest.raises(InvalidOptions, match="neither"):
        smg.command(spec(workers=()))
    with pytest.raises(InvalidOptions, match="one prefill and one decode"):
        smg.command(spec(workers=(), decode=("http://d:1",)))


def test_vllm_router_refuses_other_engines() -> None:
    with pytest.raises(UnsupportedFeature, match="routing for sglang"):
        get_router("vllm-router").command(spec(engine="sglang"))
