"""End to end through ``unillm.connect("ollama", url)`` against the Ollama look-alike on the wire.

The look-alike (ollama_server.py) validates every body against Ollama's transcribed types and
streams NDJSON (``application/x-ndjson``) as Ollama does; this exercises the core's I/O path
(discovery, NDJSON streams, errors mid-stream, a dropped connection), not only the translation.
"""

from __future__ import annotations

import pytest
from ollama_server import Fault, OllamaServer, connect

import unillm
from unillm.errors import EngineInternalError, StreamInterrupted, UnknownModel, UnsupportedFeature

pytestmark = pytest.mark.anyio
CHAT = [{"role": "user", "content": "Hi"}]


async def test_discovery_picks_the_pulled_model_and_the_version(server: OllamaServer) -> None:
    async with connect(server) as llm:
        info = await llm.info()
    assert (info.model, info.version) == ("tiny:1b", "0.32.15")


async def test_a_prompt_is_answered_by_generate(server: OllamaServer) -> None:
    async with connect(server) as llm:
        completion = await llm.generate("Hi", max_tokens=8)
    assert (completion.text, completion.choices[0].finish_reason) == ("Hello", "stop")
    assert server.requests[-1][0] == "/api/generate"


async def test_max_tokens_cut_is_a_length_finish(server: OllamaServer) -> None:
    async with connect(server) as llm:
        completion = await llm.generate("Hi", max_tokens=1)
    assert (completion.text, completion.choices[0].finish_reason) == ("Hel", "length")


async def test_an_ndjson_chat_stream_is_read_line_by_line(server: OllamaServer) -> None:
    async with connect(server) as llm, llm.stream(messages=CHAT, max_tokens=8) as stream:
        deltas = [d async for d in stream]
    assert "".join(d.text for d in deltas) == "Hello"
    assert deltas[-1].finish_reason == "stop" and deltas[-1].usage is not None


async def test_a_json_schema_answer_is_parsed(server: OllamaServer) -> None:
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
    async with connect(server) as llm:
        completion = await llm.generate(messages=CHAT, output=schema, max_tokens=8)
    assert completion.parsed == {"ok": True}


async def test_an_error_line_mid_stream_is_a_typed_error(server: OllamaServer) -> None:
    server.fault = Fault("error_line", message="llama runner process has terminated")
    async with connect(server) as llm, llm.stream(messages=CHAT, max_tokens=8) as stream:
        with pytest.raises(EngineInternalError, match="runner process"):
            [d async for d in stream]


async def test_a_connection_dropped_mid_stream_is_an_interrupted_stream(server: OllamaServer) -> None:
    server.fault = Fault("drop")
    async with connect(server) as llm, llm.stream(messages=CHAT, max_tokens=8) as stream:
        with pytest.raises(StreamInterrupted):
            [d async for d in stream]


async def test_a_model_not_pulled_is_unknown_model(server: OllamaServer) -> None:
    async with connect(server, model="nope:1b") as llm:
        with pytest.raises(UnknownModel, match="nope:1b"):
            await llm.generate("Hi", max_tokens=2)


async def test_embeddings_come_from_embed(server: OllamaServer) -> None:
    async with connect(server) as llm:
        embeddings = await llm.embed(["a", "b"])
    assert len(embeddings.vectors) == 2 and server.requests[-1][0] == "/api/embed"


async def test_a_regex_is_refused_before_sending(server: OllamaServer) -> None:
    async with connect(server) as llm:
        await llm.info()
        before = len(server.requests)
        with pytest.raises(UnsupportedFeature, match="JSON schemas only"):
            await llm.generate("Hi", output=unillm.Regex(r"\d+"))
    assert len(server.requests) == before


async def test_metrics_are_refused_before_sending(server: OllamaServer) -> None:
    async with connect(server) as llm:
        with pytest.raises(UnsupportedFeature, match="no metrics endpoint"):
            await llm.metrics()
