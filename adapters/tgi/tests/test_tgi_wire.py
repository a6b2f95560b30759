"""End to end through ``unillm.connect("tgi", url)`` against a TGI look-alike on the wire.

The server (tgi_server.py) speaks TGI 3.3's formats, validates every request body and every
answer against TGI's published schema, and injects TGI's errors and broken streams. This
exercises the I/O path (discovery, preflight, headers, SSE), not only the translation.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from pydantic import BaseModel
from tgi_server import TGIServer

import unillm
from unillm import RetryPolicy, Timeouts
from unillm.errors import (
    EngineInternalError,
    InvalidRequest,
    Overloaded,
    StreamInterrupted,
    Unauthorized,
    UnsupportedFeature,
)
from unillm.testing.streams import final_delta

pytestmark = pytest.mark.anyio
TEXT = "Hello, world!"
CHAT = [{"role": "user", "content": "Hi"}]


def connect(server: TGIServer, **kw: Any) -> unillm.LLM:
    return unillm.connect(
        "tgi",
        server.url,
        retry=RetryPolicy(attempts=2, initial_wait=0.01, max_wait=0.02),
        timeouts=Timeouts(connect=2, read=5),
        **kw,
    )


@contextmanager
def serving(**kw: Any) -> Iterator[TGIServer]:
    with TGIServer(**kw) as s:
        yield s
    assert s.errors == [], f"TGI look-alike saw problems: {s.errors}"


def sent(server: TGIServer, path: str) -> Any:
    """The body of the last request to ``path``."""
    return next(s.body for s in reversed(server.requests) if s.path == path)


async def collect(stream: unillm.Stream) -> list[unillm.Delta]:
    async with stream as s:
        return [d async for d in s]


# -- generate and stream ------------------------------------------------------------------------
async def test_generate_goes_to_generate_and_reads_usage_from_details_and_headers(server: TGIServer) -> None:
    async with connect(server) as llm:
        r = await llm.generate("Hi", max_tokens=16)
    assert (r.text, r.finish_reason, r.engine, r.model) == (TEXT, "stop", "tgi", "tiny-llama")
    assert r.engine_version == "3.3.6-dev0"
    assert (r.usage.prompt_tokens, r.usage.completion_tokens) == (2, 5)  # 4 pieces + </s>
    sent = server.requests[-1]
    assert sent.path == "/generate"
    assert sent.body == {
        "inputs": "Hi",
        "parameters": {"details": True, "max_new_tokens": 16, "do_sample": True},
    }


async def test_max_tokens_cut_is_a_length_finish(server: TGIServer) -> None:
    async with connect(server) as llm:
        r = await llm.generate("Hi", max_tokens=2)
    assert (r.text, r.finish_reason, r.usage.completion_tokens) == ("Hello,", "length", 2)


async def test_stream_yields_tokens_and_a_last_delta_with_usage(server: TGIServer) -> None:
    async with connect(server) as llm:
        deltas = await collect(llm.stream("Hi", max_tokens=16))
    assert "".join(d.text for d in deltas) == TEXT  # </s> is special: no text
    last = final_delta(deltas)  # the only delta with usage and timings
    assert last.finish_reason == "stop" and last.usage is not None and last.timings is not None
    assert (last.usage.prompt_tokens, last.usage.completion_tokens) == (2, 5)
    assert server.requests[-1].path == "/generate_stream"


async def test_stop_strings_are_cut_from_whole_and_streamed_answers(server: TGIServer) -> None:
    async with connect(server) as llm:
        r = await llm.generate("Hi", stop=" world")
        deltas = await collect(llm.stream("Hi", stop=[" world"]))
    assert (r.text, r.finish_reason) == ("Hello,", "stop")  # TGI itself keeps " world"
    assert "".join(d.text for d in deltas) == "Hello," and deltas[-1].finish_reason == "stop"


async def test_n_comes_back_as_n_choices_through_best_of(server: TGIServer) -> None:
    async with connect(server) as llm:
        r = await llm.generate("Hi", n=2, temperature=0.8)
    assert [c.text for c in r.choices] == [TEXT, TEXT]
    assert sent(server, "/generate")["parameters"]["best_of"] == 2


async def test_logprobs_whole_and_streamed(server: TGIServer) -> None:
    async with connect(server) as llm:
        r = await llm.generate("Hi", top_logprobs=2)
        deltas = await collect(llm.stream("Hi", top_logprobs=2))
    assert r.logprobs is not None and len(r.logprobs) == 5 and len(r.logprobs[0].top) == 2
    streamed = [lp for d in deltas for lp in d.logprobs or ()]
    assert [lp.token for lp in streamed] == [lp.token for lp in r.logprobs]


# -- constraints and adapters -------------------------------------------------------------------
class Count(BaseModel):
    n: int


async def test_json_schema_goes_as_a_json_grammar_and_parses() -> None:
    with serving(pieces=('{"n": ', "1}")) as server:
        async with connect(server) as llm:
            r = await llm.generate("Count:", output=Count)
    assert r.parsed == Count(n=1)
    grammar = server.requests[-1].body["parameters"]["grammar"]
    assert grammar["type"] == "json" and grammar["value"]["properties"]["n"]["type"] == "integer"


async def test_choice_goes_as_an_escaped_regex_grammar() -> None:
    with serving(pieces=("a.b",)) as server:
        async with connect(server) as llm:
            r = await llm.generate("Pick:", output=unillm.Choice(["a.b", "c|d"]))
    assert r.parsed == "a.b"
    assert server.requests[-1].body["parameters"]["grammar"] == {"type": "regex", "value": r"(a\.b|c\|d)"}


async def test_regex_on_chat_goes_in_response_format() -> None:
    with serving(pieces=("2024", "-01-02")) as server:
        async with connect(server) as llm:
            r = await llm.generate(messages=CHAT, output=unillm.Regex(r"\d{4}-\d{2}-\d{2}"))
    assert r.parsed == "2024-01-02"
    assert sent(server, "/v1/chat/completions")["response_format"]["type"] == "regex"


async def test_lora_is_sent_as_adapter_id_and_as_the_chat_model(server: TGIServer) -> None:
    async with connect(server) as llm:
        r = await llm.generate("Hi", lora="sql")
        c = await llm.generate(messages=CHAT, lora="sql")
    assert r.text == c.text == "SELECT 1"
    assert sent(server, "/generate")["parameters"]["adapter_id"] == "sql"
    assert sent(server, "/v1/chat/completions")["model"] == "sql"


async def test_grammar_is_refused_before_anything_is_sent(server: TGIServer) -> None:
    async with connect(server) as llm:
        with pytest.raises(UnsupportedFeature, match="context-free"):
            await llm.generate("Hi", output=unillm.Grammar('root ::= "a"'))
    assert server.count() == 0


# -- the OpenAI routes --------------------------------------------------------------------------
async def test_chat_whole_and_streamed_with_usage(server: TGIServer) -> None:
    async with connect(server) as llm:
        r = await llm.generate(messages=CHAT, max_tokens=16)
        deltas = await collect(llm.stream(messages=CHAT, max_tokens=16))
    assert (r.text, r.finish_reason) == (TEXT, "stop") and r.usage.prompt_tokens > 0
    assert "".join(d.text for d in deltas) == TEXT and deltas[-1].usage == r.usage
    assert server.count("/v1/chat/completions") == 2 and server.count() == 2


async def test_seed_zero_goes_to_completions_whole_and_streamed(server: TGIServer) -> None:
    async with connect(server) as llm:
        r = await llm.generate("Hi", seed=0)
        deltas = await collect(llm.stream("Hi", seed=0))
    assert (r.text, r.finish_reason, r.usage.prompt_tokens) == (TEXT, "stop", 2)
    assert "".join(d.text for d in deltas) == TEXT  # the final chunk's "</s>" is dropped
    assert deltas[-1].usage is not None and deltas[-1].usage.completion_tokens == 5
    assert server.count("/v1/completions") == 2


# -- errors ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("status", "error_type", "message", "error"),
    [
        (
            422,
            "validation",
            "Input validation error: `top_n_tokens` must be >= 0 and <= 5. Given: 9",
            InvalidRequest,
        ),
        (424, "generation", "Request failed during generation: CUDA out of memory", EngineInternalError),
        (429, "overloaded", "Model is overloaded", Overloaded),
        (500, "incomplete_generation", "Incomplete generation", EngineInternalError),
    ],
)
@pytest.mark.parametrize("messages", [None, CHAT], ids=["generate", "chat"])
async def test_tgi_errors_become_typed_errors_with_its_message(
    server: TGIServer,
    status: int,
    error_type: str,
    message: str,
    error: type[Exception],
    messages: Any,
) -> None:
    server.fail(status, error_type, message)
    async with connect(server) as llm:
        with pytest.raises(error) as caught:
            await llm.generate(None if messages else "Hi", messages=messages)
        with pytest.raises(error) as streamed:  # mid-stream: HTTP 200 and an error event
            await collect(llm.stream(None if messages else "Hi", messages=messages))
    assert caught.value.engine_message == message and caught.value.status == status  # type: ignore[attr-defined]
    assert streamed.value.engine_message == message  # type: ignore[attr-defined]


async def test_tgis_own_validation_answers_come_back_typed(server: TGIServer) -> None:
    async with connect(server) as llm:
        with pytest.raises(InvalidRequest, match="top_n_tokens") as caught:
            await llm.generate("Hi", top_logprobs=9)  # over the server's --max-top-n-tokens
    assert caught.value.status == 422


async def test_a_plain_text_422_from_tgis_json_extractor_is_typed(server: TGIServer) -> None:
    server.fail_http(422, b"Failed to deserialize the JSON body into the target type: parameters")
    async with connect(server) as llm:
        with pytest.raises(InvalidRequest, match="Failed to deserialize"):
            await llm.generate("Hi")


async def test_an_error_event_after_some_tokens_keeps_tgis_message(server: TGIServer) -> None:
    server.stream_error(2, "generation", "Request failed during generation: boom")
    async with connect(server) as llm:
        stream = llm.stream("Hi")
        with pytest.raises(EngineInternalError, match="boom"):
            await stream.collect()
    assert stream.text == "Hello,"


async def test_a_dropped_stream_is_interrupted_with_the_partial_text(server: TGIServer) -> None:
    server.drop(after=2)
    async with connect(server) as llm:
        with pytest.raises(StreamInterrupted) as caught:
            await collect(llm.stream("Hi"))
    assert caught.value.partial_text == "Hello,"


async def test_a_stream_ending_without_its_final_event_is_interrupted(server: TGIServer) -> None:
    server.truncate(after=3)
    async with connect(server) as llm:
        with pytest.raises(StreamInterrupted, match="before finishing") as caught:
            await collect(llm.stream("Hi"))
    assert caught.value.partial_text == "Hello, world"


async def test_retries_an_overloaded_answer_then_succeeds(server: TGIServer) -> None:
    server.fail(429, "overloaded", "Model is overloaded", times=1)
    async with connect(server) as llm:
        r = await llm.generate("Hi")
    assert r.text == TEXT and server.count("/generate") == 2


# -- prompt length, discovery, health, metrics, auth --------------------------------------------
async def test_a_too_long_prompt_is_counted_and_refused_before_generating(server: TGIServer) -> None:
    async with connect(server) as llm:
        with pytest.raises(InvalidRequest, match="100 tokens; this server accepts at most 64"):
            await llm.generate("x" * 100)
        with pytest.raises(InvalidRequest, match="do not fit"):
            await llm.generate(messages=[{"role": "user", "content": "y" * 40}], max_tokens=100)
        await llm.generate("short")
    assert server.count() == 1  # only the short prompt was generated
    assert server.count("/tokenize") == 1 and server.count("/chat_tokenize") == 1


async def test_info_health_and_metrics(server: TGIServer) -> None:
    async with connect(server) as llm:
        info = await llm.info()
        assert await llm.health()
        await llm.generate("Hi")
        metrics = await llm.metrics()
    assert (info.model, info.version, info.max_model_len) == ("tiny-llama", "3.3.6-dev0", 128)
    assert metrics.value("tgi_queue_size") == 0
    assert metrics.value("tgi_request_count_total") == 1  # prometheus-client names counters *_total


async def test_the_api_key_is_sent_and_a_wrong_one_is_unauthorized() -> None:
    with serving(api_key="k1") as server:
        async with connect(server, api_key="k1") as llm:
            assert (await llm.generate("Hi")).text == TEXT
        async with connect(server, api_key="wrong") as llm:
            with pytest.raises(Unauthorized):
                await llm.generate("Hi")
