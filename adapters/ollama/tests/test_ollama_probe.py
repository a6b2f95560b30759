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


async def test_litellms_ollama_chat_provider_is_probed_on_the_native_api() -> None:
    # LiteLLM talks to /api/chat itself (no /v1); Ollama has no tool_choice, and LiteLLM drops it
    # without a word: a forced call is silently not forced
    from unillm.probing import run_cells
    from unillm.probing.peers import LiteLLMClient

    with OllamaServer(store={"tiny:1b"}) as server:
        async with LiteLLMClient(server.url, "tiny:1b", provider="ollama_chat") as client:
            report = await run_cells(
                client,
                engine="ollama",
                model="tiny:1b",
                samples=1,
                only=["output=JSON schema", "tool_choice=required"],
            )
    assert report.client == "LiteLLM ollama_chat/"
    verdicts = {c.option: c.verdict for c in report.cells}
    assert verdicts == {"output=JSON schema": "honoured", "tool_choice=required": "ignored"}, report.text()
    paths = {path for path, _ in server.requests}
    assert "/api/chat" in paths and not any(p.startswith("/v1") for p in paths), paths
