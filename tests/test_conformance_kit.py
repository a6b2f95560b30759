"""The adapter conformance kit: the fake adapter passes it, and each check catches a broken adapter."""

from __future__ import annotations

import json
import os
import socket
import sys
from collections.abc import Mapping
from typing import Any, ClassVar

import pytest
from fake_adapter import FakeAdapter, registered

from unillm.adapter.base import EngineInfo, HttpCall, parse_answer
from unillm.adapter.launch_spec import LaunchCommand, LaunchSpec
from unillm.adapter.openai_compat import OpenAIStreamDecoder
from unillm.adapter.refusals import Refuse
from unillm.adapter.registry import get_adapter
from unillm.capabilities import Capabilities, Feature, Support
from unillm.errors import EngineInternalError, UnillmError, UnknownEngine, UnsupportedFeature
from unillm.options import Request, make_request
from unillm.results import Completion
from unillm.testing import conformance
from unillm.testing.conformance import (
    ERROR_STATUSES,
    LAUNCH_PROBES,
    AdapterConformance,
    IOAttempted,
    blocked_io,
    openai_error,
    sse_payloads,
)

MODEL = "tiny"
ANSWER = {
    "id": "c",
    "object": "text_completion",
    "model": MODEL,
    "choices": [{"index": 0, "text": " there", "finish_reason": "length"}],
    "usage": {"prompt_tokens": 1, "completion_tokens": 1},
}
RECORDED_STREAM = """\
: a comment line

data: {"choices": [{"index": 0, "delta": {"role": "assistant", "content": "Hel"}}]}

data: {"choices": [{"index": 0, "delta": {"content": "lo"}, "finish_reason": "stop"}]}

data: [DONE]

"""
ERROR_BODIES = {status: openai_error(f"failed with {status}", status) for status in ERROR_STATUSES}


class FakeKit(AdapterConformance):
    adapter = FakeAdapter()
    info = EngineInfo(engine="fake", model=MODEL, version="1.0")
    answer_body = ANSWER
    answer_text = " there"
    stream_events = sse_payloads(RECORDED_STREAM)
    stream_text = "Hello"
    error_bodies = ERROR_BODIES


class TestFakeAdapterConformance(FakeKit):
    """The fake engine core tests use is itself a conforming adapter."""


def kit_for(adapter: FakeAdapter) -> FakeKit:
    kit: FakeKit = type("BrokenKit", (FakeKit,), {"adapter": adapter})()
    return kit


# -- each check catches what it is for -----------------------------------------------------------
class OpensFiles(FakeAdapter):
    def build(self, request: Request, info: EngineInfo) -> HttpCall:
        with open(os.devnull) as f:
            f.read()
        return super().build(request, info)


class Connects(FakeAdapter):
    def parse(
        self, body: Any, request: Request, info: EngineInfo, call: HttpCall | None = None
    ) -> Completion[Any]:
        socket.create_connection(("127.0.0.1", 9))
        return super().parse(body, request, info, call)


def test_io_in_a_translation_method_fails() -> None:
    with pytest.raises(IOAttempted, match="open"):
        kit_for(OpensFiles()).test_builds_a_json_call("prompt")
    with pytest.raises(IOAttempted, match="create_connection"):
        kit_for(Connects()).test_translation_does_no_io()


def test_blocked_io_is_undone_after_the_block() -> None:
    with blocked_io(), pytest.raises(IOAttempted):
        open(os.devnull)  # noqa: SIM115
    with open(os.devnull) as f:
        assert f.read() == ""


class SendsNaN(FakeAdapter):
    def build(self, request: Request, info: EngineInfo) -> HttpCall:
        call = super().build(request, info)
        body = {**(call.json or {}), "temperature": float("nan")}
        return HttpCall(call.method, call.path, body, call.stream)


def test_a_body_json_cannot_send_fails() -> None:
    with pytest.raises(ValueError, match="JSON compliant"):
        kit_for(SendsNaN()).test_builds_a_json_call("chat")


class ForgetsAFeature(FakeAdapter):
    def capabilities(self, version: str | None = None) -> Capabilities:
        caps = super().capabilities(version)
        return caps.model_copy(
            update={"features": {k: v for k, v in caps.features.items() if k is not Feature.SEED}}
        )


class RefusesSilently(FakeAdapter):
    def capabilities(self, version: str | None = None) -> Capabilities:
        caps = super().capabilities(version)
        return caps.model_copy(update={"features": {**caps.features, Feature.SEED: Support(level="no")}})


@pytest.mark.parametrize(
    ("adapter", "message"),
    [(ForgetsAFeature(), "undeclared: ..SEED"), (RefusesSilently(), "without saying why: ..SEED")],
)
def test_an_undeclared_or_unexplained_feature_fails(adapter: FakeAdapter, message: str) -> None:
    with pytest.raises(AssertionError, match=message):
        kit_for(adapter).test_declares_every_feature()


class LeaksTheKey(FakeAdapter):
    # under a flag whose name says nothing secret, so LaunchCommand cannot mask it by the name
    def command(self, spec: LaunchSpec) -> LaunchCommand:
        return LaunchCommand(argv=[*super().command(spec).argv, "--auth-header", f"Bearer {spec.key()}"])


