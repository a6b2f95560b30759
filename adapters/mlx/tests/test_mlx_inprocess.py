"""mlx-lm inside the test process, through unillm.launch(..., in_process=True), with the tiny model.

The model has random weights: every constrained answer below is valid only because unillm's
llguidance processor constrains decoding.
"""

from __future__ import annotations

import itertools
import json
import re
import time
from typing import Any, Literal

import anyio
import jsonschema
import pytest
from pydantic import BaseModel, Field

import unillm
from unillm.testing.constraints import CONSTRAINT_SCHEMAS, assert_follows_sum_grammar, with_properties
from unillm.testing.streams import final_delta
from unillm.testing.tiny_model import TinyModel

pytestmark = [pytest.mark.anyio, pytest.mark.engine]
PROMPT = "The capital of France is"

SCHEMAS: dict[str, dict[str, Any]] = {
    **CONSTRAINT_SCHEMAS,
    "integer_bounds": with_properties(
        CONSTRAINT_SCHEMAS["integer_bounds"],
        big={"type": "integer", "exclusiveMinimum": 1000, "maximum": 1010},
    ),
    "optional_and_null": {
        "type": "object",
        "properties": {
            "note": {"anyOf": [{"type": "string", "maxLength": 4}, {"type": "null"}]},
            "rank": {"type": "integer", "minimum": 1, "maximum": 3},
        },
        "required": ["note"],
        "additionalProperties": False,
    },
}


class Ticket(BaseModel):
    priority: Literal["low", "normal", "urgent"]
    eta_days: int = Field(ge=0, le=30)
    tags: list[Literal["a", "b"]] = Field(max_length=2)


@pytest.mark.parametrize("name", sorted(SCHEMAS))
async def test_mlx_inproc_json_schema_answers_validate(name: str, inproc_settings: dict[str, Any]) -> None:
    schema = SCHEMAS[name]
    async with unillm.launch("mlx", **inproc_settings) as llm:
        for prompt in (PROMPT, "Answer in JSON:"):
            r = await llm.generate(prompt, output=schema, max_tokens=120, temperature=0)
            assert r.finish_reason == "stop", r.text
            jsonschema.validate(json.loads(r.text), schema)
            assert r.parsed == json.loads(r.text)


async def test_mlx_inproc_pydantic_output_parses_even_when_sampling(inproc_settings: dict[str, Any]) -> None:
    async with unillm.launch("mlx", **inproc_settings) as llm:
        for seed in range(3):
            r = await llm.generate("New ticket:", output=Ticket, max_tokens=80, temperature=1.0, seed=seed)
            assert isinstance(r.parsed, Ticket)


async def test_mlx_inproc_regex_matches_in_full(inproc_settings: dict[str, Any]) -> None:
    pattern = r"20\d{2}-[01]\d-[0-3]\d"
    async with unillm.launch("mlx", **inproc_settings) as llm:
        r = await llm.generate("Due date:", output=unillm.Regex(pattern), max_tokens=16)
        chat = await llm.generate(
            messages=[{"role": "user", "content": "code?"}],
            output=unillm.Regex(r"[A-Z]{3}-[0-9]{3}"),
            max_tokens=16,
        )
    assert re.fullmatch(pattern, r.text) and r.finish_reason == "stop"
    assert re.fullmatch(r"[A-Z]{3}-[0-9]{3}", chat.text)


async def test_mlx_inproc_choice_is_one_of_the_options(inproc_settings: dict[str, Any]) -> None:
    options = ["yes", "no", "later, maybe"]
    async with unillm.launch("mlx", **inproc_settings) as llm:
        for temperature in (0.0, 1.5):
            r = await llm.generate(
                "Ship it?", output=unillm.Choice(options), max_tokens=8, temperature=temperature, seed=7
            )
            assert r.text in options and r.parsed == r.text


