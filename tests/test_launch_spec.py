"""Launch settings are validated once, whichever way they arrive."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from launch_helpers import failed_launch, launch_error, stand_in_launch

import unillm
from unillm.adapter.launch_spec import build_spec


def test_settings_layered_on_a_spec_are_validated() -> None:
    spec = unillm.LaunchSpec(model="m")
    with pytest.raises(unillm.InvalidOptions, match="max_model_len"):
        build_spec(spec, {"max_model_len": 0})


def test_settings_layered_on_a_spec_keep_its_secret_key() -> None:
    spec = unillm.LaunchSpec(model="m", api_key="k3y")
    merged = build_spec(spec, {"max_num_seqs": 4})
    assert merged.key() == "k3y"
    assert merged.max_num_seqs == 4


def test_unknown_launch_settings_are_refused_by_name() -> None:
    with pytest.raises(unillm.InvalidOptions, match="tensor_parallel"):
        unillm.launch("vllm", model="m", tensor_parallel=2, python="/usr/bin/python3")


def test_a_draft_method_without_a_draft_model_is_refused() -> None:
    with pytest.raises(unillm.InvalidOptions, match="draft_model"):
        unillm.launch(
            "vllm", model="m", python="/usr/bin/python3", speculative={"method": "eagle", "num_tokens": 3}
        )


ECHO = "import os, sys; print(sys.argv, os.environ['VLLM_API_KEY']); sys.exit(3)"


async def _launch_echo(tmp_path: Path) -> tuple[unillm.Launch, str]:
    """Launch a stand-in 'engine' that prints its arguments and key (as SGLang does) and exits."""
    launch = unillm.launch(
        "vllm",
        model="m",
        python=sys.executable,
        progress=None,
        log_path=tmp_path / "engine.log",
        prefix=[sys.executable, "-c", ECHO],
    )
    key = launch.spec.key()
    assert key
    with pytest.raises(unillm.LaunchError) as caught:
        async with launch:
            pass
    return launch, str(caught.value)


@pytest.mark.anyio
async def test_the_api_key_never_reaches_the_engine_log_or_the_error(tmp_path: Path) -> None:
    launch, error = await _launch_echo(tmp_path)
    key = launch.spec.key()
    assert key is not None
    log = (tmp_path / "engine.log").read_text()
    assert "exited with code 3" in error
    assert "--model" in log
    assert key not in log
    assert key not in error


@pytest.mark.parametrize("engine", ["vllm", "sglang", "tgi"])
def test_printing_a_launch_command_or_spec_masks_the_api_key(engine: str) -> None:
    launch = unillm.launch(engine, model="m", python=sys.executable, progress=None)
    key = launch.spec.key()
    assert key
    command = launch.command()
    assert any(key in a for a in command.argv) or key in command.env.values()  # the real command keeps it
    for shown in (
        repr(command),
        str(command),
        f"{command}",
        repr([command]),
        repr(launch.spec),
        str(launch.spec),
        repr(launch.spec.model_dump()),
    ):
        assert key not in shown
    assert "***" in repr(command)


@pytest.mark.parametrize(
    ("build", "match"),
    [
        (lambda: unillm.Parallel(tensor=0), "invalid Parallel: tensor"),
        (lambda: unillm.Speculative(method="medusa"), "invalid Speculative: method"),
        (lambda: unillm.Speculative(method="draft"), "needs draft_model"),
    ],
)
def test_bad_settings_objects_raise_invalid_options(build: Any, match: str) -> None:
    # Users build Parallel/Speculative themselves: a typo is a unillm error, not pydantic's.
    with pytest.raises(unillm.InvalidOptions, match=match):
        build()


@pytest.mark.anyio
@pytest.mark.parametrize("says", ["", "boom"])
async def test_the_default_log_is_removed_at_stop_only_when_the_engine_wrote_nothing(says: str) -> None:
    launch = stand_in_launch(f"import sys; print({says!r}, end=''); sys.exit(3)")
    await launch_error(launch)
    try:
        assert launch.log_path.exists() == bool(says)  # a log with something in it stays
    finally:
        launch.log_path.unlink(missing_ok=True)


@pytest.mark.anyio
async def test_a_log_path_the_caller_gave_is_kept_even_when_empty(tmp_path: Path) -> None:
    await failed_launch(tmp_path, "exit(3)")
    log = tmp_path / "engine.log"
    assert log.exists() and log.stat().st_size == 0


@pytest.mark.parametrize(
    ("settings", "match"),
    [
        ({"cpus": [0, 0]}, "each 0 or more and distinct"),
        ({"cpus": [-1]}, "each 0 or more and distinct"),
        ({"cpus": []}, "one core number or more"),
        ({"cpus": [0], "in_process": True}, "in_process has none"),
    ],
)
def test_cores_that_cannot_be_pinned_are_refused(settings: dict[str, Any], match: str) -> None:
    with pytest.raises(unillm.InvalidOptions, match=match):
        build_spec(None, {"model": "m", **settings})
