"""The probe's cells through the openai SDK and LiteLLM, on the honest look-alike."""

from __future__ import annotations

import pytest

from unillm.options import Regex
from unillm.probing import run_cells
from unillm.probing.asking import Ask, NotExpressible
from unillm.probing.peers import LiteLLMClient, OpenAIClient, split_options
from unillm.testing.honest_server import HonestServer

pytestmark = pytest.mark.anyio
OPTIONS = ["seed", "n", "repetition_penalty", "output=JSON schema", "output=Regex", "lora", "thinking on/off"]


def test_options_without_an_openai_parameter_go_in_vllms_spelling() -> None:
    ask = Ask(
        ({"role": "user", "content": "x"},),
        {"seed": 1, "repetition_penalty": 2.0, "lora": "sql"},
        Regex("a+"),
    )
    assert split_options(ask) == (
        {"seed": 1},
        {"repetition_penalty": 2.0, "structured_outputs": {"regex": "a+"}},
        "sql",
    )


def test_an_option_no_client_can_spell_is_not_expressible() -> None:
    with pytest.raises(NotExpressible, match="top_k"):
        split_options(Ask(({"role": "user", "content": "x"},), {"top_k": 5}))


@pytest.mark.parametrize("peer", [LiteLLMClient, OpenAIClient])
async def test_a_peer_client_is_probed_cell_by_cell(peer: type[OpenAIClient] | type[LiteLLMClient]) -> None:
    with HonestServer(loras=("sql",), thinks_by_default=True) as server:
        async with peer(server.url, "tiny") as client:
            report = await run_cells(client, engine="vllm", model="tiny", samples=2, only=OPTIONS)
    assert report.client == peer.name
    assert {c.option: c.verdict for c in report.cells} == dict.fromkeys(OPTIONS, "honoured"), report.text()


@pytest.mark.parametrize("peer", [LiteLLMClient, OpenAIClient])
@pytest.mark.parametrize("status", [400, 500])
async def test_an_error_answer_through_a_peer_is_rejected(
    peer: type[OpenAIClient] | type[LiteLLMClient], status: int
) -> None:
    # e.g. llama-cpp-python answers 500 to a request its models refuse: a loud error, not a crash
    with HonestServer() as server:
        server.fail(status, message="1 validation error")
        async with peer(server.url, "tiny") as client:
            report = await run_cells(client, engine="vllm", model="tiny", samples=1, only=["n"])
    assert report.cells[0].verdict == "rejected", report.text()
