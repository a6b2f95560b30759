"""``unillm probe`` against real SGLang-CPU (the tiny random model), through its OpenAI-compatible
API: every option is honoured by its measured effect, refused before sending or not measurable —
none is ignored. (The probe asks in chat messages, which SGLang's native ``/generate`` refuses
before sending: probed there, every cell would be "refused".)

Why this cannot flake: the cells that sample (temperature 1) are judged either by a count (``n``)
or by a grammar the engine enforces token by token (JSON schema, regex, choice, grammar); the
rest are greedy. The JSON-schema cell once failed here at random: xgrammar compiles the probe's
``"maxLength": 8`` string to a class that admits raw control characters (not JSON). unillm now
sends that bound as a pattern over the same count that admits none
(``unillm.adapter.schemas.xgrammar_strings``), so every complete answer is JSON whatever is
sampled — on a server unillm launched and on one it connected to (the client here is the latter:
it learns the backend from ``/get_server_info``; it once sent the bound as it was, and CI failed
on a raw U+0001). ``benchmarks/sglang_control_chars.py`` counts both paths. ``seed`` is refused
before sending (this server runs without ``--enable-deterministic-inference``).
"""

from __future__ import annotations

import pytest
from sglang_fixtures import SGLangServer

import unillm

pytestmark = [pytest.mark.anyio, pytest.mark.engine]

#: Proven by effect, not just accepted (greedy, or enforced by a grammar).
HONOURED = {"temperature=0", "max_tokens", "output=Regex", "output=Grammar", "stream usage"}


async def test_no_option_is_silently_dropped_on_sglang(sglang_server: SGLangServer) -> None:
    async with sglang_server.connect("openai") as llm:
        report = await unillm.probe(llm, samples=3)
    assert report.problems(honoured=HONOURED) == [], report.text()
    verdicts = {c.option: c.verdict for c in report.cells}
    assert verdicts["seed"] == "refused", report.text()
    assert verdicts["output=JSON schema"] in ("honoured", "unmeasurable"), report.text()
