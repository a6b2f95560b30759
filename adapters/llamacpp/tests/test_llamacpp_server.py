"""A real llama-cpp-python server (llama_cpp.server 0.3.36, CPU) launched through unillm.launch.

The tiny model has random weights: every constrained answer below is valid only because
llama.cpp enforces the GBNF grammar (or the JSON schema) while decoding.
"""

from __future__ import annotations

import json
import re
from typing import Any, Literal

import httpx
import jsonschema
import pytest
from pydantic import BaseModel, Field

import unillm
from unillm.errors import InvalidOptions, InvalidRequest, Unauthorized, UnknownLora, UnsupportedFeature
from unillm.testing.constraints import CONSTRAINT_SCHEMAS, assert_follows_sum_grammar
from unillm.testing.engines import RunningEngine

pytestmark = [pytest.mark.anyio, pytest.mark.engine]
PROMPT = "The capital of France is"
CHAT = [{"role": "user", "content": "Answer in JSON"}]

SCHEMAS = CONSTRAINT_SCHEMAS


class Ticket(BaseModel):
    priority: Literal["low", "normal", "urgent"]
    eta_days: int = Field(ge=0, le=30)
    tags: list[Literal["a", "b"]] = Field(max_length=2)


async def test_generate_reports_text_usage_and_the_engine_version(llamacpp_server: RunningEngine) -> None:
    async with llamacpp_server.connect() as llm:
        r = await llm.generate(PROMPT, max_tokens=8, temperature=0)
    assert r.text and r.finish_reason == "length"
    assert r.usage.completion_tokens == 8 and r.usage.prompt_tokens > 0
    assert (r.engine, r.engine_version) == ("llamacpp", "0.3.36")


@pytest.mark.parametrize("chat", [False, True])
async def test_stream_equals_generate_at_temperature_0(llamacpp_server: RunningEngine, chat: bool) -> None:
    args: dict[str, Any] = {"messages": [{"role": "user", "content": "Hi"}]} if chat else {"prompt": PROMPT}
    async with llamacpp_server.connect() as llm:
        whole = await llm.generate(**args, max_tokens=12, temperature=0)
        deltas = [d async for d in llm.stream(**args, max_tokens=12, temperature=0)]
    assert "".join(d.text for d in deltas) == whole.text
    assert deltas[-1].finish_reason == whole.finish_reason == "length"


@pytest.mark.parametrize("name", sorted(SCHEMAS))
async def test_json_schema_answers_validate(llamacpp_server: RunningEngine, name: str) -> None:
    schema = SCHEMAS[name]
    async with llamacpp_server.connect() as llm:
        r = await llm.generate(messages=CHAT, output=schema, max_tokens=150, temperature=0)
    assert r.finish_reason == "stop", r.text
    jsonschema.validate(json.loads(r.text), schema)
    assert r.parsed == json.loads(r.text)


async def test_pydantic_output_parses_even_when_sampling(llamacpp_server: RunningEngine) -> None:
    async with llamacpp_server.connect() as llm:
        for seed in range(3):
            r = await llm.generate(messages=CHAT, output=Ticket, max_tokens=80, temperature=1.0, seed=seed)
            assert isinstance(r.parsed, Ticket), r.text


async def test_regex_matches_in_full_for_prompts_and_chat(llamacpp_server: RunningEngine) -> None:
    pattern = r"20\d{2}-[01]\d-[0-3]\d"
    async with llamacpp_server.connect() as llm:
        r = await llm.generate("Due date:", output=unillm.Regex(pattern), max_tokens=16)
        chat = await llm.generate(messages=CHAT, output=unillm.Regex(r"[A-Z]{3}-[0-9]{3}"), max_tokens=16)
    assert re.fullmatch(pattern, r.text) and r.finish_reason == "stop", r.text
    assert re.fullmatch(r"[A-Z]{3}-[0-9]{3}", chat.text), chat.text


async def test_choice_is_one_of_the_options(llamacpp_server: RunningEngine) -> None:
    options = ["yes", "no", 'later, "maybe"']
    async with llamacpp_server.connect() as llm:
        for temperature in (0.0, 1.5):
            r = await llm.generate(
                "Ship it?", output=unillm.Choice(options), max_tokens=12, temperature=temperature, seed=7
            )
            assert r.text in options and r.parsed == r.text


async def test_gbnf_grammar_output_follows_the_grammar(llamacpp_server: RunningEngine) -> None:
    grammar = unillm.Grammar(
        'root ::= "(" expr ")"\nexpr ::= num | num "+" expr\nnum ::= [0-9] | [1-9] [0-9]'
    )
    async with llamacpp_server.connect() as llm:
        r = await llm.generate("Sum:", output=grammar, max_tokens=40)
    assert_follows_sum_grammar(r.text, r.finish_reason)


async def test_bad_grammars_never_crash_the_server(llamacpp_server: RunningEngine) -> None:
    async with llamacpp_server.connect() as llm:
        for bad in ('root ::= "unterminated', 'root ::= root "a" | "b"', 'root ::= x_y\nx_y ::= "a"'):
            with pytest.raises(InvalidOptions):  # refused by unillm before sending
                await llm.generate("x", output=unillm.Grammar(bad), max_tokens=4)
            # Sent anyway (past unillm's check): the launched server's guard answers 400.
            with pytest.raises(InvalidRequest, match="GBNF"):
                await llm.generate("x", extra_body={"grammar": bad}, max_tokens=4)
        r = await llm.generate(PROMPT, max_tokens=2)  # still serving
    assert r.usage.completion_tokens == 2


