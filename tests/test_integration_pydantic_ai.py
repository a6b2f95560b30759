"""The pydantic-ai model over the vLLM look-alike: what an Agent sends and what it gets back."""

from __future__ import annotations

import pytest
from framework_server import Capital, answer, call, connect, get_weather, llm, sent, server  # noqa: F401 (server, llm: fixtures)
from pydantic_ai import Agent, NativeOutput
from pydantic_ai.messages import ThinkingPart, ToolCallPart

import unillm
from unillm.integrations.pydantic_ai import UnillmModel
from unillm.testing.fault_server import FaultServer

pytestmark = pytest.mark.anyio


async def test_a_tool_call_runs_the_tool_and_sends_its_result_back(
    llm: unillm.LLM, server: FaultServer
) -> None:
    agent = Agent(UnillmModel(llm), tools=[get_weather], instructions="Be brief.")
    answer(server, calls=[call("get_weather", {"city": "Oslo"})])
    async with agent.iter("What is the weather in Oslo?") as run:
        async for node in run:
            if Agent.is_call_tools_node(node):
                answer(server, text="It is snowy in Oslo.")
    first, second = (s.body for s in server.seen("/v1/chat/completions"))
    assert first["messages"][0] == {"role": "system", "content": "Be brief."}
    assert first["tools"][0]["function"]["name"] == "get_weather"
    assert second["messages"][-1] == {"role": "tool", "tool_call_id": "call_1", "content": "snowy in Oslo"}
    assert run.result is not None and run.result.output == "It is snowy in Oslo."


async def test_native_output_is_unillms_constrained_output(llm: unillm.LLM, server: FaultServer) -> None:
    agent = Agent(UnillmModel(llm), output_type=NativeOutput(Capital))
    answer(server, text='{"country": "Kenya", "capital": "Nairobi"}')
    result = await agent.run("What is the capital of Kenya? Reply in JSON.")
    assert result.output == Capital(country="Kenya", capital="Nairobi")
    assert sent(server)["structured_outputs"]["json"]["properties"].keys() == {"country", "capital"}


async def test_thinking_and_usage_come_back_as_pydantic_ai_parts(
    llm: unillm.LLM, server: FaultServer
) -> None:
    agent = Agent(UnillmModel(llm))
    answer(server, text="4", reasoning="2 and 2 make 4")
    result = await agent.run("What is 2+2?")
    response = result.all_messages()[-1]
    assert isinstance(response.parts[0], ThinkingPart)
    assert (result.output, result.usage.input_tokens, result.usage.output_tokens) == ("4", 7, 5)


@pytest.mark.parametrize("reasoning", [None, "thinking first"])
async def test_a_streamed_answer_arrives_in_pieces(
    llm: unillm.LLM, server: FaultServer, reasoning: str | None
) -> None:
    agent = Agent(UnillmModel(llm))
    answer(server, text="Hello there", reasoning=reasoning, stream=True)
    async with agent.run_stream("Hello") as run:
        pieces = [t async for t in run.stream_text(delta=True, debounce_by=None)]
    assert "".join(pieces) == "Hello there" and len(pieces) >= 2
    assert sent(server)["stream"] is True


async def test_a_streamed_tool_call_is_a_tool_call_part(llm: unillm.LLM, server: FaultServer) -> None:
    model = UnillmModel(llm)
    agent = Agent(model, tools=[get_weather])
    answer(server, calls=[call("get_weather", {"city": "Oslo"})], stream=True)
    async with agent.iter("Weather in Oslo?") as run:
        async for node in run:
            if Agent.is_model_request_node(node):
                async with node.stream(run.ctx) as events:
                    async for _ in events:
                        pass
                answer(server, text="Snowy.", stream=True)
    calls = (
        [p for m in run.result.all_messages() for p in m.parts if isinstance(p, ToolCallPart)]
        if run.result
        else []
    )
    assert [(c.tool_name, c.args_as_dict()) for c in calls] == [("get_weather", {"city": "Oslo"})]


async def test_a_setting_unillm_has_not_is_refused_before_sending(
    llm: unillm.LLM, server: FaultServer
) -> None:
    agent = Agent(UnillmModel(llm), model_settings={"logit_bias": {"1": 5}})
    with pytest.raises(unillm.UnsupportedFeature, match="logit_bias"):
        await agent.run("Hi")
    assert server.count("/v1/chat/completions") == 0


async def test_settings_map_to_unillm_options(llm: unillm.LLM, server: FaultServer) -> None:
    agent = Agent(UnillmModel(llm))
    answer(server, text="ok")
    await agent.run(
        "Hi", model_settings={"max_tokens": 9, "temperature": 0.0, "stop_sequences": ["x"], "seed": 3}
    )
    body = sent(server)
    assert (body["max_tokens"], body["temperature"], body["stop"], body["seed"]) == (9, 0.0, ["x"], 3)
