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
    launch = unillm.launch(
        "llamacpp",
        **cpu_launch_settings("llamacpp", tiny, workdir / name, **settings),
        log_path=workdir / f"{name}.log",
        progress=None,
    )
    with launch.blocking():
        yield RunningEngine(launch)


@pytest.fixture(scope="session")
def llamacpp_server(tiny: TinyModel, workdir: Path) -> Iterator[RunningEngine]:
    """The tiny model served as 'tiny', and with each LoRA under its name ('sql', 'poem')."""
    yield from _serve(
        tiny,
        workdir,
        "llamacpp",
        served_name="tiny",
        lora={name: str(path) for name, path in tiny.loras.items()},
    )


@pytest.fixture(scope="session")
def llamacpp_lookup_server(tiny: TinyModel, workdir: Path) -> Iterator[RunningEngine]:
    """The tiny model with prompt-lookup speculative decoding."""
    yield from _serve(
        tiny,
        workdir,
        "llamacpp-lookup",
        served_name="tiny",
        speculative=unillm.Speculative(method="ngram", num_tokens=4),
    )
