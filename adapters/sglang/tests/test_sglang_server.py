"""A real SGLang server on this CPU machine, launched through unillm.launch (tiny random model).

Random weights give gibberish: the tests check shapes, finish reasons, usage and constraint
satisfaction, never content. Each behaviour is checked on both SGLang APIs: the OpenAI one
(``api="openai"``) and the native ``/generate`` (``api="native"``).
"""

from __future__ import annotations

import json
import re
from typing import Any

import anyio
import pytest
from pydantic import BaseModel, Field
from sglang_fixtures import SGLangServer
from unillm_sglang import SGLangAdapter

import unillm
from unillm.options import make_request
from unillm.testing.sample_requests import SAMPLING
from unillm.testing.streams import final_delta

pytestmark = [pytest.mark.anyio, pytest.mark.engine]
APIS = ["openai", "native"]
CHAT = [{"role": "user", "content": "Say something."}]
SCHEMA = {
    "type": "object",
    "properties": {"n": {"type": "integer", "minimum": 0, "maximum": 99}, "ok": {"type": "boolean"}},
    "required": ["n", "ok"],
    "additionalProperties": False,
}


class Pet(BaseModel):
    kind: str = Field(pattern="^(cat|dog)$")
    age: int = Field(ge=0, le=20)


# -- launch and discovery ----------------------------------------------------------------


async def test_launch_detects_version_served_model_and_context(sglang_server: SGLangServer) -> None:
    async with sglang_server.connect() as llm:
        info = await llm.info()
    assert info.engine == "sglang"
    assert info.version is not None and info.version.startswith("0.5.")
    assert info.model == "tiny"
    assert info.max_model_len == 1024


def test_launch_command_masks_the_api_key(sglang_server: SGLangServer) -> None:
    rendered = sglang_server.launch.command().render()
    assert sglang_server.api_key and sglang_server.api_key not in rendered
    assert "--api-key=***" in rendered
    assert "-m sglang.launch_server" in rendered


async def test_health_runs_a_generation_and_answers_true(sglang_server: SGLangServer) -> None:
    async with sglang_server.connect() as llm:
        assert await llm.health()


# -- generate and stream on both APIs ------------------------------------------------------


@pytest.mark.parametrize("api", APIS)
async def test_generate_reports_text_length_finish_and_usage(sglang_server: SGLangServer, api: Any) -> None:
    async with sglang_server.connect(api) as llm:
        r = await llm.generate("Once upon a time", max_tokens=12, temperature=0)
    assert isinstance(r.text, str) and r.text
    assert r.finish_reason == "length"
    assert r.usage.completion_tokens == 12
    assert r.usage.prompt_tokens > 0
    assert r.model == "tiny"
    assert r.timings.tokens_per_s is not None and r.timings.tokens_per_s > 0


@pytest.mark.parametrize("api", APIS)
async def test_stream_deltas_add_up_to_the_greedy_answer(sglang_server: SGLangServer, api: Any) -> None:
    async with sglang_server.connect(api) as llm:
        whole = await llm.generate("Once upon a time", max_tokens=16, temperature=0)
        deltas = [d async for d in llm.stream("Once upon a time", max_tokens=16, temperature=0)]
    assert "".join(d.text for d in deltas) == whole.text  # native text is cumulative: diffed
    last = final_delta(deltas)  # the only delta with usage and timings
    assert last.usage is not None and last.usage.completion_tokens == 16
    assert last.usage.prompt_tokens == whole.usage.prompt_tokens
    assert last.finish_reason == "length"
    assert last.timings is not None and last.timings.first_token_s is not None
    assert sum(1 for d in deltas if d.text) > 1


