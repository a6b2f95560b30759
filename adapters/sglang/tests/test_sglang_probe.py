"""``unillm probe`` against real SGLang-CPU (the tiny random model): every option is honoured by its
measured effect, refused before sending or not measurable — none is ignored."""

from __future__ import annotations

import pytest
from sglang_fixtures import SGLangServer

import unillm

pytestmark = [pytest.mark.anyio, pytest.mark.engine]

#: Proven by effect here, not just accepted.
HONOURED = {"temperature=0", "max_tokens", "n", "output=Regex", "output=Grammar", "stream usage"}


async def test_no_option_is_silently_dropped_on_sglang(sglang_server: SGLangServer) -> None:
    async with sglang_server.connect() as llm:
        report = await unillm.probe(llm, samples=2)
        assert report.problems(honoured=HONOURED) == [], report.text()
