"""connect() accepts the URLs people actually paste, and refuses the ones that cannot work."""

from __future__ import annotations

import pytest

import unillm
from unillm.testing.fault_server import FaultServer

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize("suffix", ["", "/", "/v1", "/v1/"])
async def test_an_openai_style_base_url_reaches_the_same_engine(suffix: str) -> None:
    with FaultServer() as server:
        async with unillm.connect("vllm", server.url + suffix) as llm:
            r = await llm.generate("hi", max_tokens=4)
        assert server.requests[-1].path == "/v1/completions"
    assert r.text


@pytest.mark.parametrize("url", ["127.0.0.1:8000", "localhost", "", "ftp://host"])
def test_a_base_url_without_http_is_refused_with_an_example(url: str) -> None:
    with pytest.raises(unillm.InvalidOptions, match="http://"):
        unillm.connect("vllm", url)


def test_an_unknown_engine_names_the_installed_ones() -> None:
    with pytest.raises(unillm.UnknownEngine, match="vllm"):
        unillm.connect("vllmm", "http://127.0.0.1:8000")


@pytest.mark.parametrize("engine", [None, 42])
def test_an_engine_that_is_not_a_name_is_refused_typed(engine: object) -> None:
    with pytest.raises(unillm.InvalidOptions, match="engine must be an engine name"):
        unillm.connect(engine, "http://127.0.0.1:8000")  # type: ignore[call-overload]
    with pytest.raises(unillm.InvalidOptions, match="engine must be an engine name"):
        unillm.launch(engine, model="m")  # type: ignore[call-overload]
