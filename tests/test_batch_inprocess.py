"""`unillm batch --in-process` without an engine: requests it cannot honour refused before it starts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest
from batch_helpers import result

from unillm.batch import Target, run
from unillm.batch.lines import parse_lines
from unillm.batch.target import open_target
from unillm.cli.main import main
from unillm.errors import InvalidOptions

LINES: list[dict[str, Any]] = [
    {"custom_id": "ok", "prompt": "Hi", "max_tokens": 2},
    {"custom_id": "lp", "prompt": "Hi", "logprobs": True},
    {
        "custom_id": "tool",
        "messages": [{"role": "user", "content": "x"}],
        "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}],
        "tool_choice": "required",
    },
    {"custom_id": "odd", "prompt": "Hi", "extra_body": {"priority": 3}},
]


def write(path: Path, lines: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return path


def in_process(tmp_path: Path) -> Target:
    # python= a path that does not exist: nothing can start, so a refusal is the only way out
    return Target(engine="vllm", model=str(tmp_path), in_process=True, launch={"python": "/no/python"})


def test_every_request_the_in_process_engine_cannot_run_is_listed_before_it_starts(tmp_path: Path) -> None:
    items = parse_lines(json.dumps(x) for x in LINES)

    async def go() -> None:
        async with open_target(in_process(tmp_path), items):
            raise AssertionError("the engine was started")

    with pytest.raises(InvalidOptions) as e:
        anyio.run(go)
    message = str(e.value)
    assert "3 request(s)" in message and "nothing was started" in message
    assert "line 2 (lp): vllm +in-process cannot honour logprobs" in message
    assert "line 3 (tool)" in message and "tool" in message
    assert "line 4 (odd)" in message and "'priority'" in message
    assert "line 1 " not in message


def test_the_api_takes_a_target_and_refuses_the_same_way_writing_nothing(tmp_path: Path) -> None:
    inp, out = write(tmp_path / "in.jsonl", LINES), tmp_path / "out.jsonl"
    with pytest.raises(InvalidOptions, match="nothing was started"):
        anyio.run(lambda: run(inp, out, in_process(tmp_path), progress=False))
    assert not out.exists() or out.read_text() == ""


def test_the_cli_refuses_with_the_lines_and_starts_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    inp = write(tmp_path / "in.jsonl", LINES[:2])
    argv = ["batch", str(inp), "--out", str(tmp_path / "o.jsonl"), "--engine", "vllm"]
    argv += ["--model", str(tmp_path), "--in-process", "--launch", "python=/no/python"]
    assert main(argv) == 2
    assert "line 2 (lp)" in capsys.readouterr().err


def test_in_process_with_a_url_is_refused() -> None:
    with pytest.raises(InvalidOptions, match="not --url"):
        Target(engine="vllm", urls=["http://127.0.0.1:9"], in_process=True).check()


def test_in_process_with_a_config_that_connects_is_refused(tmp_path: Path) -> None:
    config = tmp_path / "unillm.toml"
    config.write_text('engine = "vllm"\nbase_url = "http://127.0.0.1:9"\n')

    async def go() -> None:
        async with open_target(Target(config=str(config), in_process=True)):
            raise AssertionError("connected")

    with pytest.raises(InvalidOptions, match="launches one engine"):
        anyio.run(go)


@pytest.mark.parametrize("through", ["api", "cli"])
def test_retry_failed_that_the_in_process_engine_refuses_leaves_the_output_as_it_was(
    tmp_path: Path, through: str
) -> None:
    inp = write(tmp_path / "in.jsonl", LINES[:2])
    out = tmp_path / "out.jsonl"
    out.write_text(result("ok") + result("lp", ok=False))
    before = out.read_bytes()
    if through == "api":
        with pytest.raises(InvalidOptions, match=r"line 2 \(lp\)"):
            anyio.run(lambda: run(inp, out, in_process(tmp_path), retry_failed=True, progress=False))
    else:
        argv = ["batch", str(inp), "--out", str(out), "--engine", "vllm", "--model", str(tmp_path)]
        assert main([*argv, "--in-process", "--launch", "python=/no/python", "--retry-failed"]) == 2
    assert out.read_bytes() == before  # the failed line is still there: nothing changed
