"""``unillm probe`` against real SGLang-CPU (the tiny random model), through its OpenAI-compatible
API and its native ``/generate``: every option is honoured by its measured effect, refused before
sending or not measurable — none is ignored."""

from __future__ import annotations

import pytest
from sglang_fixtures import SGLangServer
from unillm_sglang.adapter import ApiChoice

import unillm

pytestmark = [pytest.mark.anyio, pytest.mark.engine]

#: Proven by effect on either API, not just accepted.
HONOURED = {"temperature=0", "max_tokens", "output=Regex", "output=Grammar", "stream usage"}


@pytest.mark.parametrize("api", ["openai", "native"])
async def test_no_option_is_silently_dropped_on_sglang(sglang_server: SGLangServer, api: ApiChoice) -> None:
    async with sglang_server.connect(api) as llm:
        report = await unillm.probe(llm, samples=2)
    assert report.problems(honoured=HONOURED) == [], report.text()
