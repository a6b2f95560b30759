"""``unillm probe`` end to end through the Ollama adapter against the Ollama look-alike (held to
Ollama's transcribed types): every option is honoured by its effect, refused before sending or
not measurable on the look-alike's fixed answers — none is ignored."""

from __future__ import annotations

import pytest
from ollama_server import OllamaServer

import unillm

pytestmark = pytest.mark.anyio
#: Proven by effect here, not just accepted.
HONOURED = {"logprobs/top_logprobs", "output=JSON schema", "thinking on/off", "stream usage"}


async def test_no_option_is_silently_dropped_through_the_ollama_adapter() -> None:
    with OllamaServer(store={"tiny:1b"}, thinking={"tiny:1b": ["Let", " me think."]}) as server:
        async with unillm.connect("ollama", server.url, model="tiny:1b") as llm:
            report = await unillm.probe(llm, samples=2)
            assert report.problems(honoured=HONOURED) == [], report.text()
    assert (server.errors, server.dropped) == ([], [])
