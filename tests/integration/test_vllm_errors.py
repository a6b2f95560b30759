"""Every bad input gets its typed error, with the engine's own message (real vLLM)."""

from __future__ import annotations

import pytest

import unillm
from unillm.testing.engines import RunningEngine

pytestmark = [pytest.mark.anyio, pytest.mark.engine]


async def test_invalid_json_schema_is_refused_before_sending(llm: unillm.LLM) -> None:
    with pytest.raises(unillm.InvalidOptions, match="not a valid JSON schema"):
        await llm.generate("x", output={"type": "object", "properties": {"a": {"type": "nope"}}})


async def test_bad_regex_is_an_invalid_request_with_the_engine_message(llm: unillm.LLM) -> None:
    with pytest.raises(unillm.InvalidRequest) as caught:
        await llm.generate("x", output=unillm.Regex("(unclosed"), max_tokens=4)
    assert caught.value.status == 400
    assert caught.value.engine_message


async def test_unknown_adapter_is_unknown_adapter(llm: unillm.LLM) -> None:
    with pytest.raises(unillm.UnknownLora, match="not-loaded"):
        await llm.generate("x", lora="not-loaded", max_tokens=4)


async def test_prompt_longer_than_the_context_is_an_invalid_request(llm: unillm.LLM) -> None:
    with pytest.raises(unillm.InvalidRequest) as caught:
        await llm.generate("word " * 2000, max_tokens=4)
    assert caught.value.engine == "vllm"


async def test_max_tokens_beyond_the_context_is_an_invalid_request(llm: unillm.LLM) -> None:
    with pytest.raises(unillm.InvalidRequest):
        await llm.generate("x", max_tokens=100_000)


async def test_unknown_model_is_unknown_model(vllm_server: RunningEngine) -> None:
    async with vllm_server.connect(model="no-such-model") as llm:
        with pytest.raises(unillm.UnknownModel, match="no-such-model"):
            await llm.generate("x", max_tokens=4)


async def test_a_wrong_api_key_is_unauthorized(vllm_server: RunningEngine) -> None:
    async with unillm.connect("vllm", vllm_server.base_url, api_key="wrong") as llm:
        with pytest.raises(unillm.Unauthorized) as caught:
            await llm.generate("x", max_tokens=4)
    assert caught.value.status == 401


async def test_errors_inside_a_stream_are_typed_too(llm: unillm.LLM) -> None:
    with pytest.raises(unillm.InvalidRequest):
        async for _ in llm.stream("x", max_tokens=100_000):
            pass


async def test_a_cut_constrained_answer_raises_output_parse_error_naming_max_tokens(llm: unillm.LLM) -> None:
    schema = {"type": "object", "properties": {"s": {"type": "string", "maxLength": 40}}, "required": ["s"]}
    with pytest.raises(unillm.OutputParseError, match="max_tokens") as caught:
        await llm.generate("x", output=schema, max_tokens=3, temperature=0)
    assert caught.value.finish_reason == "length"
