"""`unillm batch` on the command line: Ctrl-C stops cleanly, a rerun resumes, bad targets refused."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from batch_helpers import (
    DiskFullAfter,
    Poisoned,
    SlowServer,
    every,
    ids,
    results,
    write_input,
    write_poisoned,
)

from unillm.batch import journal, target
from unillm.cli.main import main
from unillm.testing.fault_server import FaultServer

ROOT = Path(__file__).resolve().parents[1]


def batch(inp: Path, out: Path, url: str, *extra: str) -> subprocess.Popen[str]:
    cmd = [sys.executable, "-m", "unillm.cli", "batch", str(inp), "--out", str(out), "--engine", "vllm"]
    cmd += ["--url", url, *extra]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def wait_for_lines(out: Path, n: int, proc: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:
        if out.exists() and out.read_bytes().count(b"\n") >= n:
            return
        time.sleep(0.02)
    raise AssertionError(f"fewer than {n} results appeared")


def test_ctrl_c_stops_with_whole_lines_and_a_rerun_finishes_each_id_once(tmp_path: Path) -> None:
    inp, out = write_input(tmp_path / "in.jsonl", 40), tmp_path / "out.jsonl"
    with SlowServer(0.1) as server:
        proc = batch(inp, out, server.url, "--max-concurrency", "2")
        wait_for_lines(out, 2, proc)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
        stopped = (proc.returncode, len(results(out)) < 40, "interrupted" in err)
        rerun = batch(inp, out, server.url, "--json")
        stdout, _ = rerun.communicate(timeout=60)
    assert (stopped, rerun.returncode, ids(out)) == ((130, True, True), 0, every(40))
    assert json.loads(stdout.splitlines()[-1])["skipped"] > 0


def test_a_run_with_failures_exits_1(tmp_path: Path) -> None:
    inp, out = write_input(tmp_path / "in.jsonl", 3), tmp_path / "out.jsonl"
    with FaultServer() as server:
        server.fail(400)
        proc = batch(inp, out, server.url)
        proc.communicate(timeout=60)
    assert proc.returncode == 1


def test_no_target_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    inp = write_input(tmp_path / "in.jsonl", 1)
    assert main(["batch", str(inp), "--out", str(tmp_path / "out.jsonl")]) == 2
    assert "give exactly one target" in capsys.readouterr().err


def test_bad_input_is_refused_before_connecting(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "in.jsonl").write_text('{"prompt": 3}\n')
    argv = ["batch", str(tmp_path / "in.jsonl"), "--out", str(tmp_path / "o.jsonl")]
    assert main([*argv, "--engine", "vllm", "--url", "http://127.0.0.1:9"]) == 2
    assert "line 1: prompt must be a string" in capsys.readouterr().err


def run_main(inp: Path, out: Path, url: str, *extra: str) -> int:
    return main(
        ["batch", str(inp), "--out", str(out), "--engine", "vllm", "--url", url, "--no-progress", *extra]
    )


def test_an_out_that_is_the_input_is_refused_and_the_input_kept(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    inp = write_input(tmp_path / "in.jsonl", 3)
    before = inp.read_bytes()
    with FaultServer() as server:
        code = run_main(inp, inp, server.url, "--retry-failed")
    assert (code, inp.read_bytes()) == (2, before)
    assert "is the batch input itself" in capsys.readouterr().err


def test_an_out_that_is_an_unrelated_jsonl_is_refused_untouched(tmp_path: Path) -> None:
    inp, out = write_input(tmp_path / "in.jsonl", 3), tmp_path / "other.jsonl"
    out.write_text('{"a": 1}\n{"b": 2}\n{"c": 3')
    with FaultServer() as server:
        code = run_main(inp, out, server.url)
    assert (code, out.read_text()) == (2, '{"a": 1}\n{"b": 2}\n{"c": 3')


def test_a_poison_request_fails_alone_and_the_run_exits_1(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    inp, out = write_poisoned(tmp_path / "in.jsonl", 6), tmp_path / "out.jsonl"
    opened = target.open_target

    @contextlib.asynccontextmanager
    async def poisoned(t: target.Target, items: Any = ()) -> AsyncIterator[Any]:
        async with opened(t, items) as client:
            yield Poisoned(client, LookupError("Unresolvable: http://127.0.0.1:9/x.json"))

    monkeypatch.setattr(target, "open_target", poisoned)
    with FaultServer() as server:
        code = run_main(inp, out, server.url)
    assert (code, ids(out)) == (1, every(6))
    assert "5 succeeded, 1 failed" in capsys.readouterr().err


def test_guided_json_that_is_not_json_is_refused_naming_the_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    line = {"custom_id": "a", "url": "/v1/chat/completions", "body": {"messages": [], "guided_json": "{no"}}
    (tmp_path / "in.jsonl").write_text(json.dumps(line) + "\n")
    assert run_main(tmp_path / "in.jsonl", tmp_path / "o.jsonl", "http://127.0.0.1:9") == 2
    assert "line 1: body.guided_json is a string but not JSON" in capsys.readouterr().err


def test_a_huge_value_in_a_bad_line_is_not_echoed_whole(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "in.jsonl").write_text(json.dumps({"prompt": "p", "temperature": "a" * 5_000_000}) + "\n")
    assert run_main(tmp_path / "in.jsonl", tmp_path / "o.jsonl", "http://127.0.0.1:9") == 2
    assert len(capsys.readouterr().err) < 2000


def test_a_full_disk_ends_with_a_typed_message_and_a_rerun_finishes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    inp, out = write_input(tmp_path / "in.jsonl", 6), tmp_path / "out.jsonl"
    with FaultServer() as server:
        monkeypatch.setattr(journal, "os", DiskFullAfter(2))
        full = run_main(inp, out, server.url, "--max-concurrency", "1")
        monkeypatch.undo()
        rerun = run_main(inp, out, server.url)
    assert (full, rerun, ids(out)) == (2, 0, every(6))
    assert "unillm: OutputWriteError: cannot write the output" in capsys.readouterr().err
