"""The tiny trained model on real vLLM-CPU: sensible greedy answers, hermes tool calls, token counts."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic import BaseModel
from tokenizers import Tokenizer

import unillm
from unillm.testing.engines import RunningEngine, cpu_launch_settings
from unillm.testing.tiny_corpus import tool_schema
from unillm.testing.trained_model import build_trained_model

pytestmark = [pytest.mark.anyio, pytest.mark.engine]


class Capital(BaseModel):
    country: str
    capital: str


@pytest.fixture(scope="module")
def trained_server(workdir: Path) -> Iterator[RunningEngine]:
    """vLLM with the trained model and the hermes tool parser, torn down after this module."""
    settings = cpu_launch_settings("vllm", build_trained_model(), workdir / "trained",
                                   served_name="tiny-trained", tool_parser="hermes")
    launch = unillm.launch("vllm", **settings, log_path=workdir / "vllm-trained.log")
    with launch.blocking():
        yield RunningEngine(launch)


def ask(question: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": question}]


@pytest.mark.parametrize(("question", "answer"), [
    ("What is 2+3?", "5"),
    ("What is 6-4?", "2"),
    ("What is the capital of France?", "Paris"),
    ("What is the capital of Japan?", "Tokyo"),
    ("Hello", "Hello! How can I help you?"),
])
async def test_greedy_chat_answers_are_right(trained_server: RunningEngine, question: str,
                                             answer: str) -> None:
    async with trained_server.connect() as llm:
        r = await llm.generate(messages=ask(question), max_tokens=16, temperature=0)
    assert (r.text, r.finish_reason) == (answer, "stop")


async def test_a_prompt_is_completed_and_stops(trained_server: RunningEngine) -> None:
    async with trained_server.connect() as llm:
        r = await llm.generate("The capital of Italy is", max_tokens=16, temperature=0)
    assert (r.text, r.finish_reason) == (" Rome.", "stop")


async def test_json_answers_close_and_parse(trained_server: RunningEngine) -> None:
    async with trained_server.connect() as llm:
        free = await llm.generate(messages=ask("What is the capital of Peru? Reply in JSON."),
                                  max_tokens=40, temperature=0)
        constrained = await llm.generate(messages=ask("What is the capital of Kenya? Reply in JSON."),
                                         output=Capital, max_tokens=40, temperature=0)
    assert json.loads(free.text) == {"country": "Peru", "capital": "Lima"}
    assert constrained.parsed == Capital(country="Kenya", capital="Nairobi")


async def test_the_model_calls_an_offered_tool_when_the_question_needs_one(
    trained_server: RunningEngine,
) -> None:
    async with trained_server.connect() as llm:
        client = llm.openai()
        tools = [tool_schema("get_weather"), tool_schema("get_time")]
        call = await client.chat.completions.create(
            model="tiny-trained", messages=ask("What is the weather in Paris?"), tools=tools,  # type: ignore[arg-type]
            tool_choice="auto", temperature=0, max_tokens=60)
        plain = await client.chat.completions.create(
            model="tiny-trained", messages=ask("What is the capital of Spain?"), tools=tools,  # type: ignore[arg-type]
            tool_choice="auto", temperature=0, max_tokens=60)
    calls = call.choices[0].message.tool_calls or []
    assert [(c.function.name, json.loads(c.function.arguments)) for c in calls] == [  # type: ignore[union-attr]
        ("get_weather", {"city": "Paris"})]
    assert plain.choices[0].message.tool_calls in (None, []) and plain.choices[0].message.content == "Madrid"


async def test_after_a_tool_result_the_model_answers_from_it(trained_server: RunningEngine) -> None:
    messages = [*ask("What is the weather in Oslo?"),
                {"role": "assistant", "content": "", "tool_calls": [{
                    "id": "call_1", "type": "function",
                    "function": {"name": "get_weather", "arguments": json.dumps({"city": "Oslo"})}}]},
                {"role": "tool", "tool_call_id": "call_1",
                 "content": json.dumps({"city": "Oslo", "forecast": "snowy", "temperature": 2})}]
    async with trained_server.connect() as llm:
        answer = await llm.openai().chat.completions.create(
            model="tiny-trained", messages=messages, tools=[tool_schema("get_weather")],  # type: ignore[arg-type]
            temperature=0, max_tokens=40)
    assert answer.choices[0].message.content == "It is snowy and 2 degrees in Oslo."


async def test_tokenize_counts_what_generate_reads(trained_server: RunningEngine) -> None:
    tokenizer = Tokenizer.from_file(str(Path(trained_server.launch.spec.model) / "tokenizer.json"))
    async with trained_server.connect() as llm:
        text = await llm.tokenize("What is 2+3?")
        chat = await llm.tokenize(messages=ask("What is 2+3?"))
        r = await llm.generate(messages=ask("What is 2+3?"), max_tokens=2, temperature=0)
    assert text.ids == tokenizer.encode("What is 2+3?").ids and text.ids[0] == 0  # <s>
    assert chat.count == r.usage.prompt_tokens and chat.count > text.count
