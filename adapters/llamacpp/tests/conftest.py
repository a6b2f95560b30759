"""llama.cpp fixtures: llama-cpp-python's server launched through unillm with the tiny model.

The server runs from the managed env (``unillm setup llamacpp``); the CPU recipe converts the
tiny model and its PEFT LoRAs to GGUF (cached). A missing engine is an error, not a skip.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import unillm
from unillm.testing.engines import RunningEngine, cpu_launch_settings
from unillm.testing.tiny_model import TinyModel


def _serve(tiny: TinyModel, workdir: Path, name: str, **settings: Any) -> Iterator[RunningEngine]:
    """The tiny model served as 'tiny', with the CPU recipe and ``settings``."""
    recipe = cpu_launch_settings("llamacpp", tiny, workdir / name, served_name="tiny", **settings)
    yield from RunningEngine.serving("llamacpp", workdir / f"{name}.log", **recipe, progress=None)


@pytest.fixture(scope="session")
def llamacpp_server(tiny: TinyModel, workdir: Path) -> Iterator[RunningEngine]:
    """The tiny model served as 'tiny', and with each LoRA under its name ('sql', 'poem')."""
    yield from _serve(tiny, workdir, "llamacpp", lora={name: str(path) for name, path in tiny.loras.items()})


@pytest.fixture(scope="session")
def llamacpp_lookup_server(tiny: TinyModel, workdir: Path) -> Iterator[RunningEngine]:
    """The tiny model with prompt-lookup speculative decoding."""
    lookup = unillm.Speculative(method="ngram", num_tokens=4)
    yield from _serve(tiny, workdir, "llamacpp-lookup", speculative=lookup)