async def test_metrics_are_served_and_normalize(sglang_server: SGLangServer) -> None:
    async with sglang_server.connect() as llm:
        before = (await llm.metrics()).normalized()  # launched with --enable-metrics
        r = await llm.generate("Once upon a time", max_tokens=4, temperature=0)
        with anyio.fail_after(10):  # SGLang records a request's stats just after answering it
            while (window := (await llm.metrics()).normalized() - before).e2e is None or window.e2e.count < 1:
                await anyio.sleep(0.1)
    assert window.generation_tokens == r.usage.completion_tokens and window.ttft is not None
    assert window.waiting is not None and window.kv_cache_usage is not None
    assert window.spec_acceptance_rate is None  # not speculating: None, not SGLang's 0 gauge


async def test_chat_generate_and_stream_use_the_chat_template(sglang_server: SGLangServer) -> None:
    async with sglang_server.connect() as llm:
        r = await llm.generate(messages=CHAT, max_tokens=8, temperature=0)
        deltas = [d async for d in llm.stream(messages=CHAT, max_tokens=8, temperature=0)]
    assert r.usage.prompt_tokens > 5  # the template wraps the message
    assert r.usage.completion_tokens == 8
    assert "".join(d.text for d in deltas) == r.text
    streamed = deltas[-1].usage
    assert streamed is not None and None not in (streamed.cached_tokens, r.usage.cached_tokens)
    # the same counts, but the stream's prompt is served from the cache the first call filled
    assert streamed.model_copy(update={"cached_tokens": 0}) == r.usage.model_copy(update={"cached_tokens": 0})


@pytest.mark.parametrize("api", APIS)
async def test_n_choices_are_returned_and_counted(sglang_server: SGLangServer, api: Any) -> None:
    # Sampled tokens may include EOS, which would end a choice early: each decodes all 5 tokens.
    keep_going = {"ignore_eos": True} if api == "openai" else {"sampling_params": {"ignore_eos": True}}
    async with sglang_server.connect(api) as llm:
        r = await llm.generate("Hello", max_tokens=5, n=2, temperature=1.0, extra_body=keep_going)
        stream = llm.stream("Hello", max_tokens=5, n=2, temperature=1.0, extra_body=keep_going)
        deltas = [d async for d in stream]
    assert [c.index for c in r.choices] == [0, 1]
    assert all(c.finish_reason == "length" for c in r.choices)
    assert r.usage.completion_tokens == 10
    assert {d.index for d in deltas if d.text} == {0, 1}
    assert deltas[-1].usage is not None and deltas[-1].usage.completion_tokens == 10


@pytest.mark.parametrize("api", APIS)
async def test_logprobs_cover_every_token_with_the_top_alternatives(
    sglang_server: SGLangServer, api: Any
) -> None:
    async with sglang_server.connect(api) as llm:
        r = await llm.generate("Hello", max_tokens=6, temperature=0, top_logprobs=2)
        deltas = [d async for d in llm.stream("Hello", max_tokens=6, temperature=0, top_logprobs=2)]
    assert r.logprobs is not None and len(r.logprobs) == 6
    assert all(len(t.top) == 2 and t.logprob <= 0 for t in r.logprobs)
    streamed = [t for d in deltas for t in d.logprobs or ()]
    assert [t.token for t in streamed] == [t.token for t in r.logprobs]


@pytest.mark.parametrize("api", APIS)
async def test_every_sampling_option_is_accepted(sglang_server: SGLangServer, api: Any) -> None:
    async with sglang_server.connect(api) as llm:
        r = await llm.generate("Hello", max_tokens=4, **SAMPLING, stop=["\n\n\n"])
    assert r.usage.completion_tokens <= 4


async def test_seed_without_deterministic_inference_is_refused_before_sending(
    sglang_server: SGLangServer,
) -> None:
    async with sglang_server.connect() as llm:  # SGLang would ignore it and answer 200
        with pytest.raises(unillm.UnsupportedFeature, match="enable-deterministic-inference"):
            await llm.generate("Hello", max_tokens=2, seed=11)


