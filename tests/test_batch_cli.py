"""`unillm batch` on the command line: Ctrl-C stops cleanly, a rerun resumes, bad targets refused."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from batch_helpers import SlowServer, every, ids, results, write_input

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
