"""The same answer shape on every engine: usage totals are real fields, serialised with the rest."""

from __future__ import annotations

import anyio

import unillm
from unillm.adapter.openai_compat import parse_usage
from unillm.results import Usage
from unillm.testing.fault_server import FaultServer


def test_total_tokens_is_a_field_computed_when_the_engine_sends_none() -> None:
    usage = Usage(prompt_tokens=3, completion_tokens=4)
    assert usage.total_tokens == 7
    assert usage.model_dump() == {
        "prompt_tokens": 3,
        "completion_tokens": 4,
        "total_tokens": 7,
        "reasoning_tokens": None,
        "cached_tokens": None,
    }
    assert Usage.model_validate_json(usage.model_dump_json()) == usage


def test_total_tokens_is_the_engines_own_when_it_sends_one() -> None:
    usage = parse_usage({"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 9})
    assert usage.total_tokens == 9
    assert parse_usage({"prompt_tokens": 3, "completion_tokens": 4}).total_tokens == 7


def test_generate_and_stream_serialise_total_tokens() -> None:
    async def main() -> tuple[unillm.Completion[object], unillm.Delta]:
        with FaultServer() as server:
            async with unillm.connect("vllm", server.url) as llm:
                whole = await llm.generate("hi", max_tokens=4)
                last = [d async for d in llm.stream("hi", max_tokens=4)][-1]
        return whole, last

    whole, last = anyio.run(main)
    dumped = whole.model_dump()["usage"]
    assert dumped["total_tokens"] == dumped["prompt_tokens"] + dumped["completion_tokens"] > 0
    assert last.usage is not None
    assert last.model_dump()["usage"]["total_tokens"] == whole.usage.total_tokens