@pytest.mark.parametrize(
    "grammar",
    [
        unillm.Grammar('root ::= "(" expr ")"\nexpr ::= num | num "+" expr\nnum ::= [0-9] | [1-9] [0-9]'),
        unillm.Grammar(
            'start: "(" expr ")"\nexpr: NUM | NUM "+" expr\nNUM: /[0-9]|[1-9][0-9]/', syntax="lark"
        ),
    ],
)
async def test_mlx_inproc_grammar_output_follows_the_grammar(
    grammar: unillm.Grammar, inproc_settings: dict[str, Any]
) -> None:
    async with unillm.launch("mlx", **inproc_settings) as llm:
        r = await llm.generate("Sum:", output=grammar, max_tokens=40)
    assert_follows_sum_grammar(r.text, r.finish_reason)


async def test_mlx_inproc_event_loop_keeps_ticking_while_generating(inproc_settings: dict[str, Any]) -> None:
    ticks: list[float] = []

    async def ticker() -> None:
        while True:
            ticks.append(time.perf_counter())
            await anyio.sleep(0.01)

    async with unillm.launch("mlx", **inproc_settings) as llm:
        await llm.generate("warm up", max_tokens=2)
        async with anyio.create_task_group() as tg:
            tg.start_soon(ticker)
            t0 = time.perf_counter()
            r = await llm.generate(PROMPT, max_tokens=400, output=unillm.Regex("[a-z ]{400}"))
            t1 = time.perf_counter()
            deltas = [d async for d in llm.stream(PROMPT, max_tokens=400)]
            t2 = time.perf_counter()
            tg.cancel_scope.cancel()
    assert re.fullmatch("[a-z ]{400}", r.text) and len(deltas) > 200
    # A generation that blocked the loop would leave one gap spanning its whole window, with no tick
    # inside. The loop must instead have ticked many times in each window, and never stalled for most
    # of one (a loaded machine may pause the process for a while, so not a tight bound).
    for start, end in ((t0, t1), (t1, t2)):
        inside = [t for t in ticks if start <= t <= end]
        gaps = [b - a for a, b in itertools.pairwise([start, *inside, end])]
        assert len(inside) > 8 and max(gaps) < (end - start) * 0.6, (len(inside), max(gaps), end - start)


async def test_mlx_inproc_stream_delivers_tokens_as_they_come(inproc_settings: dict[str, Any]) -> None:
    async with unillm.launch("mlx", **inproc_settings) as llm:
        whole = await llm.generate(PROMPT, max_tokens=64)
        arrivals: list[float] = []
        texts: list[str] = []
        deltas = []
        async with llm.stream(PROMPT, max_tokens=64) as s:
            async for d in s:
                arrivals.append(time.perf_counter())
                texts.append(d.text)
                deltas.append(d)
        last = d
    assert "".join(texts) == whole.text and len(arrivals) > 32
    final_delta(deltas)  # the only delta with usage and timings
    assert last.usage is not None and last.usage.completion_tokens == 64 and last.finish_reason == "length"
    assert last.timings is not None and last.timings.first_token_s is not None
    assert last.timings.first_token_s < last.timings.total_s


async def test_mlx_inproc_leaving_a_stream_early_stops_it_and_the_engine_goes_on(
    inproc_settings: dict[str, Any],
) -> None:
    async with unillm.launch("mlx", **inproc_settings) as llm:
        async with llm.stream(PROMPT, max_tokens=500) as s:
            async for _ in s:
                break
        r = await llm.generate(PROMPT, max_tokens=4)
    assert r.usage.completion_tokens == 4


async def test_mlx_inproc_lora_by_name_and_at_runtime_change_greedy_output(
    tiny: TinyModel, inproc_settings: dict[str, Any]
) -> None:
    async with unillm.launch("mlx", **inproc_settings) as llm:
        base = await llm.generate(PROMPT, max_tokens=16)
        sql = await llm.generate(PROMPT, max_tokens=16, lora="sql")
        await llm.loras.load("poem", str(tiny.loras["poem"]))
        assert {a.name for a in await llm.loras.list()} == {"sql", "poem"}
        poem = await llm.generate(PROMPT, max_tokens=16, lora="poem")
        sql_constrained = await llm.generate(PROMPT, max_tokens=40, lora="sql", output=SCHEMAS["enums"])
        await llm.loras.unload("poem")
        with pytest.raises(unillm.UnknownLora):
            await llm.generate(PROMPT, max_tokens=4, lora="poem")
        again = await llm.generate(PROMPT, max_tokens=16)
    assert len({base.text, sql.text, poem.text}) == 3 and again.text == base.text
    jsonschema.validate(json.loads(sql_constrained.text), SCHEMAS["enums"])


