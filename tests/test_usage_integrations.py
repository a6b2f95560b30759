"""The usage ledger reaches the agent frameworks' own usage types (issue 33, item 6): cached
prompt tokens where each framework counts them (openai-agents' ``input_tokens_details``,
LangChain's ``input_token_details.cache_read``, Pydantic AI's ``cache_read_tokens``)."""

from __future__ import annotations

from unillm.integrations import langchain, openai_agents, pydantic_ai
from unillm.results import Usage

USAGE = Usage(prompt_tokens=40, completion_tokens=9, cached_tokens=32, reasoning_tokens=6)


def test_openai_agents_usage_counts_the_cached_and_reasoning_tokens() -> None:
    usage = openai_agents._usage(USAGE)
    assert (usage.input_tokens_details.cached_tokens, usage.output_tokens_details.reasoning_tokens) == (32, 6)


def test_langchain_usage_metadata_reads_the_cache() -> None:
    assert langchain._usage(USAGE).get("input_token_details") == {"cache_read": 32}


def test_langchain_leaves_the_cache_out_when_the_engine_does_not_report_it() -> None:
    assert "input_token_details" not in langchain._usage(Usage(prompt_tokens=4))


def test_pydantic_ai_usage_reads_the_cache() -> None:
    assert pydantic_ai._usage(USAGE).cache_read_tokens == 32
