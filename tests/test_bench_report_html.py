"""The report a person looks at: Pareto plot, self-contained HTML page, repeated-run intervals."""

from __future__ import annotations

import base64
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from unillm.bench import Load, Slo, Url, markdown_table, run_suite, write_report
from unillm.bench.sessions import MultiTurn
from unillm.testing.fault_server import FaultServer

pytestmark = pytest.mark.anyio


@pytest.fixture
def server() -> Iterator[FaultServer]:
    with FaultServer(pieces=tuple(f" t{i}" for i in range(6))) as s:
        yield s


async def test_a_repeated_sweep_writes_pareto_png_html_and_intervals(
    server: FaultServer, tmp_path: Path
) -> None:
    report = await run_suite(
        [Url("vllm", server.url)],
        MultiTurn(sessions=2, turns=2, input_len=3, output_len=6),
        [Load(max_concurrency=1), Load(max_concurrency=2)],
        slo=Slo(ttft_ms=60_000),
        runs=2,
        cancel_rate=0.3,
    )
    assert len(report.runs) == 4
    table = markdown_table(report.runs)
    assert "mean ± 95%" in table and "good sessions/s" in table and "| run |" in table
    names = {p.name for p in write_report(report, tmp_path)}
    assert {"pareto.png", "report.html"} <= names
    page = (tmp_path / "report.html").read_text()
    images = re.findall(r'src="data:image/png;base64,([^"]+)"', page)
    assert len(images) >= 3 and all(base64.b64decode(i)[:4] == b"\x89PNG" for i in images)
    assert page.index('alt="pareto"') < page.index('alt="latency_vs_load"')  # the front first
    assert "Repeated runs" in page and "Every run" in page and "<script" not in page
    assert "http" not in page.replace(server.url, "")  # self-contained: nothing fetched
