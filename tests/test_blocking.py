"""The blocking twin needs no event loop of the caller's and never hangs the interpreter."""

from __future__ import annotations

import subprocess
import sys

import anyio
import pytest

import unillm
from unillm.testing.fault_server import FaultServer


def test_blocking_generate_and_stream_work_without_an_event_loop() -> None:
    with FaultServer() as server, unillm.connect("vllm", server.url).blocking() as llm:
        whole = llm.generate("hi", max_tokens=4)
        streamed = "".join(d.text for d in llm.stream("hi", max_tokens=4))
    assert whole.text
    assert streamed == whole.text


def test_blocking_errors_are_the_same_typed_errors() -> None:
    with FaultServer() as server, unillm.connect("vllm", server.url).blocking() as llm:
        server.fail(400, message="nope")
        with pytest.raises(unillm.InvalidRequest, match="nope"):
            llm.generate("hi", max_tokens=4)


def test_a_forgotten_blocking_client_does_not_hang_interpreter_exit() -> None:
    code = "import unillm; unillm.connect('vllm', 'http://127.0.0.1:9').blocking(); print('ok')"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0
    assert done.stdout.strip() == "ok"


def test_the_blocking_twin_has_capabilities_like_the_async_llm() -> None:
    with FaultServer() as server:
        async_caps = anyio.run(unillm.connect("vllm", server.url).capabilities)
        with unillm.connect("vllm", server.url).blocking() as llm:
            caps = llm.capabilities()
    assert isinstance(caps, unillm.Capabilities)
    assert caps == async_caps


def test_the_blocking_twin_gives_a_blocking_openai_client() -> None:
    import openai

    with FaultServer(model="tiny") as server, unillm.connect("vllm", server.url).blocking() as llm:
        client = llm.openai()
        assert isinstance(client, openai.OpenAI)
        answer = client.completions.create(model="tiny", prompt="hi", max_tokens=4)
        assert answer.choices[0].text == llm.generate("hi", max_tokens=4).text
        client.close()


def test_the_blocking_generate_is_typed_like_the_async_one() -> None:
    from typing_extensions import get_overloads

    from unillm.client.blocking import BlockingLLM
    from unillm.client.llm import LLM

    def returns(fn: object) -> list[str]:
        return [o.__annotations__["return"] for o in get_overloads(fn)]  # type: ignore[arg-type]

    assert returns(BlockingLLM.generate) == ["Completion[M]", "Completion[Any]"]
    assert returns(BlockingLLM.generate) == returns(LLM.generate)


def test_closing_a_client_after_its_loop_stopped_does_nothing() -> None:
    """At interpreter exit the loop stops first (closing its clients' connections); a later close()
    of a client on it, e.g. from another exit hook, must not raise."""
    from unillm.client.blocking import BlockingLLM, _Loop

    loop = _Loop()
    llm = BlockingLLM(unillm.connect("vllm", "http://127.0.0.1:9"), loop)
    loop.close()
    llm.close()
    assert loop.closed


def test_a_blocking_fleet_refuses_openai_like_the_async_fleet() -> None:
    fleet = unillm.connect("vllm", ["http://127.0.0.1:9", "http://127.0.0.1:10"])
    with fleet.blocking() as llm, pytest.raises(unillm.UnsupportedFeature, match="Fleet"):
        llm.openai()
