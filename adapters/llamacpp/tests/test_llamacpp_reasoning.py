"""The thinking tiny model on a real llama-cpp-python server: its GGUF keeps ``<think>`` as a
printed token (the tokenizer does not flag it special), so unillm splits the thought off the
answer client-side, whole and streamed, as the engines with a reasoning parser do."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

import unillm
from unillm.testing.engines import RunningEngine, cpu_launch_settings
from unillm.testing.trained_model import THOUGHT, build_trained_model

pytestmark = [pytest.mark.anyio, pytest.mark.engine]
ASK = [{"role": "user", "content": "What is 2+2?"}]


@pytest.fixture(scope="module")
def thinking_llamacpp(workdir: Path) -> Iterator[RunningEngine]:
    """llama.cpp serving the thinking model (converted to GGUF by the CPU recipe)."""
    settings = cpu_launch_settings(
        "llamacpp",
        build_trained_model(thinking=True),
        workdir / "llamacpp-thinking",
        served_name="tiny-thinking",
    )
    launch = unillm.launch("llamacpp", **settings, log_path=workdir / "llamacpp-thinking.log", progress=None)
    with launch.blocking():
        yield RunningEngine(launch)


async def test_the_thought_comes_back_apart_from_the_answer(thinking_llamacpp: RunningEngine) -> None:
    async with thinking_llamacpp.connect() as llm:
        r = await llm.generate(messages=ASK, max_tokens=24, temperature=0)
    assert r.reasoning == THOUGHT and r.text and "think>" not in r.text


async def test_a_stream_splits_the_same_way(thinking_llamacpp: RunningEngine) -> None:
    async with thinking_llamacpp.connect() as llm:
        r = await llm.generate(messages=ASK, max_tokens=24, temperature=0)
        async with llm.stream(messages=ASK, max_tokens=24, temperature=0) as s:
            await s.collect()
    assert (s.reasoning, s.text) == (r.reasoning, r.text)
