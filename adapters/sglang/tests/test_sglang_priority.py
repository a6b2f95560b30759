"""SGLang's request priorities: ``priority=`` goes to its ``priority`` field only on a server that
schedules lower values first (as vLLM and unillm do); ``scheduling="priority"`` launches it so."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from unillm_sglang import SGLangAdapter, SGLangInfo

from unillm.adapter import EngineInfo, LaunchSpec, get_adapter
from unillm.errors import UnsupportedFeature
from unillm.options import Request, make_request


def ask(priority: int) -> Request:
    return make_request("hi", None, None, {"priority": priority}, stream=False)


def body(adapter: Any, request: Request, info: EngineInfo) -> dict[str, Any]:
    call = adapter.build(request, info)
    assert call.json is not None
    return dict(call.json)


SGLANG = SGLangInfo(engine="sglang", model="tiny", version="0.5.23", served_names=("tiny",))


@pytest.mark.parametrize("api", ["openai", "native"])
def test_sglang_scheduling_lower_values_first_gets_the_priority(api: Any) -> None:
    info = replace(SGLANG, priority_scheduling=True)
    assert body(SGLangAdapter(api), ask(4), info)["priority"] == 4


def test_sglang_server_info_tells_whether_it_schedules_lower_values_first() -> None:
    def scheduled(server: dict[str, Any]) -> bool | None:
        answers = {"model_info": {}, "server_info": server, "models": {"data": [{"id": "tiny"}]}}
        info = SGLangAdapter().parse_info(answers, "tiny")
        assert isinstance(info, SGLangInfo)
        return info.priority_scheduling

    both = {"enable_priority_scheduling": True, "schedule_low_priority_values_first": True}
    assert scheduled({**both, "tp_size": 1}) is True
    assert scheduled({"enable_priority_scheduling": True, "tp_size": 1}) is False  # higher first


def test_sglang_without_lower_first_priority_scheduling_refuses_it() -> None:
    info = replace(SGLANG, priority_scheduling=False)
    with pytest.raises(UnsupportedFeature, match="priority"):
        body(SGLangAdapter(), ask(4), info)


def test_an_sglang_older_than_checked_refuses_it() -> None:
    info = replace(SGLANG, version="0.5.18")
    with pytest.raises(UnsupportedFeature, match="priority"):
        SGLangAdapter().route(ask(1), info)


def test_sglang_launch_schedules_lower_values_first_as_unillm_priority() -> None:
    spec = LaunchSpec(
        model="/m", port=8000, api_key=None, python="py", scheduling="priority", max_queued_requests=16
    )
    words = list(get_adapter("sglang").command(spec).argv)
    assert {"--enable-priority-scheduling", "--schedule-low-priority-values-first"} <= set(words)
    assert words[words.index("--max-queued-requests") + 1] == "16"
