"""Generation against a real vLLM (CPU) launched through unillm, with the tiny random model.

Random weights produce gibberish, so these tests assert shapes, finish reasons, usage and
constraint satisfaction, never content.
"""

from __future__ import annotations

from typing import Literal

import anyio
import pytest
from pydantic import BaseModel, Field

import unillm
from unillm.testing.streams import final_delta
from unillm.testing.tiny_model import TinyModel

pytestmark = [pytest.mark.anyio, pytest.mark.engine]

PROMPT = "The quick brown fox"
CHAT = [{"role": "user", "content": "Say something."}]


async def test_generate_from_a_prompt_returns_text_usage_and_timings(llm: unillm.LLM) -> None:
    r = await llm.generate(PROMPT, max_tokens=8, temperature=0)
    assert r.text and r.finish_reason == "length"
    assert r.usage.completion_tokens == 8 and r.usage.prompt_tokens > 0
    assert r.engine == "vllm" and r.engine_version and r.model == "tiny"
    assert r.timings.total_s > 0 and r.timings.first_token_s is None


async def test_generate_from_chat_messages_uses_the_chat_template(llm: unillm.LLM) -> None:
    plain = await llm.generate(CHAT[0]["content"], max_tokens=6, temperature=0)
    chat = await llm.generate(messages=CHAT, max_tokens=6, temperature=0)
    assert chat.usage.completion_tokens == 6
    assert chat.usage.prompt_tokens > plain.usage.prompt_tokens  # the template adds tokens


@pytest.mark.parametrize("kind", ["prompt", "chat"])
async def test_stream_deltas_concatenate_to_the_greedy_generate_text(llm: unillm.LLM, kind: str) -> None:
    args = {"prompt": PROMPT} if kind == "prompt" else {"messages": CHAT}
    whole = await llm.generate(**args, max_tokens=24, temperature=0)
    deltas = [d async for d in llm.stream(**args, max_tokens=24, temperature=0)]
    assert "".join(d.text for d in deltas) == whole.text
    last = final_delta(deltas)  # the only delta with usage and timings
    assert last.usage == whole.usage and last.finish_reason == "length"
    assert last.timings is not None and last.timings.first_token_s is not None