async def test_mlx_inproc_matches_the_server_for_base_and_lora(
    mlx_server: Any, inproc_settings: dict[str, Any]
) -> None:
    async with unillm.launch("mlx", **inproc_settings) as local, mlx_server.connect() as remote:
        for lora in (None, "sql"):
            options: dict[str, Any] = {"max_tokens": 16, "temperature": 0}
            if lora:
                options["lora"] = lora
            mine, theirs = await local.generate(PROMPT, **options), await remote.generate(PROMPT, **options)
            assert mine.text == theirs.text


async def test_mlx_inproc_draft_speculation_keeps_greedy_and_constrained_output(
    tiny: TinyModel, inproc_settings: dict[str, Any]
) -> None:
    spec = unillm.Speculative(method="draft", draft_model=str(tiny.path), num_tokens=3)
    async with (
        unillm.launch("mlx", **inproc_settings) as plain,
        unillm.launch("mlx", **inproc_settings, speculative=spec) as fast,
    ):
        for output in (None, SCHEMAS["integer_bounds"], unillm.Regex(r"[a-z ]{5,20}")):
            want = await plain.generate(PROMPT, output=output, max_tokens=40)
            got = await fast.generate(PROMPT, output=output, max_tokens=40)
            assert got.text == want.text
        accepted = (await fast.metrics()).value("mlx:spec_decode_num_accepted_tokens_total")
        assert accepted is not None and accepted > 0  # the draft did propose the tokens
        assert (await plain.metrics()).value("mlx:spec_decode_num_accepted_tokens_total") == 0


async def test_mlx_inproc_metrics_count_requests_and_tokens(inproc_settings: dict[str, Any]) -> None:
    async with unillm.launch("mlx", **inproc_settings) as llm:
        r = await llm.generate(PROMPT, max_tokens=5)
        m = await llm.metrics()
    assert m.value("mlx:requests_total") == 1 and m.value("mlx:generation_tokens_total") == 5
    assert m.value("mlx:prompt_tokens_total") == r.usage.prompt_tokens
    assert m.value("mlx:num_requests_running") == 0


async def test_mlx_inproc_capabilities_mark_constraints_as_provided_by_unillm(
    inproc_settings: dict[str, Any],
) -> None:
    async with unillm.launch("mlx", **inproc_settings) as llm:
        caps = await llm.capabilities()
    assert caps.version is not None and caps.version.endswith("+in-process")
    for feature in (
        unillm.Feature.JSON_SCHEMA,
        unillm.Feature.REGEX,
        unillm.Feature.CHOICE,
        unillm.Feature.GRAMMAR,
        unillm.Feature.GRAMMAR_LARK,
    ):
        assert caps.support(feature).level == "emulated"


async def test_mlx_inproc_sampling_options_logprobs_n_and_stop(inproc_settings: dict[str, Any]) -> None:
    async with unillm.launch("mlx", **inproc_settings) as llm:
        r = await llm.generate(PROMPT, max_tokens=6, logprobs=True, top_logprobs=3)
        many = await llm.generate(PROMPT, max_tokens=8, n=3, temperature=1.0, seed=1, top_k=20, min_p=0.01)
        sampled = await llm.generate(
            PROMPT,
            max_tokens=8,
            temperature=0.9,
            top_p=0.9,
            seed=3,
            repetition_penalty=1.2,
            presence_penalty=0.5,
            frequency_penalty=0.5,
        )
        plain = await llm.generate(PROMPT, max_tokens=20)
        stop = plain.text[5:8]
        stopped = await llm.generate(PROMPT, max_tokens=20, stop=[stop])
    assert r.logprobs is not None and len(r.logprobs) == 6
    assert all(len(t.top) == 3 and t.top[0].logprob >= t.top[-1].logprob for t in r.logprobs)
    assert [c.index for c in many.choices] == [0, 1, 2] and many.usage.completion_tokens == 24
    assert sampled.usage.completion_tokens == 8
    assert stopped.finish_reason == "stop" and stopped.text == plain.text[: plain.text.find(stop)]


