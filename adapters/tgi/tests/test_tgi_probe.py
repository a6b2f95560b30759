"""``unillm probe`` end to end through the TGI adapter against the TGI look-alike (held to TGI's
published OpenAPI contract): every option is honoured by its effect, refused before sending or
not measurable on the look-alike's fixed answers — none is ignored."""

from __future__ import annotations

import pytest
from tgi_server import TGIServer

import unillm

pytestmark = pytest.mark.anyio
#: Proven by effect here, not just accepted.
HONOURED = {"max_tokens", "stop", "output=Regex", "output=Choice", "tool_choice=named"}


async def test_no_option_is_silently_dropped_through_the_tgi_adapter() -> None:
    # one token per character (stop strings cut anywhere), and room for the probe's long prompt
    pieces = tuple("Hello, world! The cat sat on the mat.")
    with TGIServer(pieces=pieces, max_input_tokens=2048, max_total_tokens=4096) as server:
        async with unillm.connect("tgi", server.url) as llm:
            report = await unillm.probe(llm, samples=2)
            assert report.problems(honoured=HONOURED) == [], report.text()
    assert server.errors == []