async def test_typed_errors_for_bad_input(llamacpp_server: RunningEngine) -> None:
    async with llamacpp_server.connect() as llm:
        with pytest.raises(InvalidRequest):  # answered 500 by the server: a validation error
            await llm.generate(PROMPT, max_tokens=2, extra_body={"top_p": 7})
        with pytest.raises(InvalidRequest):  # longer than the context
            await llm.generate(PROMPT * 400, max_tokens=2)
        with pytest.raises(UnsupportedFeature):
            await llm.generate(PROMPT, output={"type": "object"}, max_tokens=4)
        with pytest.raises(UnsupportedFeature):
            await llm.generate(PROMPT, n=2, max_tokens=4)
        with pytest.raises(UnsupportedFeature):
            await llm.loras.load("x", "/tmp/x.gguf")
    async with unillm.connect("llamacpp", llamacpp_server.base_url, api_key="wrong") as stranger:
        with pytest.raises(Unauthorized):
            await stranger.generate(PROMPT, max_tokens=2)


async def test_lora_by_name_changes_greedy_output_and_unknown_names_are_refused(
    llamacpp_server: RunningEngine,
) -> None:
    async with llamacpp_server.connect() as llm:
        base = await llm.generate(PROMPT, max_tokens=12, temperature=0)
        sql = await llm.generate(PROMPT, max_tokens=12, temperature=0, lora="sql")
        poem = await llm.generate(PROMPT, max_tokens=12, temperature=0, lora="poem")
        again = await llm.generate(PROMPT, max_tokens=12, temperature=0)
        with pytest.raises(UnknownLora):
            await llm.generate(PROMPT, max_tokens=2, lora="nope")
    assert len({base.text, sql.text, poem.text}) == 3
    assert again.text == base.text


async def test_a_connected_client_learns_the_lora_names_from_the_server(
    llamacpp_server: RunningEngine,
) -> None:
    async with unillm.connect("llamacpp", llamacpp_server.base_url, api_key=llamacpp_server.api_key) as llm:
        r = await llm.generate(PROMPT, max_tokens=4, temperature=0, lora="sql")
        with pytest.raises(UnknownLora):
            await llm.generate(PROMPT, max_tokens=2, lora="nope")
    assert r.usage.completion_tokens == 4


async def test_tokenize_counts_the_prompt(llamacpp_server: RunningEngine) -> None:
    async with llamacpp_server.connect() as llm:
        t = await llm.tokenize(PROMPT)
        r = await llm.generate(PROMPT, max_tokens=1)
    assert t.count == r.usage.prompt_tokens > 0


async def test_forced_tool_call_is_read_back(llamacpp_server: RunningEngine) -> None:
    def get_weather(city: Literal["Rome", "Paris"]) -> str:  # an enum: random weights close it
        """Weather in a city."""
        return city

    async with llamacpp_server.connect() as llm:
        r = await llm.generate(
            messages=[{"role": "user", "content": "Weather in Rome?"}],
            tools=[get_weather],
            tool_choice="get_weather",
            max_tokens=60,
            temperature=0,
        )
    assert r.finish_reason == "tool_calls" and r.tool_calls[0].name == "get_weather"
    assert r.tool_calls[0].parsed == {"city": r.tool_calls[0].parsed["city"]}
    assert r.tool_calls[0].parsed["city"] in ("Rome", "Paris")


async def test_prompt_lookup_speculation_keeps_greedy_output(
    llamacpp_server: RunningEngine,
    llamacpp_lookup_server: RunningEngine,
) -> None:
    prompt = "one two three one two three one two"
    async with llamacpp_server.connect() as plain, llamacpp_lookup_server.connect() as lookup:
        a = await plain.generate(prompt, max_tokens=16, temperature=0)
        b = await lookup.generate(prompt, max_tokens=16, temperature=0)
    assert a.text == b.text
    assert "prompt-lookup-decoding" in " ".join(llamacpp_lookup_server.launch.command().argv)


async def test_readiness_path_answers_without_the_key(llamacpp_server: RunningEngine) -> None:
    async with httpx.AsyncClient() as client:
        health = await client.get(llamacpp_server.base_url + "/openapi.json")
        models = await client.get(llamacpp_server.base_url + "/v1/models")
    assert health.status_code == 200 and health.json()["info"]["version"] == "0.3.36"
    assert models.status_code == 401


async def test_logprobs_on_prompts_and_chat(llamacpp_server: RunningEngine) -> None:
    async with llamacpp_server.connect() as llm:
        r = await llm.generate(PROMPT, max_tokens=3, temperature=0, logprobs=True, top_logprobs=2)
        c = await llm.generate(messages=CHAT, max_tokens=3, temperature=0, logprobs=True)
    prompt_lp, chat_lp = r.choices[0].logprobs, c.choices[0].logprobs
    assert prompt_lp is not None and len(prompt_lp) == 3 and all(len(t.top) == 2 for t in prompt_lp)
    assert "".join(t.token for t in prompt_lp) == r.text
    assert chat_lp is not None and len(chat_lp) == 3 and all(t.logprob <= 0 for t in chat_lp)