async def test_early_exit_from_a_stream_leaves_the_server_usable(sglang_server: SGLangServer) -> None:
    async with sglang_server.connect("native") as llm:
        async with llm.stream("Hello", max_tokens=200) as stream:
            async for d in stream:
                if d.text:
                    break
        r = await llm.generate("Hello", max_tokens=2)
    assert r.usage.completion_tokens == 2


# -- constrained output ----------------------------------------------------------------------


@pytest.mark.parametrize("api", APIS)
async def test_json_schema_answer_validates(sglang_server: SGLangServer, api: Any) -> None:
    async with sglang_server.connect(api) as llm:
        r = await llm.generate("JSON:", output=SCHEMA, max_tokens=60)
    assert r.finish_reason == "stop" and r.parsed is not None
    assert set(r.parsed) == {"n", "ok"} and 0 <= r.parsed["n"] <= 99


@pytest.mark.parametrize("api", APIS)
async def test_pydantic_output_parses_into_the_model(sglang_server: SGLangServer, api: Any) -> None:
    async with sglang_server.connect(api) as llm:
        r = await llm.generate("Pet:", output=Pet, max_tokens=60)
    assert isinstance(r.parsed, Pet)


async def test_chat_json_schema_goes_through_response_format(sglang_server: SGLangServer) -> None:
    async with sglang_server.connect() as llm:
        r = await llm.generate(messages=CHAT, output=SCHEMA, max_tokens=60)
    assert json.loads(r.text) == r.parsed


@pytest.mark.parametrize("api", APIS)
async def test_regex_answer_matches_in_full(sglang_server: SGLangServer, api: Any) -> None:
    async with sglang_server.connect(api) as llm:
        r = await llm.generate("Date:", output=unillm.Regex(r"20[0-9]{2}-(0[1-9]|1[0-2])"), max_tokens=12)
    assert re.fullmatch(r"20[0-9]{2}-(0[1-9]|1[0-2])", r.text)


@pytest.mark.parametrize("api", APIS)
async def test_choice_answer_is_one_of_the_options_even_with_regex_metacharacters(
    sglang_server: SGLangServer, api: Any
) -> None:
    options = ["a+b", "(yes)", "no.", "maybe?"]
    async with sglang_server.connect(api) as llm:
        r = await llm.generate("Pick:", output=unillm.Choice(options), max_tokens=8)
    assert r.text in options and r.parsed == r.text


@pytest.mark.parametrize("api", APIS)
async def test_ebnf_grammar_answer_belongs_to_the_language(sglang_server: SGLangServer, api: Any) -> None:
    grammar = 'root ::= "x" digits ";"\ndigits ::= [0-9] | [0-9] digits'
    async with sglang_server.connect(api) as llm:
        r = await llm.generate("Code:", output=unillm.Grammar(grammar), max_tokens=12)
    if r.finish_reason == "stop":
        assert re.fullmatch(r"x[0-9]+;", r.text)
    else:  # cut at max_tokens: a prefix of a word, or a whole word whose last token was the twelfth
        assert re.fullmatch(r"x[0-9]*;?", r.text)


@pytest.mark.parametrize("api", APIS)
async def test_streamed_regex_answer_matches(sglang_server: SGLangServer, api: Any) -> None:
    async with sglang_server.connect(api) as llm:
        text = await llm.stream("Code:", output=unillm.Regex("[A-Z]{3}-[0-9]{2}"), max_tokens=10).collect()
    assert re.fullmatch("[A-Z]{3}-[0-9]{2}", text)


# -- errors --------------------------------------------------------------------------------


@pytest.mark.parametrize("api", APIS)
async def test_too_many_tokens_is_an_invalid_request_with_sglangs_message(
    sglang_server: SGLangServer, api: Any
) -> None:
    async with sglang_server.connect(api) as llm:
        with pytest.raises(unillm.InvalidRequest) as caught:
            await llm.generate("Hello", max_tokens=5000)
    assert caught.value.status == 400
    assert "context length" in caught.value.engine_message


