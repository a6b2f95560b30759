"""The LangChain chat model over the vLLM look-alike, and LangChain's standard unit tests for it."""

from __future__ import annotations

import pytest
from framework_server import Capital, answer, call, connect, llm, sent, server  # noqa: F401 (server, llm: fixtures)
from framework_server import get_weather as weather_function
from langchain_core.messages import AIMessageChunk, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langchain_tests.unit_tests import ChatModelUnitTests

import unillm
from unillm.integrations.langchain import ChatUnillm
from unillm.testing.fault_server import FaultServer

pytestmark = pytest.mark.anyio


get_weather = tool(weather_function)


async def test_bound_tools_come_back_as_tool_calls_and_results_go_back(
    llm: unillm.LLM, server: FaultServer
) -> None:
    chat = ChatUnillm(client=llm, temperature=0).bind_tools([get_weather])
    answer(server, calls=[call("get_weather", {"city": "Oslo"})])
    question = HumanMessage("What is the weather in Oslo?")
    ai = await chat.ainvoke([question])
    assert [(c["name"], c["args"], c["id"]) for c in ai.tool_calls] == [
        ("get_weather", {"city": "Oslo"}, "call_1")
    ]
    answer(server, text="Snowy.")
    result = get_weather.invoke(ai.tool_calls[0]["args"])
    final = await chat.ainvoke([question, ai, ToolMessage(result, tool_call_id="call_1")])
    body = sent(server)
    assert body["messages"][-1] == {"role": "tool", "tool_call_id": "call_1", "content": "snowy in Oslo"}
    assert body["tools"][0]["function"]["name"] == "get_weather" and body["temperature"] == 0
    assert (final.content, final.usage_metadata["input_tokens"]) == ("Snowy.", 7)  # type: ignore[index]


@pytest.mark.parametrize("include_raw", [False, True])
async def test_structured_output_is_unillms_constrained_output(
    llm: unillm.LLM, server: FaultServer, include_raw: bool
) -> None:
    chat = ChatUnillm(client=llm).with_structured_output(Capital, include_raw=include_raw)
    answer(server, text='{"country": "Kenya", "capital": "Nairobi"}')
    out = await chat.ainvoke("What is the capital of Kenya? Reply in JSON.")
    parsed = out["parsed"] if include_raw else out  # type: ignore[index]
    assert parsed == Capital(country="Kenya", capital="Nairobi")
    assert set(sent(server)["structured_outputs"]["json"]["properties"]) == {"country", "capital"}


async def test_structured_output_by_function_calling_forces_the_tool(
    llm: unillm.LLM, server: FaultServer
) -> None:
    chat = ChatUnillm(client=llm).with_structured_output(Capital, method="function_calling")
    # vLLM without a tool parser: unillm forces the call as the tool's schema on the answer
    answer(server, text='{"country": "Kenya", "capital": "Nairobi"}')
    assert await chat.ainvoke("Kenya?") == Capital(country="Kenya", capital="Nairobi")
    assert sent(server)["tools"][0]["function"]["name"] == "Capital"


async def test_a_stream_arrives_as_chunks_with_reasoning_and_usage(
    llm: unillm.LLM, server: FaultServer
) -> None:
    answer(server, text="Hello there", reasoning="say hi", stream=True)
    chunks = [c async for c in ChatUnillm(client=llm).astream("Hello")]
    whole = sum(chunks[1:], chunks[0])
    assert isinstance(whole, AIMessageChunk) and whole.content == "Hello there"
    assert whole.additional_kwargs["reasoning_content"] == "say hi"
    assert whole.usage_metadata is not None and whole.usage_metadata["output_tokens"] == 5


async def test_a_streamed_tool_call_joins_into_a_tool_call(llm: unillm.LLM, server: FaultServer) -> None:
    answer(server, calls=[call("get_weather", {"city": "Oslo"})], stream=True)
    chunks = [c async for c in ChatUnillm(client=llm).bind_tools([get_weather]).astream("Weather?")]
    whole = sum(chunks[1:], chunks[0])
    assert [(c["name"], c["args"]) for c in whole.tool_calls] == [("get_weather", {"city": "Oslo"})]


def test_a_synchronous_invoke_answers(server: FaultServer) -> None:
    answer(server, text="Hello")
    try:
        assert ChatUnillm(client=connect(server)).invoke("Hi").content == "Hello"
    finally:
        server.scripts.clear()
        server.requests.clear()


async def test_an_option_unillm_has_not_is_refused_before_sending(
    llm: unillm.LLM, server: FaultServer
) -> None:
    with pytest.raises(unillm.UnsupportedFeature, match="logit_bias"):
        await ChatUnillm(client=llm).ainvoke("Hi", logit_bias={"1": 2})
    with pytest.raises(unillm.UnsupportedFeature, match="xml"):
        ChatUnillm(client=llm).with_structured_output(Capital, method="xml")  # type: ignore[arg-type]
    assert server.count("/v1/chat/completions") == 0


class TestChatUnillmStandard(ChatModelUnitTests):
    """LangChain's standard unit tests for chat models (``langchain-tests``)."""

    @property
    def chat_model_class(self) -> type[ChatUnillm]:
        return ChatUnillm

    @property
    def chat_model_params(self) -> dict[str, object]:
        return {"client": unillm.connect("vllm", "http://127.0.0.1:9", model="tiny"), "model_name": "tiny"}

    @property
    def has_tool_calling(self) -> bool:
        return True

    @property
    def has_structured_output(self) -> bool:
        return True