async def test_mlx_inproc_logit_bias_takes_effect(inproc_settings: dict[str, Any]) -> None:
    async with unillm.launch("mlx", **inproc_settings) as llm:
        tokens = []
        for favoured in (5, 6):  # +100 outweighs any logit of the random model: every token is it
            bias = {"logit_bias": {str(favoured): 100}}
            r = await llm.generate(PROMPT, max_tokens=4, logprobs=True, extra_body=bias)
            assert r.logprobs is not None
            tokens.append({t.token for t in r.logprobs})
    assert len(tokens[0]) == len(tokens[1]) == 1 and tokens[0] != tokens[1]


async def test_mlx_inproc_errors_are_typed(inproc_settings: dict[str, Any]) -> None:
    async with unillm.launch("mlx", **inproc_settings) as llm:
        with pytest.raises(unillm.InvalidRequest, match="regex"):
            await llm.generate("x", output=unillm.Regex("(("), max_tokens=4)
        with pytest.raises(unillm.InvalidRequest, match="grammar"):
            await llm.generate("x", output=unillm.Grammar("root ::= undefined_rule"), max_tokens=4)
        with pytest.raises(unillm.InvalidRequest, match="unsupported field"):
            await llm.generate("x", max_tokens=4, extra_body={"no_such_field": 1})
        with pytest.raises(unillm.UnknownLora):
            await llm.generate("x", max_tokens=4, lora="missing")
    async with unillm.launch("mlx", **inproc_settings, max_model_len=16) as llm:
        with pytest.raises(unillm.InvalidRequest, match="max_model_len"):
            await llm.generate(PROMPT, max_tokens=32)
    async with unillm.launch("mlx", model="/nonexistent/model", in_process=True) as llm:
        with pytest.raises(unillm.UnknownModel):
            await llm.generate("x", max_tokens=2)


async def test_mlx_inproc_refuses_launch_settings_it_cannot_honour(tiny: TinyModel) -> None:
    with pytest.raises(unillm.UnsupportedFeature, match="parallel"):
        async with unillm.launch(
            "mlx", model=str(tiny.path), in_process=True, parallel=unillm.Parallel(tensor=2)
        ):
            pass


async def test_mlx_inproc_text_keeps_the_first_tokens_leading_space_as_vllm_does(
    inproc_settings: dict[str, Any],
) -> None:
    """The tiny tokenizer is byte-level BPE: each token's own text carries its space ('Ġ47' -> ' 47'),
    so the answer must be exactly the tokens' texts joined; mlx-lm's detokenizer trimmed the first."""
    async with unillm.launch("mlx", **inproc_settings) as llm:
        for prompt in (PROMPT, "Hello", "x ="):
            r = await llm.generate(prompt, max_tokens=12, temperature=0, logprobs=True)
            assert r.logprobs is not None
            assert r.text == "".join(t.token for t in r.logprobs)
            streamed = "".join([d.text async for d in llm.stream(prompt, max_tokens=12, temperature=0)])
            assert streamed == r.text
        chat = [{"role": "user", "content": "hi"}]
        r = await llm.generate(messages=chat, max_tokens=12, temperature=0, logprobs=True)
        assert r.logprobs is not None and r.text == "".join(t.token for t in r.logprobs)


async def test_mlx_inproc_reports_the_context_limit_it_enforces(
    inproc_settings: dict[str, Any], tiny: TinyModel
) -> None:
    async with unillm.launch("mlx", **inproc_settings) as llm:
        assert (await llm.info()).max_model_len == tiny.max_position  # the model's own, as vLLM
        with pytest.raises(unillm.InvalidRequest, match=f"max_model_len={tiny.max_position}"):
            await llm.generate(PROMPT, max_tokens=tiny.max_position)
    async with unillm.launch("mlx", **inproc_settings, max_model_len=16) as llm:
        assert (await llm.info()).max_model_len == 16