async def test_stop_string_ends_the_answer_with_finish_reason_stop(llm: unillm.LLM) -> None:
    free = await llm.generate(PROMPT, max_tokens=24, temperature=0)
    stop = free.text[len(free.text) // 2 :][:2]
    assert stop.strip(), f"need a visible stop string, got {free.text!r}"
    r = await llm.generate(PROMPT, max_tokens=24, temperature=0, stop=[stop])
    assert r.finish_reason == "stop"
    assert stop not in r.text and free.text.startswith(r.text)


async def test_n_greater_than_one_returns_every_choice(llm: unillm.LLM) -> None:
    r = await llm.generate(PROMPT, max_tokens=5, n=3, temperature=1.0, seed=7)
    assert [c.index for c in r.choices] == [0, 1, 2]
    assert all(c.finish_reason == "length" for c in r.choices)
    assert r.usage.completion_tokens == 15


async def test_seed_makes_sampling_repeatable(llm: unillm.LLM) -> None:
    a = await llm.generate(PROMPT, max_tokens=12, temperature=1.0, seed=11)
    b = await llm.generate(PROMPT, max_tokens=12, temperature=1.0, seed=11)
    assert a.text == b.text


@pytest.mark.parametrize("kind", ["prompt", "chat"])
async def test_logprobs_come_back_per_token_with_top_alternatives(llm: unillm.LLM, kind: str) -> None:
    args = {"prompt": PROMPT} if kind == "prompt" else {"messages": CHAT}
    r = await llm.generate(**args, max_tokens=4, temperature=0, top_logprobs=3)
    assert r.logprobs is not None and len(r.logprobs) == 4
    for t in r.logprobs:
        assert t.logprob <= 0 and len(t.top) >= 3


async def test_sampling_options_are_accepted_by_the_engine(llm: unillm.LLM) -> None:
    r = await llm.generate(
        PROMPT,
        max_tokens=6,
        temperature=0.7,
        top_p=0.9,
        top_k=20,
        min_p=0.01,
        presence_penalty=0.5,
        frequency_penalty=0.5,
        repetition_penalty=1.1,
        seed=3,
    )
    assert r.usage.completion_tokens == 6


class Address(BaseModel):
    city: Literal["paris", "rome", "oslo"]
    zip: int = Field(ge=1000, le=9999)


class Person(BaseModel):
    name: str = Field(max_length=8)
    age: int = Field(ge=0, le=120)
    address: Address


class Order(BaseModel):
    items: list[Literal["tea", "cake", "soup"]] = Field(min_length=1, max_length=3)
    rush: bool


class Level(BaseModel):
    level: Literal["low", "mid", "high"]
    score: int = Field(ge=-5, le=5)


SCHEMA_DICT = {
    "type": "object",
    "properties": {
        "tags": {
            "type": "array",
            "items": {"type": "integer", "minimum": 0, "maximum": 9},
            "minItems": 2,
            "maxItems": 4,
        },
        "ok": {"type": "boolean"},
    },
    "required": ["tags", "ok"],
    "additionalProperties": False,
}


@pytest.mark.parametrize("model", [Person, Order, Level], ids=["nested", "array-enum", "enum-bounds"])
async def test_pydantic_output_parses_and_validates(llm: unillm.LLM, model: type[BaseModel]) -> None:
    r = await llm.generate(messages=CHAT, output=model, max_tokens=120, temperature=0)
    assert isinstance(r.parsed, model)


async def test_json_schema_dict_output_parses_and_validates(llm: unillm.LLM) -> None:
    r = await llm.generate(PROMPT, output=SCHEMA_DICT, max_tokens=60, temperature=0)
    assert isinstance(r.parsed, dict)
    assert 2 <= len(r.parsed["tags"]) <= 4 and all(0 <= t <= 9 for t in r.parsed["tags"])


async def test_structured_output_holds_for_every_sampled_choice(llm: unillm.LLM) -> None:
    r = await llm.generate(PROMPT, output=Level, max_tokens=60, n=3, temperature=1.0, seed=5)
    assert all(isinstance(c.parsed, Level) for c in r.choices)


async def test_regex_output_fully_matches(llm: unillm.LLM) -> None:
    pattern = r"[A-Z]{2}-\d{3}-[a-z]{2}"
    r = await llm.generate(PROMPT, output=unillm.Regex(pattern), max_tokens=20, temperature=0)
    import re

    assert re.fullmatch(pattern, r.text), r.text


async def test_choice_output_lands_in_the_set(llm: unillm.LLM) -> None:
    options = ["alpha", "beta", "gamma delta"]
    for seed in range(3):
        r = await llm.generate(
            PROMPT, output=unillm.Choice(options), max_tokens=8, temperature=1.0, seed=seed
        )
        assert r.parsed in options


async def test_grammar_output_follows_the_ebnf(llm: unillm.LLM) -> None:
    grammar = 'root ::= ("up" | "down") " " [0-9] [0-9]'
    r = await llm.generate(PROMPT, output=unillm.Grammar(grammar), max_tokens=8, temperature=0)
    import re

    assert re.fullmatch(r"(up|down) \d\d", r.text), r.text


async def test_constrained_stream_still_satisfies_the_constraint(llm: unillm.LLM) -> None:
    async with llm.stream(PROMPT, output=Level, max_tokens=60, temperature=0) as s:
        text = await s.collect()
    Level.model_validate_json(text)


async def test_lora_per_request_changes_the_greedy_output(llm: unillm.LLM) -> None:
    base = await llm.generate(PROMPT, max_tokens=16, temperature=0)
    tuned = await llm.generate(PROMPT, max_tokens=16, temperature=0, lora="sql")
    assert tuned.text != base.text


async def test_runtime_lora_load_use_list_and_unload(llm: unillm.LLM, tiny: TinyModel) -> None:
    await llm.loras.load("poem-rt", str(tiny.loras["poem"]))
    try:
        assert "poem-rt" in [a.name for a in await llm.loras.list()]
        base = await llm.generate(PROMPT, max_tokens=16, temperature=0)
        tuned = await llm.generate(PROMPT, max_tokens=16, temperature=0, lora="poem-rt")
        assert tuned.text != base.text
        with pytest.raises(unillm.InvalidRequest):
            await llm.loras.load("poem-rt", str(tiny.loras["poem"]))  # same name twice
    finally:
        await llm.loras.unload("poem-rt")
    assert "poem-rt" not in [a.name for a in await llm.loras.list()]
    with pytest.raises(unillm.UnknownLora):
        await llm.generate(PROMPT, max_tokens=4, lora="poem-rt")


async def test_loading_an_adapter_from_a_missing_path_is_not_found(llm: unillm.LLM) -> None:
    with pytest.raises(unillm.NotFound):
        await llm.loras.load("ghost", "/nonexistent/adapter")


async def test_breaking_out_of_a_stream_frees_the_engine(llm: unillm.LLM) -> None:
    async def running() -> float:
        value = (await llm.metrics()).value("vllm:num_requests_running")
        assert value is not None
        return value

    async with llm.stream(PROMPT, max_tokens=480, temperature=0) as s:
        async for _ in s:
            if len(s.text) > 3:
                break
    with anyio.fail_after(20):
        while await running() > 0:
            await anyio.sleep(0.2)


async def test_cancelling_a_stream_frees_the_engine(llm: unillm.LLM) -> None:
    got_some = anyio.Event()

    async def consume() -> None:
        async for _ in llm.stream(PROMPT, max_tokens=480, temperature=0):
            got_some.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(consume)
        await got_some.wait()
        tg.cancel_scope.cancel()
    with anyio.fail_after(20):
        while (await llm.metrics()).value("vllm:num_requests_running"):
            await anyio.sleep(0.2)


async def test_blocking_twin_generates_and_streams_inside_a_running_loop(llm: unillm.LLM) -> None:
    with llm.blocking() as sync:  # this test itself runs on an event loop, like Jupyter
        whole = sync.generate(PROMPT, max_tokens=8, temperature=0)
        streamed = "".join(d.text for d in sync.stream(PROMPT, max_tokens=8, temperature=0))
    assert streamed == whole.text


async def test_openai_client_talks_to_the_same_engine(llm: unillm.LLM) -> None:
    client = llm.openai()
    try:
        r = await client.completions.create(model="tiny", prompt=PROMPT, max_tokens=8, temperature=0)
    finally:
        await client.close()
    assert r.choices[0].text == (await llm.generate(PROMPT, max_tokens=8, temperature=0)).text
