"""unillm bench end to end against look-alike engines: results, report files, CLI, bad input, crashes.

The look-alikes answer instantly, so these tests check what is measured and written, never how fast.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from unillm.api import connect
from unillm.bench import Launched, Load, Slo, Synthetic, Url, markdown_table, run_suite, write_report
from unillm.bench.runner import run_load
from unillm.bench.targets import Fleet, matrix
from unillm.cli.main import main
from unillm.errors import EngineUnavailable, InvalidOptions, UnknownEngine
from unillm.launching.ports import free_port
from unillm.testing import fake_engine
from unillm.testing.fault_server import FaultServer

pytestmark = pytest.mark.anyio

#: Keys `vllm bench serve --save-result` writes that existing tooling reads.
VLLM_KEYS = {
    "duration",
    "completed",
    "failed",
    "total_input_tokens",
    "total_output_tokens",
    "request_throughput",
    "request_goodput",
    "output_throughput",
    "total_token_throughput",
    "input_lens",
    "output_lens",
    "ttfts",
    "itls",
    "latencies",
    "errors",
    *(
        f"{stat}_{m}_ms"
        for stat in ("mean", "median", "std", "p50", "p90", "p99")
        for m in ("ttft", "tpot", "itl", "e2el")
    ),
}


@pytest.fixture
def server() -> Iterator[FaultServer]:
    with FaultServer(pieces=tuple(f" t{i}" for i in range(6))) as s:
        yield s


async def test_each_request_is_timed_chunk_by_chunk(server: FaultServer) -> None:
    async with connect("vllm", server.url) as llm:
        result = await run_load(
            llm,
            Synthetic(num_prompts=6, input_len=4, output_len=6).requests(),
            Load(max_concurrency=3),
            slo=Slo(e2el_ms=60_000),
        )
    s = result.summary
    assert s is not None and (s.completed, s.failed) == (6, 0)
    assert result.output_lens == [6] * 6  # from the engine's usage report
    assert [len(gaps) for gaps in result.itls] == [5] * 6  # 6 chunks -> 5 gaps each
    assert all(t is not None and t > 0 for t in result.ttfts)
    assert all(
        lat is not None and t is not None and lat >= t
        for lat, t in zip(result.latencies, result.ttfts, strict=True)
    )
    assert s.request_goodput == pytest.approx(s.request_throughput)
    assert server.count("/v1/completions") == 6


async def test_warmup_requests_are_sent_but_not_measured(server: FaultServer) -> None:
    async with connect("vllm", server.url) as llm:
        result = await run_load(llm, Synthetic(num_prompts=3).requests(), Load(), warmup=2)
    assert result.summary is not None and result.summary.completed == 3
    assert server.count("/v1/completions") == 5


async def test_result_json_has_vllm_bench_serve_keys_and_files_are_written(
    server: FaultServer, tmp_path: Path
) -> None:
    report = await run_suite(
        [Url("vllm", server.url)],
        Synthetic(num_prompts=4, output_len=6),
        [Load(max_concurrency=1), Load(max_concurrency=2)],
        slo=Slo(ttft_ms=10_000),
    )
    assert [r.load.max_concurrency for r in report.runs] == [1, 2]
    data = report.runs[0].to_vllm_json()
    assert set(data) >= VLLM_KEYS
    assert data["max_concurrency"] == 1 and data["request_goodput"] == data["request_throughput"]
    paths = write_report(report, tmp_path)
    names = {p.name for p in paths}
    assert {"bench.json", "summary.md", "latency_vs_load.png", "throughput_vs_latency.png"} <= names
    assert sum(n.startswith("run-") for n in names) == 2
    assert (tmp_path / "latency_vs_load.png").read_bytes()[:4] == b"\x89PNG"
    table = markdown_table(report.runs)
    assert table.count("| vllm @ ") == 2 and "goodput" in table


def test_cli_runs_a_bench_and_prints_the_table(
    server: FaultServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(
        [
            "bench",
            "vllm",
            "--url",
            server.url,
            "--num-prompts",
            "3",
            "--output-len",
            "6",
            "--max-concurrency",
            "1,2",
            "--out",
            str(tmp_path),
            "--no-plots",
            "--no-progress",
        ]
    )
    assert code == 0
    assert "concurrency=2" in capsys.readouterr().out
    runs = json.loads((tmp_path / "bench.json").read_text())["runs"]
    assert [r["completed"] for r in runs] == [3, 3]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["bench", "nosuchengine", "--url", "http://127.0.0.1:1"], "UnknownEngine"),
        (
            ["bench", "vllm", "--url", "http://127.0.0.1:1", "--dataset", "/nonexistent.jsonl"],
            "does not exist",
        ),
        (["bench", "vllm"], "give exactly one target"),
        (["bench", "vllm", "--url", "http://127.0.0.1:1", "--goodput", "ttft=5"], "--goodput takes"),
        (["bench", "vllm", "--url", "http://127.0.0.1:1", "--max-concurrency", "0"], "invalid load"),
    ],
)
def test_cli_bad_input_is_a_typed_error_before_anything_runs(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    assert message in capsys.readouterr().err


async def test_unknown_engine_is_refused_before_anything_starts() -> None:
    with pytest.raises(UnknownEngine, match="nosuchengine"):
        await run_suite([Url("nosuchengine", "http://127.0.0.1:1")], Synthetic(num_prompts=1), [Load()])


async def test_unreachable_target_says_what_to_do() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(EngineUnavailable, match=r"cannot reach vllm at .*Start the engine") as caught:
        await run_suite([Url("vllm", url)], Synthetic(num_prompts=1), [Load()])
    assert str(caught.value).count("cannot reach") == 1  # said once, not nested


async def test_impossible_layout_is_refused_before_any_engine_starts(server: FaultServer) -> None:
    cells = matrix(["vllm"], {"model": "/models/m"}, vary={"tensor": [1, 4096]})
    assert [c.label for c in cells] == ["vllm tensor=1", "vllm tensor=4096"]
    with pytest.raises(InvalidOptions, match="tensor=4096 x pipeline=1 x data=1 needs 4096 devices"):
        await run_suite([Url("vllm", server.url), *cells], Synthetic(num_prompts=1), [Load()])
    assert server.count("/v1/completions") == 0  # the healthy target was not measured either


async def test_empty_dataset_is_refused(tmp_path: Path) -> None:
    (tmp_path / "e.jsonl").write_text("")
    from unillm.bench import JsonlPrompts

    with pytest.raises(InvalidOptions, match="has no prompts"):
        await run_suite(
            [Url("vllm", "http://127.0.0.1:1")], JsonlPrompts(path=str(tmp_path / "e.jsonl")), [Load()]
        )


def test_a_fleet_needs_several_urls() -> None:
    with pytest.raises(InvalidOptions, match="at least two URLs"):
        Fleet("vllm", ["http://127.0.0.1:1"])


def test_matrix_expands_engines_times_settings() -> None:
    cells = matrix(
        ["vllm", "sglang"],
        {"model": "m"},
        vary={"prefix_caching": [True, False], "speculative": [None, "ngram:4"]},
    )
    assert len(cells) == 8
    assert cells[1].label == "vllm prefix_caching=on speculative=ngram:4"
    spec = cells[1].launch().spec
    assert spec.speculative is not None and spec.speculative.num_tokens == 4
    assert "--speculative-config" in cells[1].launch().command().render()


async def test_crashed_engine_is_reported_and_the_matrix_goes_on(server: FaultServer) -> None:
    def lookalike(crash_after: int) -> Launched:
        return Launched(
            "vllm",
            {
                "model": "tiny",
                "served_name": "tiny",
                "ready_timeout": 60,
                "prefix": fake_engine.prefix(crash_after=crash_after),
            },
            label=f"crashes after {crash_after}",
        )

    never_starts = Launched(
        "vllm",
        {"model": "tiny", "ready_timeout": 60, "prefix": [sys.executable, "-c", "raise SystemExit(5)", "--"]},
        label="never starts",
    )
    report = await run_suite(
        [lookalike(6), never_starts, Url("vllm", server.url, label="healthy")],
        Synthetic(num_prompts=40, output_len=16),
        [Load(rate=40, arrival="fixed"), Load(max_concurrency=2)],
    )
    crashed, crashed_next, failed_start, failed_start_next, ok, ok_next = report.runs
    assert crashed.error is not None and "exited with code 3" in crashed.error
    assert crashed.summary is not None and crashed.summary.failed > 0
    assert crashed.target.command is not None and "--crash-after" in crashed.target.command
    assert crashed_next.error is not None and crashed_next.error.startswith("not run:")
    for r in (failed_start, failed_start_next):
        assert r.error is not None and "LaunchError" in r.error and "exited with code 5" in r.error
    for r in (ok, ok_next):
        assert r.error is None and r.summary is not None and r.summary.completed == 40


def test_plain_progress_lines_when_not_on_a_terminal(capsys: pytest.CaptureFixture[str]) -> None:
    from unillm.bench.live import live_progress
    from unillm.bench.runner import Progress

    with live_progress(False) as off:
        assert off is None
    with live_progress(True) as hook:  # pytest's stderr is not a terminal: plain lines
        assert hook is not None
        hook(Progress("vllm | concurrency=4", 10, 1, 0, 0.5, 32))
        hook(Progress("vllm | concurrency=4", 10, 10, 2, 2.0, 320))
    err = capsys.readouterr().err.splitlines()
    assert err == [
        "[unillm bench] running vllm | concurrency=4: 1/10 done, 0 failed, 64 tok/s, 0.5 s",
        "[unillm bench] running vllm | concurrency=4: 10/10 done, 2 failed, 160 tok/s, 2.0 s",
    ]


async def test_fleet_results_show_each_replica_share(tmp_path: Path) -> None:
    with FaultServer() as a, FaultServer() as b:
        report = await run_suite(
            [Fleet("vllm", [a.url, b.url], policy="round_robin")],
            Synthetic(num_prompts=10, output_len=4),
            [Load(max_concurrency=2)],
        )
        (run,) = report.runs
        assert run.summary is not None and run.summary.completed == 10
        assert run.summary.replica_counts == {a.url: 5, b.url: 5}
        assert run.target.urls == [a.url, b.url] and run.target.settings == {"policy": "round_robin"}
        assert a.count("/v1/completions") == b.count("/v1/completions") == 5
        write_report(report, tmp_path)
        assert (tmp_path / "replica_share.png").is_file()


async def test_config_target_connects_as_the_config_says(server: FaultServer, tmp_path: Path) -> None:
    from unillm.bench import Config

    config = tmp_path / "unillm.toml"
    config.write_text(f'engine = "vllm"\nbase_url = "{server.url}"\n[defaults]\nmax_tokens = 4\n')
    report = await run_suite([Config(str(config))], Synthetic(num_prompts=3, output_len=6), [Load()])
    (run,) = report.runs
    assert run.summary is not None and run.summary.completed == 3
    assert run.target.urls == [server.url] and run.target.model == "tiny"
