"""``unillm probe`` against real llama-cpp-python (the tiny random model, its LoRAs): every option
is honoured by its measured effect, refused before sending or not measurable — none is ignored."""

from __future__ import annotations

import pytest

import unillm
from unillm.testing.engines import RunningEngine

pytestmark = [pytest.mark.anyio, pytest.mark.engine]
#: Proven by effect here, not just accepted.
HONOURED = {"temperature=0", "seed", "max_tokens", "stop", "output=JSON schema", "output=Grammar"}


async def test_no_option_is_silently_dropped_on_llamacpp(llamacpp_server: RunningEngine) -> None:
    async with llamacpp_server.connect() as llm:
        report = await unillm.probe(llm, samples=2)
        assert report.problems(honoured=HONOURED) == [], report.text()
    # llama-cpp-python's streams carry no usage: the adapter's table says so before sending
    assert next(c for c in report.cells if c.option == "stream usage").verdict == "refused", report.text()
