"""Request priorities (issue 33, item 5): ``priority=`` goes to vLLM's ``priority`` field, refused
before sending on a server known not to schedule by it and on every engine without request
priorities; ``scheduling="priority"`` launches vLLM to honour it (SGLang's side: its adapter's tests)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

import unillm
from unillm import RetryPolicy
from unillm.adapter import EngineInfo, LaunchSpec, get_adapter, installed_engines
from unillm.capabilities import Feature, check
from unillm.errors import InvalidOptions, UnsupportedFeature
from unillm.options import Request, make_request
from unillm.testing.fault_server import FaultServer

INFO = EngineInfo(engine="vllm", model="tiny", version="0.32.0")
WITH_PRIORITY = ("vllm", "sglang")


def ask(priority: Any, *, chat: bool = False) -> Request:
    messages = [{"role": "user", "content": "hi"}] if chat else None
    return make_request(None if chat else "hi", messages, None, {"priority": priority}, stream=False)


def body(adapter: Any, request: Request, info: EngineInfo = INFO) -> dict[str, Any]:
    call = adapter.build(request, info)
    assert call.json is not None
    return dict(call.json)


@pytest.mark.parametrize("value", ["high", True, 1.5, 2**63])
def test_a_priority_that_is_no_64_bit_integer_is_refused(value: Any) -> None:
    with pytest.raises(InvalidOptions, match=r"priority( must|=)"):
        ask(value)


@pytest.mark.parametrize("chat", [False, True])
def test_vllm_sends_the_priority_field(chat: bool) -> None:
    assert body(get_adapter("vllm"), ask(-3, chat=chat))["priority"] == -3


def test_a_vllm_launched_with_priority_scheduling_gets_it() -> None:
    bound = get_adapter("vllm").bind(LaunchSpec(model="/m", scheduling="priority"))
    assert body(bound, ask(2))["priority"] == 2


@pytest.mark.parametrize(
    "spec",
    [LaunchSpec(model="/m"), LaunchSpec(model="/m", scheduling="fcfs")],
    ids=["default", "fcfs"],
)
def test_a_vllm_launched_without_priority_scheduling_refuses_it_before_sending(spec: LaunchSpec) -> None:
    with pytest.raises(UnsupportedFeature) as caught:
        body(get_adapter("vllm").bind(spec), ask(2))
    e = caught.value
    assert (e.engine, e.feature) == ("vllm", Feature.PRIORITY.value)
    assert "scheduling='priority'" in e.alternative


def test_extra_args_scheduling_policy_counts_as_priority_scheduling() -> None:
    spec = LaunchSpec(model="/m", extra_args=["--scheduling-policy=priority"])
    assert body(get_adapter("vllm").bind(spec), ask(1))["priority"] == 1


@pytest.mark.parametrize("engine", [e for e in installed_engines() if e not in WITH_PRIORITY])
def test_every_engine_without_request_priorities_refuses_it_naming_what_to_do(engine: str) -> None:
    with pytest.raises(UnsupportedFeature) as caught:
        check(get_adapter(engine).capabilities(None), ask(1))
    e = caught.value
    assert (e.engine, e.feature) == (engine, Feature.PRIORITY.value)
    assert e.why and "vLLM" in e.alternative


# -- launch ----------------------------------------------------------------------------------
def argv(engine: str, **settings: Any) -> list[str]:
    spec = LaunchSpec(model="/m", port=8000, api_key=None, python="py", **settings)
    return list(get_adapter(engine).command(spec).argv)


def test_vllm_launch_maps_scheduling_and_the_queue_cap() -> None:
    words = argv("vllm", scheduling="priority", max_queued_requests=16)
    assert words[words.index("--scheduling-policy") + 1] == "priority"
    assert words[words.index("--max-num-queued-reqs") + 1] == "16"


@pytest.mark.parametrize(
    ("engine", "setting", "alternative"),
    [
        ("ollama", {"max_queued_requests": 4}, "OLLAMA_MAX_QUEUE"),
        ("tgi", {"max_queued_requests": 4}, "--max-concurrent-requests"),
        ("llamacpp", {"scheduling": "priority"}, "vLLM or SGLang"),
    ],
)
def test_engines_without_them_refuse_the_admission_settings(
    engine: str, setting: dict[str, Any], alternative: str
) -> None:
    model = "llama3.2:1b" if engine == "ollama" else "/m.gguf"
    spec = LaunchSpec(model=model, api_key=None, **setting)
    with pytest.raises(UnsupportedFeature) as caught:
        get_adapter(engine).command(spec)
    assert alternative in caught.value.alternative


# -- on the wire -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def server() -> Iterator[FaultServer]:
    with FaultServer(model="tiny") as s:
        yield s
    assert s.errors == []


@pytest.mark.anyio
async def test_a_connected_vllm_gets_the_priority_in_the_body(server: FaultServer) -> None:
    async with unillm.connect("vllm", server.url, model="tiny", retry=RetryPolicy(attempts=1)) as llm:
        await llm.generate("hi", max_tokens=4, priority=-5)
    assert server.seen()[-1].body["priority"] == -5