class DropsTheKey(FakeAdapter):
    def command(self, spec: LaunchSpec) -> LaunchCommand:
        return super().command(spec.model_copy(update={"api_key": None}))


def test_a_printed_or_dropped_key_fails() -> None:
    with pytest.raises(AssertionError, match="the API key is printed"):
        kit_for(LeaksTheKey()).test_masks_the_api_key_in_printed_commands()
    with pytest.raises(AssertionError, match="not passed to the engine"):
        kit_for(DropsTheKey()).test_masks_the_api_key_in_printed_commands()


class AllErrorsInternal(FakeAdapter):
    def parse_error(
        self, status: int, body: bytes, request: Request | None, info: EngineInfo | None
    ) -> UnillmError:
        return EngineInternalError(
            f"fake answered {status}", engine=self.name, status=status, engine_message="x"
        )


def test_a_wrong_error_type_fails() -> None:
    kit = kit_for(AllErrorsInternal())
    kit.test_maps_error_answers_to_typed_errors(500)
    with pytest.raises(AssertionError, match="400 -> EngineInternalError, not InvalidRequest"):
        kit.test_maps_error_answers_to_typed_errors(400)


class NeverDone(OpenAIStreamDecoder):
    def feed(self, data: str) -> Any:
        return [] if data == "[DONE]" else super().feed(data)


class MissesTheEnd(FakeAdapter):
    def decoder(self, request: Request, info: EngineInfo, call: HttpCall | None = None) -> NeverDone:
        return NeverDone(self.name)


def test_a_stream_without_its_end_fails() -> None:
    with pytest.raises(AssertionError, match="did not see the end"):
        kit_for(MissesTheEnd()).test_decodes_the_canned_stream()


def test_a_wrong_answer_text_fails() -> None:
    kit = type("WrongText", (FakeKit,), {"answer_text": " here"})()
    with pytest.raises(AssertionError):
        kit.test_parses_the_canned_answer()


# -- helpers ---------------------------------------------------------------------------------------
def test_sse_payloads_keeps_data_and_drops_comments() -> None:
    assert sse_payloads(RECORDED_STREAM)[-1] == "[DONE]"
    assert [json.loads(p)["choices"][0]["delta"]["content"] for p in sse_payloads(RECORDED_STREAM)[:2]] == [
        "Hel",
        "lo",
    ]
    assert sse_payloads("data: a\ndata: b\r\n\r\nevent: x\n\n") == ["a\nb"]


def test_registered_makes_the_fake_findable_only_inside_the_block() -> None:
    with registered(FakeAdapter):
        assert isinstance(get_adapter("fake"), FakeAdapter)
    with pytest.raises(UnknownEngine):
        get_adapter("fake")


def test_error_bodies_cover_every_status() -> None:
    bodies: Mapping[int, bytes] = FakeKit.error_bodies
    assert set(bodies) == set(ERROR_STATUSES)


def test_a_declared_refusal_that_does_not_happen_fails() -> None:
    kit = type("ClaimsRefusal", (FakeKit,), {"refused_requests": {"chat": "no chat"}})()
    kit.test_builds_a_json_call("prompt")
    with pytest.raises(AssertionError, match="refused_requests says"):
        kit.test_builds_a_json_call("chat")


# -- the seam: the call build made ------------------------------------------------------------------
class ThreeArguments(FakeAdapter):
    """An adapter written before ``call=`` existed: it still works, called the old way."""

    def parse(self, body: Any, request: Request, info: EngineInfo) -> Completion[Any]:  # type: ignore[override]
        return super().parse(body, request, info)

    def decoder(self, request: Request, info: EngineInfo) -> OpenAIStreamDecoder:  # type: ignore[override]
        return super().decoder(request, info)


class SeesTheCall(FakeAdapter):
    seen: ClassVar[list[str]] = []

    def parse(
        self, body: Any, request: Request, info: EngineInfo, call: HttpCall | None = None
    ) -> Completion[Any]:
        self.seen.append(call.path if call is not None else "no call")
        return super().parse(body, request, info, call)


def test_an_adapter_without_call_still_parses_and_decodes_through_the_core_helpers() -> None:
    kit = kit_for(ThreeArguments())
    kit.test_parses_the_canned_answer()
    kit.test_decodes_the_canned_stream()
    with pytest.raises(AssertionError, match="takes no call= argument"):
        kit.test_reads_the_route_from_the_call()


def test_the_core_hands_parse_the_call_build_made() -> None:
    adapter, info = SeesTheCall(), EngineInfo(engine="fake", model="tiny")
    request = make_request("Hi", None, None, {}, stream=False)
    call = adapter.build(request, info)
    parse_answer(adapter, {"choices": [{"text": "x", "finish_reason": "stop"}]}, request, info, call)
    assert adapter.seen == ["/v1/completions"]


# -- launch settings: mapped, refused, or stated ------------------------------------------------
class DropsTheDtype(FakeAdapter):
    def command(self, spec: LaunchSpec) -> LaunchCommand:
        return super().command(spec.model_copy(update={"dtype": None}))


