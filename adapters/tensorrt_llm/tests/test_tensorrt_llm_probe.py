"""``unillm probe`` end to end through the TensorRT-LLM adapter against an OpenAI look-alike that
honours the options by effect and answers 400 to what trtllm-serve's protocol models refuse:
every option is honoured, refused before sending or not measurable — none is ignored."""

from __future__ import annotations

import pytest
from trtllm_protocol import request_problem

import unillm
from unillm.testing.honest_server import HonestServer

pytestmark = pytest.mark.anyio
#: Proven by effect here, not just accepted.
HONOURED = {"seed", "n", "logprobs/top_logprobs", "output=Regex", "output=Grammar"}


async def test_no_option_is_silently_dropped_through_the_tensorrt_llm_adapter() -> None:
    with HonestServer(model="tiny", version="1.2.1") as server:
        server.check = request_problem
        async with unillm.connect("tensorrt_llm", server.url) as llm:
            report = await unillm.probe(llm, samples=2)
            assert report.problems(honoured=HONOURED) == [], report.text()
    assert server.errors == []
