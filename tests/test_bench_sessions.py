"""Multi-turn sessions, trace replay and cancellations against a look-alike engine that records
when each request arrived, what history it carried, and which clients hung up mid-answer."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from unillm.api import connect
from unillm.bench import Load, Slo, Url, run_suite
from unillm.bench.runner import run_load
from unillm.bench.sessions import MultiTurn
from unillm.bench.trace import MooncakeTrace
from unillm.bench.workload import Synthetic
from unillm.cli.main import main
from unillm.errors import InvalidOptions
from unillm.testing.fault_server import CHAT, COMPLETIONS, FaultServer

pytestmark = pytest.mark.anyio
PIECES = tuple(f" a{i}" for i in range(6))
ANSWER = "".join(PIECES)


@pytest.fixture
def server() -> Iterator[FaultServer]:
    with FaultServer(pieces=PIECES) as s:
        yield s


def test_multi_turn_sessions_are_seeded_and_share_system_prompts() -> None:
    w = MultiTurn(sessions=6, turns=3, input_len=5, output_len=4, system_prompt_len=20, system_prompts=2)
    sessions = w.requests()
    assert sessions == w.requests() and sessions != MultiTurn(sessions=6, seed=1).requests()
    assert len(sessions) == 6 and all(len(s.turns) == 3 for s in sessions)
    systems = {s.system for s in sessions}
    assert len(systems) == 2 and all(len((x or "").split()) == 20 for x in systems)
    assert all(len(t.user.split()) == 5 and t.max_tokens == 4 for s in sessions for t in s.turns)


async def test_turns_wait_for_answers_and_histories_grow_with_them(server: FaultServer) -> None:
    w = MultiTurn(sessions=3, turns=3, input_len=4, output_len=6, system_prompt_len=8, think_time_s=0.05)
    async with connect("vllm", server.url) as llm:
        result = await run_load(llm, w.requests(), Load(max_concurrency=2), slo=Slo(ttft_ms=60_000))
    s = result.summary
    assert s is not None and (s.completed, s.failed, s.sessions) == (9, 0, 3)
    assert s.session_goodput == pytest.approx(3 / s.duration)
    assert result.sessions == [f"s{i:04d}" for i in range(3) for _ in range(3)]
    assert result.turns == [0, 1, 2] * 3
    seen = server.seen(CHAT)
    by_system: dict[str, list[tuple[float, list[dict[str, str]]]]] = {}
    for r in seen:
        # sessions are told apart by their first user message
        by_system.setdefault(r.body["messages"][1]["content"], []).append((r.at, r.body["messages"]))
    assert len(by_system) == 3
    for turns in by_system.values():
        turns.sort(key=lambda t: t[0])
        assert [len(m) for _, m in turns] == [2, 4, 6]  # system, then user/assistant pairs grow
        for (at_a, a), (at_b, b) in itertools.pairwise(turns):
            assert b[: len(a)] == a  # the history is kept, in order
            assert b[len(a)] == {"role": "assistant", "content": ANSWER}  # the real answer
            assert at_b - at_a >= 0.0  # sent after the previous turn...
    # ... and only after its answer: every later turn carries the whole previous answer
    assert all(m[0]["role"] == "system" for ts in by_system.values() for _, m in ts)


async def test_at_most_max_concurrency_sessions_run_at_once(server: FaultServer) -> None:
    w = MultiTurn(sessions=4, turns=2, input_len=3, output_len=6)
    async with connect("vllm", server.url) as llm:
        await run_load(llm, w.requests(), Load(max_concurrency=1))
    firsts = [r.body["messages"][0]["content"] for r in server.seen(CHAT)]
    # one session at a time: each session's two turns arrive back to back
    assert [firsts[i] == firsts[i + 1] for i in range(0, 8, 2)] == [True] * 4


@pytest.mark.parametrize("key", [True, False])
async def test_session_key_is_sent_only_when_asked(key: bool) -> None:
    from unillm.bench.runner import run_session

    sent: list[dict[str, object]] = []

    class Recorder:
        engine = "rec"

        def stream(self, prompt: object, **kw: object) -> object:
            sent.append(kw)
            raise InvalidOptions("stop here")

    session = MultiTurn(sessions=1, turns=2, session_key=key).requests()[0]
    records = await run_session(Recorder(), session, {}, 0.0)  # type: ignore[arg-type]
    assert len(sent) == 1 and sent[0].get("session") == ("s0000" if key else None)
    assert [r.success for r in records] == [False, False]
    assert "not sent" in (records[1].error or "")  # a failed turn ends its session


async def test_cancel_rate_cancels_seeded_requests_and_counts_them_apart(server: FaultServer) -> None:
    reqs = Synthetic(num_prompts=20, input_len=4, output_len=6).requests()
    runs = []
    for _ in range(2):
        async with connect("vllm", server.url) as llm:
            runs.append(await run_load(llm, reqs, Load(max_concurrency=4), cancel_rate=0.5, seed=7))
    assert runs[0].cancelled == runs[1].cancelled  # the same requests on every run
    s = runs[0].summary
    assert s is not None and 0 < s.cancelled < 20
    assert s.completed + s.cancelled == 20 and s.failed == 0
    assert runs[0].to_vllm_json()["unillm_cancelled"] == s.cancelled


async def test_a_cancelled_stream_hangs_up_on_the_engine(server: FaultServer) -> None:
    server.endless(interval=0.01)
    reqs = Synthetic(num_prompts=5, input_len=4, output_len=8).requests()
    async with connect("vllm", server.url) as llm:
        result = await run_load(llm, reqs, Load(max_concurrency=5), cancel_rate=1.0)
    assert result.summary is not None and result.summary.cancelled == 5
    with anyio.fail_after(5):
        while len(server.disconnects) < 5:
            await anyio.sleep(0.02)
    assert server.disconnects == [COMPLETIONS] * 5


def _trace(path: Path) -> Path:
    lines = [
        {"timestamp": 0, "input_length": 10, "output_length": 3, "hash_ids": [1, 2, 3]},
        {"timestamp": 300, "input_length": 8, "output_length": 4, "hash_ids": [1, 2, 9]},
        {"timestamp": 150, "input_length": 7, "output_length": 2, "hash_ids": [5]},
    ]
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    return path


def test_trace_blocks_with_equal_hash_ids_have_equal_text(tmp_path: Path) -> None:
    trace = MooncakeTrace(path=str(_trace(tmp_path / "t.jsonl")), block_size=3)
    reqs = trace.requests()
    assert [r.at for r in reqs] == [0.0, 0.15, 0.3]  # sorted, seconds
    assert [r.max_tokens for r in reqs] == [3, 2, 4]
    words = [(r.prompt or "").split() for r in reqs]
    assert [len(w) for w in words] == [10, 7, 8]
    assert words[0][:6] == words[2][:6]  # blocks 1 and 2 shared
    assert words[0][6:8] != words[2][6:8]  # block 3 vs block 9
    assert trace.prompt_text([2], 3) == " ".join(words[0][3:6])  # a block is the same anywhere


async def test_a_trace_is_sent_on_its_own_schedule(server: FaultServer, tmp_path: Path) -> None:
    trace = MooncakeTrace(path=str(_trace(tmp_path / "t.jsonl")), block_size=3)
    report = await run_suite([Url("vllm", server.url)], trace, [Load()])
    assert report.runs[0].summary is not None and report.runs[0].summary.completed == 3
    seen = server.seen(COMPLETIONS)
    offsets = [r.at - seen[0].at for r in seen]
    assert offsets[1] == pytest.approx(0.15, abs=0.08) and offsets[2] == pytest.approx(0.3, abs=0.08)


async def test_runs_repeat_each_point(server: FaultServer) -> None:
    report = await run_suite(
        [Url("vllm", server.url)], Synthetic(num_prompts=2, output_len=6), [Load(max_concurrency=1)], runs=3
    )
    assert [r.repeat for r in report.runs] == [0, 1, 2]
    assert server.count() == 6


def test_cli_runs_multi_turn_sessions(server: FaultServer, tmp_path: Path) -> None:
    argv = ["bench", "vllm", "--url", server.url, "--workload", "multi-turn", "--sessions", "2"]
    argv += ["--turns", "2", "--output-len", "6", "--out", str(tmp_path), "--no-plots", "--no-progress"]
    assert main(argv) == 0
    run = json.loads((tmp_path / "bench.json").read_text())["runs"][0]
    assert run["completed"] == 4 and run["unillm_sessions"] == 2
    assert run["unillm_turns"] == [0, 1, 0, 1]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--cancel-rate", "2"], "cancel-rate"),
        (["--runs", "0"], "runs"),
        (["--trace", "/nonexistent.jsonl"], "does not exist"),
    ],
)
def test_cli_refuses_bad_multi_turn_settings(
    extra: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["bench", "vllm", "--url", "http://127.0.0.1:1", *extra]) != 0
    assert message in capsys.readouterr().err