class RefusesTheDtype(DropsTheDtype):
    def command(self, spec: LaunchSpec) -> LaunchCommand:
        Refuse(self.name).set_settings(spec, {"dtype": "the fake engine has one dtype"})
        return super().command(spec)


class RefusesForAnotherEngine(DropsTheDtype):
    def command(self, spec: LaunchSpec) -> LaunchCommand:
        Refuse("other").set_settings(spec, {"dtype": "the fake engine has one dtype"})
        return super().command(spec)


def test_a_silently_dropped_launch_setting_fails() -> None:
    with pytest.raises(AssertionError, match=r"dtype: .* is silently dropped") as failed:
        kit_for(DropsTheDtype()).test_maps_or_refuses_the_launch_setting("dtype")
    # it says where a setting the engine honours by default goes: the adapter's kit test
    assert "BrokenKit (tests/test_conformance_kit.py)" in str(failed.value)
    assert "unchanged_launch_settings = {'dtype': " in str(failed.value)


def test_a_refused_launch_setting_passes() -> None:
    kit_for(RefusesTheDtype()).test_maps_or_refuses_the_launch_setting("dtype")


def test_a_refusal_in_another_engines_name_fails() -> None:
    with pytest.raises(AssertionError, match="must name fake and say why"):
        kit_for(RefusesForAnotherEngine()).test_maps_or_refuses_the_launch_setting("dtype")


def test_a_stated_unchanged_setting_passes_only_while_it_leaves_the_command() -> None:
    stated = {"dtype": "the fake engine has one dtype"}
    dropping: FakeKit = type(
        "Stated", (FakeKit,), {"adapter": DropsTheDtype(), "unchanged_launch_settings": stated}
    )()
    dropping.test_maps_or_refuses_the_launch_setting("dtype")
    mapping: FakeKit = type("Stale", (FakeKit,), {"unchanged_launch_settings": stated})()
    with pytest.raises(AssertionError, match="but it changes"):
        mapping.test_maps_or_refuses_the_launch_setting("dtype")


def test_the_core_refuses_what_the_capabilities_refuse() -> None:
    """The fake declares no multi-node support: the core refuses nodes= before command() runs."""
    kit = kit_for(FakeAdapter())
    base, spec = kit._probe_specs("nodes")
    refusal = kit._launch_or_refusal(spec)
    assert isinstance(refusal, UnsupportedFeature) and refusal.feature == Feature.MULTI_NODE.value
    assert isinstance(kit._launch_or_refusal(base), LaunchCommand)


class WithANewField(LaunchSpec):
    new_knob: int | None = None


def test_a_new_launch_spec_field_fails_until_it_is_classified(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(conformance, "LaunchSpec", WithANewField)
    with pytest.raises(AssertionError, match=r"neither probed .* \['new_knob'\]"):
        FakeKit().test_classifies_every_launch_setting()


def test_every_probe_sets_a_valid_value_the_baseline_lacks() -> None:
    kit = FakeKit()
    for probe in LAUNCH_PROBES:
        base, spec = kit._probe_specs(probe)
        assert base != spec, probe


# -- the default command is clean -----------------------------------------------------------------
class RendersFalse(FakeAdapter):
    """Puts ``--ep False`` in every command: a bool setting formatted with ``str()``."""

    def command(self, spec: LaunchSpec) -> LaunchCommand:
        command = super().command(spec)
        return LaunchCommand(argv=[*command.argv, "--ep", str(spec.parallel.expert)], env=command.env)


class RendersAnEmptyWord(FakeAdapter):
    def command(self, spec: LaunchSpec) -> LaunchCommand:
        return LaunchCommand(argv=[*super().command(spec).argv, "--served-model-name", ""])


class StartsItsOwnPython(FakeAdapter):
    """Starts the interpreter unillm runs in, not the engine env's (``spec.python``)."""

    def command(self, spec: LaunchSpec) -> LaunchCommand:
        command = super().command(spec)
        return LaunchCommand(argv=[sys.executable, *command.argv[1:]], env=command.env)


def test_an_adapter_rendering_false_in_every_command_fails_the_kit() -> None:
    kit = kit_for(RendersFalse())
    with pytest.raises(AssertionError, match=r"the default command renders \[\"argv\[\d+\] is 'False'\"\]"):
        kit.test_renders_a_clean_default_command()
    with pytest.raises(AssertionError, match="renders"):
        kit.test_maps_or_refuses_the_launch_setting("dtype")


def test_an_empty_word_or_another_interpreter_fails_the_kit() -> None:
    with pytest.raises(AssertionError, match="is ''"):
        kit_for(RendersAnEmptyWord()).test_renders_a_clean_default_command()
    with pytest.raises(AssertionError, match=r"not spec\.python"):
        kit_for(StartsItsOwnPython()).test_renders_a_clean_default_command()


def test_the_fake_adapter_renders_a_clean_command() -> None:
    kit_for(FakeAdapter()).test_renders_a_clean_default_command()
