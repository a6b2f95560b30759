"""Real mlx_lm.server launched through unillm.launch with the tiny model (random weights).

Assertions are about shapes, finish reasons, usage and typed errors, never about content.
"""

from __future__ import annotations

import httpx
import pytest
from unillm_mlx.testing import MLXServer

import unillm
from unillm.options import OutputSpec, make_request
from unillm.testing.streams import final_delta

pytestmark = [pytest.mark.anyio, pytest.mark.engine]
PROMPT = "The capital of France is"


async def test_mlx_server_generates_with_usage_and_length_finish(mlx_server: MLXServer) -> None:
    async with mlx_server.connect() as llm:
        r = await llm.generate(PROMPT, max_tokens=12, temperature=0)
        chat = await llm.generate(messages=[{"role": "user", "content": "hi"}], max_tokens=6)
    assert r.finish_reason == "length"  # the tiny model never emits </s> greedily
    assert r.usage.completion_tokens == 12 and r.usage.prompt_tokens > 0
    assert r.text and r.engine == "mlx" and r.engine_version is None
    assert chat.finish_reason == "length" and chat.usage.completion_tokens == 6


async def test_mlx_server_stream_matches_generate_and_ends_with_usage(mlx_server: MLXServer) -> None:
    async with mlx_server.connect() as llm:
        whole = await llm.generate(PROMPT, max_tokens=10, temperature=0)
        deltas = [d async for d in llm.stream(PROMPT, max_tokens=10, temperature=0)]
    assert "".join(d.text for d in deltas) == whole.text
    last = final_delta(deltas)  # the only delta with usage and timings
    assert last.usage is not None and last.usage.completion_tokens == 10
    assert last.finish_reason == "length" and last.timings is not None


async def test_mlx_server_stream_starts_with_an_sse_comment_that_is_skipped(mlx_server: MLXServer) -> None:
    url = mlx_server.launch.base_url + "/v1/completions"
    body = {"prompt": PROMPT, "max_tokens": 2, "stream": True}
    async with httpx.AsyncClient() as client, client.stream("POST", url, json=body) as response:
        raw = (await response.aread()).decode()
    assert raw.startswith(": keepalive")  # the quirk is real on this version...
    async with mlx_server.connect() as llm:  # ...and unillm's stream is unaffected by it
        assert len(await llm.stream(PROMPT, max_tokens=2).collect()) > 0


async def test_mlx_server_lora_by_name_changes_greedy_output(mlx_server: MLXServer) -> None:
    async with mlx_server.connect() as llm:
        base = await llm.generate(PROMPT, max_tokens=16, temperature=0)
        sql = await llm.generate(PROMPT, max_tokens=16, temperature=0, lora="sql")
        poem = await llm.generate(PROMPT, max_tokens=16, temperature=0, lora="poem")
        again = await llm.generate(PROMPT, max_tokens=16, temperature=0)
    assert len({base.text, sql.text, poem.text}) == 3
    assert again.text == base.text  # switching back drops the adapter


async def test_mlx_server_lora_request_carries_model_path_and_adapter_path(mlx_server: MLXServer) -> None:
    llm = mlx_server.connect()
    request = make_request(PROMPT, None, None, {"lora": "sql"}, stream=False)
    call = llm.adapter.build(request, await llm.info())
    spec = mlx_server.launch.spec
    assert call.json is not None
    assert call.json["model"] == spec.model and call.json["adapters"] == spec.lora["sql"]
    await llm.aclose()


async def test_mlx_server_draft_model_speculation_keeps_greedy_output(
    mlx_server: MLXServer, mlx_draft_server: MLXServer
) -> None:
    prompts = [PROMPT, "Once upon a time", PROMPT]  # the repeat would hit the prompt cache
    async with mlx_server.connect() as plain, mlx_draft_server.connect() as spec:
        for prompt in prompts:
            want = await plain.generate(prompt, max_tokens=24, temperature=0)
            got = await spec.generate(prompt, max_tokens=24, temperature=0)
            assert got.text == want.text
    assert "--prompt-cache-size" in mlx_draft_server.launch.command().argv


@pytest.mark.parametrize(
    "output",
    [unillm.Regex("[0-9]+"), unillm.Choice(["a", "b"]), {"type": "object"}, unillm.Grammar('root ::= "x"')],
)
async def test_mlx_server_refuses_constrained_output_before_sending(
    mlx_server: MLXServer, output: OutputSpec
) -> None:
    async with mlx_server.connect() as llm:
        with pytest.raises(unillm.UnsupportedFeature, match="in_process=True"):
            await llm.generate("x", output=output, max_tokens=4)


async def test_mlx_server_maps_its_error_answers_to_typed_errors(mlx_server: MLXServer) -> None:
    async with mlx_server.connect() as llm:
        with pytest.raises(unillm.InvalidRequest, match="temperature") as bad:
            await llm.generate("x", max_tokens=2, extra_body={"temperature": "hot"})
        assert bad.value.status == 400 and "temperature" in bad.value.engine_message
        with pytest.raises(unillm.UnknownLora) as missing:
            await llm.generate("x", max_tokens=2, lora="/nonexistent/adapter")
        assert missing.value.status == 404
        with pytest.raises(unillm.UnknownLora, match="known: poem, sql"):
            await llm.generate("x", max_tokens=2, lora="nope")  # refused before sending
    async with mlx_server.connect(model="/nonexistent/model") as llm:
        with pytest.raises(unillm.UnknownModel) as unknown:
            await llm.generate("x", max_tokens=2)
        assert unknown.value.status == 404


async def test_mlx_server_discovery_finds_the_served_model_path(mlx_server: MLXServer) -> None:
    async with mlx_server.connect() as llm:
        info = await llm.info()
        caps = await llm.capabilities()
        assert await llm.health()
    assert info.model == mlx_server.launch.spec.model and info.version is None
    assert not caps.supports(unillm.Feature.JSON_SCHEMA) and caps.supports(unillm.Feature.LORA)
