"""Probe findings become refusals: a feature an engine version ignores is refused before sending."""

from __future__ import annotations

import pytest

import unillm
from unillm.adapter import Capabilities, Feature, Ignored, get_adapter, refuse_ignored
from unillm.capabilities import NATIVE
from unillm.testing.fault_server import CHAT, FaultServer

FINDING = Ignored(Feature.N, through="0.32.0", evidence="n=3 asked, got 1 choice(s)", fixed_in="0.33.0")


@pytest.mark.parametrize(
    ("through", "version", "applies"),
    [
        ("0.32.0", "0.32.0", True),
        ("0.32.0", "0.31.9", True),
        ("0.32.0", "0.33.0", False),
        ("0.32.0", None, False),
        (None, None, True),
        (None, "9.0.0", True),
    ],
)
def test_a_finding_covers_its_versions_up_to_through(
    through: str | None, version: str | None, applies: bool
) -> None:
    assert Ignored(Feature.SEED, through=through, evidence="e").applies(version) is applies


def test_only_the_covered_feature_is_refused_with_the_evidence() -> None:
    caps = Capabilities(engine="e", version="0.32.0", features={Feature.N: NATIVE, Feature.SEED: NATIVE})
    gated = refuse_ignored(caps, [FINDING])
    assert (gated.supports(Feature.N), gated.supports(Feature.SEED)) == (False, True)
    assert "n=3 asked, got 1" in gated.support(Feature.N).why
    assert "0.33.0" in gated.support(Feature.N).alternative


def _vllm() -> type:
    return type(get_adapter("vllm"))


@pytest.fixture
def n_ignored(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_vllm(), "ignored", (FINDING,))


@pytest.mark.anyio
@pytest.mark.usefixtures("n_ignored")
async def test_the_adapter_refuses_a_recorded_silent_drop_before_sending() -> None:
    with FaultServer(version="0.32.0") as server:
        async with unillm.connect("vllm", server.url) as llm:
            with pytest.raises(unillm.UnsupportedFeature, match="measured by unillm probe"):
                await llm.generate("hi", n=3)
        assert server.seen(CHAT) == [] and server.count("/v1/completions") == 0


@pytest.mark.anyio
@pytest.mark.usefixtures("n_ignored")
async def test_a_version_past_the_finding_sends_the_option() -> None:
    with FaultServer(version="0.33.0") as server:
        async with unillm.connect("vllm", server.url) as llm:
            await llm.generate("hi", n=3)
        assert server.count("/v1/completions") == 1


@pytest.mark.anyio
async def test_the_probe_reports_a_recorded_drop_as_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    with FaultServer() as server:  # it answers one choice whatever n asks
        async with unillm.connect("vllm", server.url) as llm:
            before = (await unillm.probe(llm, only=["n"])).cells[0].verdict
        monkeypatch.setattr(_vllm(), "ignored", (Ignored(Feature.N, through=None, evidence="e"),))
        async with unillm.connect("vllm", server.url) as llm:
            after = (await unillm.probe(llm, only=["n"])).cells[0].verdict
    assert (before, after) == ("ignored", "refused")
