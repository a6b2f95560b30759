"""LoRA adapters are "loras" (``llm.loras``, ``LoraInfo``, ``UnknownLora``): "adapter" names engine
adapters. The older names stay as deprecated aliases of the same objects."""

from __future__ import annotations

from fake_adapter import FakeAdapter

import unillm
from unillm.client.blocking import BlockingAdapters, BlockingLoras
from unillm.client.llm import LoraAdapters, Loras
from unillm.client.protocol import AdapterControl, LoraControl
from unillm.fleet.fleet import FleetAdapters, FleetLoras


def test_the_old_names_are_the_new_objects() -> None:
    assert unillm.AdapterInfo is unillm.LoraInfo
    assert unillm.UnknownAdapter is unillm.UnknownLora
    assert issubclass(unillm.UnknownLora, unillm.NotFound)
    assert (LoraAdapters, BlockingAdapters, FleetAdapters, AdapterControl) == (
        Loras,
        BlockingLoras,
        FleetLoras,
        LoraControl,
    )


def test_llm_adapters_is_llm_loras() -> None:
    llm = unillm.LLM(FakeAdapter(), "http://127.0.0.1:9")
    assert isinstance(llm.loras, Loras) and llm.adapters is llm.loras
    with llm.blocking() as blocking:
        assert isinstance(blocking.loras, BlockingLoras) and blocking.adapters is blocking.loras


def test_fleet_adapters_is_fleet_loras() -> None:
    fleet = unillm.Fleet([unillm.LLM(FakeAdapter(), "http://127.0.0.1:9")])
    assert isinstance(fleet.loras, FleetLoras) and fleet.adapters is fleet.loras


def test_a_missing_lora_error_names_llm_loras() -> None:
    from unillm.adapter.http_errors import error_for_status
    from unillm.options import make_request

    request = make_request("Hi", None, None, {"lora": "sql"}, stream=False)
    error = error_for_status("fake", 404, "The model `sql` does not exist.", request)
    assert isinstance(error, unillm.UnknownLora) and "llm.loras.load" in str(error)
