"""unillm bench's measuring HTTP client: aiohttp under httpx, same results and errors as httpx."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from unillm.bench import Load, Synthetic, Url, run_suite
from unillm.bench.http import measuring_transport, resolve
from unillm.bench.runner import run_load
from unillm.bench.targets import matrix
from unillm.errors import EngineUnavailable, InvalidOptions, MalformedResponse, StreamInterrupted
from unillm.launching.ports import free_port
from unillm.testing.fault_server import FaultServer

pytestmark = pytest.mark.anyio


@pytest.fixture
def server() -> Iterator[FaultServer]:
    with FaultServer(pieces=tuple(f" t{i}" for i in range(6))) as s:
        yield s


def test_auto_is_aiohttp_when_httpx_aiohttp_is_installed() -> None:
    pytest.importorskip("httpx_aiohttp", reason="the bench extra (httpx-aiohttp) is not installed")
    assert resolve("auto") == "aiohttp"
    assert type(measuring_transport("auto")).__name__ == "AiohttpTransport"
    assert measuring_transport("httpx") is None


def test_an_unknown_client_is_refused() -> None:
    with pytest.raises(InvalidOptions, match=r"unknown HTTP client 'curl'.*auto, aiohttp, httpx"):
        Url("vllm", "http://127.0.0.1:1", http="curl")


def test_asking_for_aiohttp_without_the_package_is_a_typed_error(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "httpx_aiohttp" else real(name, *a)
    )
    assert resolve("auto") == "httpx"
    with pytest.raises(InvalidOptions, match=r"pip install 'unillm-sdk\[bench\]'"):
        resolve("aiohttp")


@pytest.mark.parametrize("http", ["aiohttp", "httpx"])
async def test_both_clients_measure_the_same_requests(server: FaultServer, http: str) -> None:
    pytest.importorskip("httpx_aiohttp", reason="the bench extra (httpx-aiohttp) is not installed")
    report = await run_suite(
        [Url("vllm", server.url, http=http)],
        Synthetic(num_prompts=5, input_len=4, output_len=6),
        [Load(max_concurrency=2)],
    )
    run = report.runs[0]
    assert run.target.client_http == http
    assert run.summary is not None and (run.summary.completed, run.summary.failed) == (5, 0)
    assert run.output_lens == [6] * 5 and [len(g) for g in run.itls] == [5] * 5
    assert server.count("/v1/completions") == 5
    assert run.to_vllm_json()["completed"] == 5


async def test_aiohttp_client_keeps_the_sdk_errors(server: FaultServer) -> None:
    pytest.importorskip("httpx_aiohttp", reason="the bench extra (httpx-aiohttp) is not installed")
    url = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(EngineUnavailable, match="cannot reach vllm"):
        await run_suite([Url("vllm", url, http="aiohttp")], Synthetic(num_prompts=1), [Load()])
    requests = Synthetic(num_prompts=2, input_len=4, output_len=6).requests()
    async with Url("vllm", server.url, http="aiohttp").open() as opened:
        server.truncate(after=2)
        result = await run_load(opened.client, requests, Load(max_concurrency=1))
        assert result.summary is not None and result.summary.failed == 2
        assert [e.split(":")[0] for e in result.errors] == [StreamInterrupted.__name__] * 2
        server.set_fault(None)
        server.wrong_content_type("text/plain")
        result = await run_load(opened.client, requests, Load(max_concurrency=1))
        assert result.summary is not None and result.summary.failed == 2
        assert [e.split(":")[0] for e in result.errors] == [MalformedResponse.__name__] * 2


def test_a_matrix_passes_the_client_to_every_cell() -> None:
    cells = matrix(["vllm", "sglang"], {"model": "/m"}, http="httpx")
    assert [c.http for c in cells] == ["httpx", "httpx"]
