"""Real routers (vllm-router, smg from their managed envs) launched by unillm in front of stand-in
vLLM replicas (unillm.testing.fake_engine serving the look-alike), in regular and in prefill/decode
mode: supervised like an engine, ready after one request through them, the API key passed the
way each router needs, every process gone after teardown. Real vLLM replicas behind them:
tests/integration/test_fleets.py.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from launch_helpers import alive

import unillm
from unillm.adapter.launch_spec import Disaggregation, LaunchSpec
from unillm.errors import Unauthorized
from unillm.launching.fleet_launch import FleetLaunch
from unillm.testing import fake_engine

pytestmark = [pytest.mark.anyio, pytest.mark.engine, pytest.mark.side_stream]
ROUTERS = ("vllm-router", "smg")


def stand_in(**kw: Any) -> LaunchSpec:
    settings = {
        "model": "tiny",
        "served_name": "tiny",
        "prefix": fake_engine.prefix(),
        "ready_timeout": 60,
        **kw,
    }
    return LaunchSpec(**settings)


def seen(log: Path) -> list[dict[str, Any]]:
    """The generation requests a stand-in engine answered through the router (it lists them in
    its log at exit; the first is unillm's own readiness check of that engine)."""
    lines = [json.loads(line[5:]) for line in log.read_text().splitlines() if line.startswith("SEEN ")]
    return lines[1:]


@pytest.mark.parametrize("router", ROUTERS)
async def test_router_in_front_of_replicas_serves_and_everything_stops(router: str, tmp_path: Path) -> None:
    run = FleetLaunch("vllm", stand_in(), replicas=2, router=router, progress=None, log_dir=tmp_path)
    key = run.spec.key()
    async with run as llm:
        assert isinstance(llm, unillm.LLM) and llm.base_url == run.router.base_url  # type: ignore[union-attr]
        for _ in range(4):
            assert (await llm.generate("Hi", max_tokens=4)).text == "Hello, world!"
        assert "".join([d.text async for d in llm.stream("Hi", max_tokens=4)]) == "Hello, world!"
        pids = [launch.pid for launch in run.launches]
        assert all(alive(pid) for pid in pids)
    assert not any(alive(pid) for pid in pids)
    answered = [seen(e.log_path) for e in run.engines]
    assert all(answered), "both replicas got requests"
    assert key and all(r["authorized"] for rs in answered for r in rs)


async def test_smg_checks_the_key_itself(tmp_path: Path) -> None:
    run = FleetLaunch("vllm", stand_in(), replicas=2, router="smg", progress=None, log_dir=tmp_path)
    async with run, unillm.connect("vllm", run.base_url, api_key="wrong", model="tiny") as intruder:
        with pytest.raises(Unauthorized):
            await intruder.generate("Hi", max_tokens=4)


@pytest.mark.parametrize("router", ROUTERS)
async def test_prefill_decode_mode_sends_the_prompt_to_prefill_then_decodes(
    router: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("unillm.launching.envs.has_gpu", lambda: True)  # look-alikes need no GPU
    run = FleetLaunch(
        "vllm",
        stand_in(),
        router=router,
        progress=None,
        log_dir=tmp_path,
        disaggregation=Disaggregation(prefill=1, decode=1, transfer="nixl"),
    )
    async with run as llm:
        r = await llm.generate("Hi", max_tokens=4)
        assert r.text == "Hello, world!"
        pids = [launch.pid for launch in run.launches]
    assert not any(alive(pid) for pid in pids)
    prefill, decode = (seen(e.log_path) for e in run.engines)
    assert prefill and {p["max_tokens"] for p in prefill} == {1}  # prefill only: one token
    assert 4 in {d["max_tokens"] for d in decode}  # the caller's request is decoded there
    assert all(r["authorized"] for r in prefill + decode)  # the workers' key reached them
    if router == "vllm-router":  # vLLM's NIXL handshake travels in kv_transfer_params
        assert all(p["kv_transfer_params"] for p in prefill)
