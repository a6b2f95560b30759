"""LoRA adapters are "loras" (``llm.loras``, ``LoraInfo``, ``UnknownLora``): "adapter" names engine
adapters. The pre-release "adapter" names for LoRAs are gone."""

from __future__ import annotations

import pytest
from fake_adapter import FakeAdapter

import unillm
from unillm.client import blocking, llm, protocol
from unillm.fleet import fleet

OLD_NAMES = [
    (unillm, "AdapterInfo"),
    (unillm, "UnknownAdapter"),
    (llm, "LoraAdapters"),
    (blocking, "BlockingAdapters"),
    (fleet, "FleetAdapters"),
    (protocol, "AdapterControl"),
]


@pytest.mark.parametrize(("module", "name"), OLD_NAMES, ids=[n for _, n in OLD_NAMES])
def test_the_deprecated_lora_alias_is_gone(module: object, name: str) -> None:
    assert not hasattr(module, name)


def test_llm_fleet_and_blocking_twin_have_loras_and_no_adapters_alias() -> None:
    one = unillm.LLM(FakeAdapter(), "http://127.0.0.1:9")
    many = unillm.Fleet([unillm.LLM(FakeAdapter(), "http://127.0.0.1:9")])
    with one.blocking() as twin:
        assert isinstance(twin.loras, blocking.BlockingLoras) and not hasattr(twin, "adapters")
    assert isinstance(one.loras, llm.Loras) and not hasattr(one, "adapters")
    assert isinstance(many.loras, fleet.FleetLoras) and not hasattr(many, "adapters")


def test_a_missing_lora_error_names_llm_loras() -> None:
    from unillm.adapter.http_errors import error_for_status
    from unillm.options import make_request

    request = make_request("Hi", None, None, {"lora": "sql"}, stream=False)
    error = error_for_status("fake", 404, "The model `sql` does not exist.", request)
    assert isinstance(error, unillm.UnknownLora) and "llm.loras.load" in str(error)
