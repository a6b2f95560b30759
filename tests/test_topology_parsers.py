"""Every command unillm renders for multi-node, prefill/decode and routers, parsed by the tool's own
parser in its managed env (not string comparison): vLLM's server argument parser and engine
arguments (``adapters/vllm/tests/vllm_args_check.py``), vllm-router's and smg's launchers and router
configuration (``router_args_check.py``). SGLang's: ``adapters/sglang/tests/test_sglang_contract.py``.
Each checker must also reject a control, or it proves nothing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from unillm.adapter.launch_spec import Disaggregation, LaunchCommand, LaunchSpec, Nodes, Parallel
from unillm.launching.envs import managed_python
from unillm.launching.fleet_launch import FleetLaunch
from unillm.launching.routers import get_router
from unillm.launching.supervisor import Launch
from unillm.testing.verdicts import verdicts

pytestmark = pytest.mark.engine
# The cases below are rendered at collection by the vLLM and SGLang adapters.
for _adapter, _extra in (("unillm_vllm", "vllm"), ("unillm_sglang", "sglang")):
    pytest.importorskip(_adapter, reason=f"its adapter is not installed: pip install 'unillm-sdk[{_extra}]'")
HERE = Path(__file__).resolve().parent
VLLM_CHECK = HERE.parent / "adapters" / "vllm" / "tests" / "vllm_args_check.py"
ROUTER_CHECK = HERE / "router_args_check.py"


def spec(**kw: Any) -> LaunchSpec:
    return LaunchSpec(**{"model": "/models/m", "python": "py", **kw})


def after_module(cmd: LaunchCommand) -> list[str]:
    """argv after ``python -m <module>`` (and vLLM's ``serve``)."""
    argv = cmd.argv[3:]
    return argv[1:] if argv[:1] == ["serve"] else argv


def pd_fleet(router: str, transfer: str = "nixl", engine: str = "vllm") -> FleetLaunch:
    return FleetLaunch(
        engine,
        spec(),
        router=router,
        router_python="py",
        progress=None,
        disaggregation=Disaggregation(prefill=2, decode=2, transfer=transfer),
    )


# -- vLLM -------------------------------------------------------------------------------------
def _vllm_cases() -> dict[str, dict[str, Any]]:
    cases: dict[str, dict[str, Any]] = {}
    for rank in (0, 1):
        for name, parallel in (("tp", Parallel(tensor=2)), ("dp", Parallel(data=4))):
            nodes = Nodes(count=2, rank=rank, head="10.0.0.1:6000")
            cmd = Launch("vllm", spec(port=8000, parallel=parallel, nodes=nodes), progress=None).command()
            cases[f"nodes-{name}-rank{rank}"] = {
                "argv": after_module(cmd),
                "expect": {
                    "nnodes": 2,
                    "node_rank": rank,
                    "master_addr": "10.0.0.1",
                    "master_port": 6000,
                    "ns.headless": rank > 0,
                },
            }
    for transfer in ("nixl", "mooncake"):
        run = pd_fleet("vllm-router", transfer)
        for label, cmd in run.commands()[:-1]:
            role = "kv_producer" if "prefill" in label else "kv_consumer"
            connector = {"nixl": "NixlConnector", "mooncake": "MooncakeConnector"}[transfer]
            cases[f"pd-{transfer}-{label}"] = {
                "argv": after_module(cmd),
                "expect": {"kv_transfer_config.kv_role": role, "kv_transfer_config.kv_connector": connector},
            }
    for label, cmd in FleetLaunch("vllm", spec(), replicas=2, progress=None).commands():
        cases[f"replicas-{label}"] = {"argv": after_module(cmd), "expect": {"model": "/models/m"}}
    return cases


VLLM_CASES = _vllm_cases()
VLLM_CONTROLS = {
    "control/bad-kv-role": {
        "argv": [
            "--model",
            "M",
            "--kv-transfer-config",
            '{"kv_connector": "NixlConnector", "kv_role": "producer"}',
        ]
    },
    "control/unknown-flag": {"argv": ["--model", "M", "--node-count", "2"]},
    "control/wrong-expectation": {"argv": ["--model", "M", "--nnodes", "2"], "expect": {"nnodes": 3}},
}


@pytest.fixture(scope="module")
def vllm_verdicts() -> dict[str, str]:
    return verdicts(managed_python("vllm"), VLLM_CHECK, {**VLLM_CASES, **VLLM_CONTROLS})


@pytest.mark.parametrize("case", sorted(VLLM_CASES))
def test_vllm_parses(case: str, vllm_verdicts: dict[str, str]) -> None:
    assert vllm_verdicts[case] == "ok", f"{case}: {vllm_verdicts[case]}\n{VLLM_CASES[case]}"


@pytest.mark.parametrize("case", sorted(VLLM_CONTROLS))
def test_vllm_rejects_the_control(case: str, vllm_verdicts: dict[str, str]) -> None:
    assert vllm_verdicts[case] != "ok"


# -- routers ----------------------------------------------------------------------------------
def _router_cases(router: str) -> dict[str, dict[str, Any]]:
    tool = get_router(router)
    cases: dict[str, dict[str, Any]] = {}
    for policy, own in tool.policies.items():
        run = FleetLaunch(
            "vllm",
            spec(),
            replicas=2,
            router=router,
            policy=policy,  # type: ignore[arg-type]
            router_python="py",
            progress=None,
        )
        cmd = run.commands()[-1][1]
        cases[f"{policy}"] = {
            "argv": after_module(cmd),
            "expect": {"policy": own, "worker_urls": [e.base_url for e in run.engines]},
        }
    pd_runs = {f"pd-vllm-{t}": pd_fleet(router, t) for t in ("nixl", "mooncake")}
    if "sglang" in tool.engines:
        pd_runs["pd-sglang-mooncake"] = pd_fleet(router, "mooncake", "sglang")
    for name, run in pd_runs.items():
        cmd = run.commands()[-1][1]
        flag = "vllm_pd_disaggregation" if router == "vllm-router" else "pd_disaggregation"
        cases[name] = {
            "argv": after_module(cmd),
            "expect": {flag: True, "decode_urls": [e.base_url for e in run.engines[2:]]},
        }
    return cases


ROUTER_CASES = {r: _router_cases(r) for r in ("vllm-router", "smg")}
ROUTER_CONTROLS = {
    "control/unknown-policy": {"argv": ["--worker-urls", "http://a:1", "--policy", "fastest"]},
    "control/unknown-flag": {"argv": ["--worker-urls", "http://a:1", "--replicas", "2"]},
}


@pytest.fixture(scope="module", params=sorted(ROUTER_CASES))
def router_verdicts(request: pytest.FixtureRequest) -> tuple[str, dict[str, str]]:
    router = str(request.param)
    return router, verdicts(
        managed_python(router), ROUTER_CHECK, {**ROUTER_CASES[router], **ROUTER_CONTROLS}, router
    )


def test_routers_parse_every_rendered_command(router_verdicts: tuple[str, dict[str, str]]) -> None:
    router, results = router_verdicts
    rejected = {k: v for k, v in results.items() if k in ROUTER_CASES[router] and v != "ok"}
    assert not rejected, f"{router} rejected: {rejected}"
    assert set(ROUTER_CASES[router]) <= set(results)


def test_routers_reject_the_controls(router_verdicts: tuple[str, dict[str, str]]) -> None:
    _, results = router_verdicts
    assert all(results[c] != "ok" for c in ROUTER_CONTROLS), results