@pytest.mark.parametrize("api", APIS)
async def test_invalid_regex_is_an_invalid_request(sglang_server: SGLangServer, api: Any) -> None:
    async with sglang_server.connect(api) as llm:
        with pytest.raises(unillm.InvalidRequest, match="regex"):
            await llm.generate("Hi", output=unillm.Regex("(["), max_tokens=4)


@pytest.mark.parametrize("api", APIS)
async def test_invalid_regex_in_a_stream_is_an_invalid_request(sglang_server: SGLangServer, api: Any) -> None:
    async with sglang_server.connect(api) as llm:
        stream = llm.stream("Hi", output=unillm.Regex("(["), max_tokens=4)
        with pytest.raises(unillm.InvalidRequest, match="regex"):  # native: an abort in a 200 stream
            await stream.collect()


async def test_invalid_grammar_is_an_invalid_request(sglang_server: SGLangServer) -> None:
    async with sglang_server.connect() as llm:
        with pytest.raises(unillm.InvalidRequest, match="ebnf"):
            await llm.generate("Hi", output=unillm.Grammar("root ::= "), max_tokens=4)


async def test_unknown_model_is_refused_instead_of_silently_served(sglang_server: SGLangServer) -> None:
    async with sglang_server.connect(model="another-model") as llm:
        with pytest.raises(unillm.UnknownModel, match="tiny"):
            await llm.generate("Hi", max_tokens=2)


async def test_served_model_name_is_accepted_as_model(sglang_server: SGLangServer) -> None:
    async with sglang_server.connect(model="tiny") as llm:
        r = await llm.generate("Hi", max_tokens=2, extra_body={"ignore_eos": True})  # random weights
    assert r.usage.completion_tokens == 2 and r.model == "tiny"


async def test_wrong_api_key_is_unauthorized(sglang_server: SGLangServer) -> None:
    async with unillm.connect("sglang", sglang_server.base_url, api_key="wrong") as llm:
        with pytest.raises(unillm.Unauthorized):
            await llm.generate("Hi", max_tokens=2)


async def test_lora_on_a_server_without_lora_is_refused_before_sending(sglang_server: SGLangServer) -> None:
    async with sglang_server.connect() as llm:
        with pytest.raises(unillm.UnsupportedFeature, match="without LoRA"):
            await llm.generate("Hi", max_tokens=2, lora="sql")


async def test_lark_grammar_is_refused_before_sending(sglang_server: SGLangServer) -> None:
    async with sglang_server.connect() as llm:
        with pytest.raises(unillm.UnsupportedFeature, match="Lark"):
            await llm.generate("Hi", output=unillm.Grammar('start: "a"', syntax="lark"), max_tokens=2)


async def test_chat_on_the_forced_native_api_is_refused_before_sending(sglang_server: SGLangServer) -> None:
    async with sglang_server.connect("native") as llm:
        with pytest.raises(unillm.UnsupportedFeature, match="chat"):
            await llm.generate(messages=CHAT, max_tokens=2)


# -- routing on the real server ------------------------------------------------------------


async def test_native_only_extra_body_fields_reach_generate(sglang_server: SGLangServer) -> None:
    async with sglang_server.connect() as llm:
        info = await llm.info()
        request_options: dict[str, Any] = {
            "max_tokens": 3,
            "extra_body": {"sampling_params": {"min_new_tokens": 3}},
        }
        r = await llm.generate("Hi", **request_options)
    request = make_request("Hi", None, None, request_options, stream=False)
    assert SGLangAdapter().route(request, info) == "native"
    assert r.usage.completion_tokens == 3


async def test_loading_a_lora_on_a_server_without_lora_is_refused_before_sending(
    sglang_server: SGLangServer, tiny: Any
) -> None:
    async with sglang_server.connect() as llm:
        with pytest.raises(unillm.UnsupportedFeature, match="without LoRA"):
            await llm.loras.load("sql", str(tiny.loras["sql"]))
