"""``unillm probe`` against mlx-lm in process (the tiny random model, its 'sql' LoRA): every option
is honoured by its measured effect, refused before sending or not measurable — none is ignored."""

from __future__ import annotations

from typing import Any

import pytest

import unillm

pytestmark = [pytest.mark.anyio, pytest.mark.engine]
#: Proven by effect here, not just accepted.
HONOURED = {"temperature=0", "seed", "max_tokens", "n", "lora", "output=JSON schema", "stream usage"}


async def test_no_option_is_silently_dropped_by_mlx_in_process(inproc_settings: dict[str, Any]) -> None:
    async with unillm.launch("mlx", **inproc_settings) as llm:
        report = await unillm.probe(llm, samples=2)
        assert report.problems(honoured=HONOURED) == [], report.text()
