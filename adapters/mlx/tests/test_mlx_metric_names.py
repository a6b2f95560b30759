"""MLX and metrics: mlx_lm's server has none (refused before sending); in-process MLX has counters."""

from __future__ import annotations

import httpx
import pytest
from unillm_mlx import MLXAdapter

import unillm
from unillm.metrics import EngineMetrics


@pytest.mark.anyio
async def test_server_metrics_are_refused_before_sending() -> None:
    seen: list[str] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request.url.path)
        if request.url.path == "/v1/models":
            return httpx.Response(200, json={"data": [{"id": "m"}]})
        return httpx.Response(404)  # mlx_lm.server has no /version (server mode)

    transport = httpx.MockTransport(answer)
    async with unillm.LLM(MLXAdapter(), "http://mlx.invalid", http_transport=transport) as llm:
        with pytest.raises(unillm.UnsupportedFeature, match="no metrics endpoint") as e:
            await llm.metrics()
    assert "in_process=True" in e.value.alternative and "r.timings" in e.value.alternative
    assert "/metrics" not in seen


def test_in_process_maps_its_own_counters() -> None:
    names = MLXAdapter().metric_names("0.32.2+in-process")
    text = (
        "mlx:requests_total 2\nmlx:prompt_tokens_total 10\nmlx:generation_tokens_total 16\n"
        "mlx:spec_decode_num_accepted_tokens_total 0\nmlx:num_requests_running 1\n"
    )
    n = EngineMetrics.parse(text, engine="mlx", mapping=names).normalized()
    assert (n.prompt_tokens, n.generation_tokens, n.running) == (10, 16, 1)
    assert n.ttft is None and n.waiting is None
