"""The OpenAI Agents SDK model over the vLLM look-alike: what a Runner sends and what it gets back."""

from __future__ import annotations

import pytest
from agents import (
    Agent,
    ModelSettings,
    RunConfig,
    RunHooks,
    Runner,
    WebSearchTool,
    function_tool,
    set_tracing_disabled,
)
from framework_server import Capital, answer, call, connect, llm, sent, server  # noqa: F401 (server, llm: fixtures)
from framework_server import get_weather as weather_function
from openai.types.responses import ResponseTextDeltaEvent

import unillm
from unillm.integrations.openai_agents import UnillmAgentsModel, UnillmProvider
from unillm.testing.fault_server import FaultServer

pytestmark = pytest.mark.anyio
set_tracing_disabled(True)  # the SDK would export traces to OpenAI


get_weather = function_tool(weather_function)


async def test_a_tool_call_runs_the_tool_and_sends_its_result_back(
    llm: unillm.LLM, server: FaultServer
) -> None:
    agent = Agent(name="w", instructions="Be brief.", tools=[get_weather], model=UnillmAgentsModel(llm))
    answer(server, calls=[call("get_weather", {"city": "Oslo"})], stream=True)
    result = Runner.run_streamed(agent, "What is the weather in Oslo?")
    async for event in result.stream_events():
        if event.type == "run_item_stream_event" and event.name == "tool_output":
            answer(server, text="It is snowy in Oslo.", stream=True)
    first, second = (s.body for s in server.seen("/v1/chat/completions"))
    assert first["messages"][0] == {"role": "system", "content": "Be brief."}
    assert first["tools"][0]["function"]["name"] == "get_weather"
    assert second["messages"][-1] == {"role": "tool", "tool_call_id": "call_1", "content": "snowy in Oslo"}
    assert result.final_output == "It is snowy in Oslo."


async def test_a_whole_answer_with_a_tool_call_then_text(llm: unillm.LLM, server: FaultServer) -> None:
    agent = Agent(name="w", tools=[get_weather], model=UnillmAgentsModel(llm))
    answer(server, calls=[call("get_weather", {"city": "Oslo"})])
    hooks_seen: list[str] = []

    class Hooks(RunHooks[None]):
        async def on_tool_end(self, context: object, agent: object, tool: object, result: object) -> None:
            hooks_seen.append(str(result))
            answer(server, text="Snowy.")

    result = await Runner.run(agent, "Weather in Oslo?", hooks=Hooks())
    assert (hooks_seen, result.final_output) == (["snowy in Oslo"], "Snowy.")
    assert result.context_wrapper.usage.input_tokens == 14  # two requests of 7


async def test_a_structured_output_type_is_unillms_constrained_output(
    llm: unillm.LLM, server: FaultServer
) -> None:
    agent = Agent(name="c", model="tiny", output_type=Capital)  # a name: else GPT-5 defaults
    answer(server, text='{"country": "Kenya", "capital": "Nairobi"}')
    result = await Runner.run(
        agent, "Capital of Kenya?", run_config=RunConfig(model_provider=UnillmProvider(llm))
    )
    assert result.final_output == Capital(country="Kenya", capital="Nairobi")
    assert set(sent(server)["structured_outputs"]["json"]["properties"]) == {"country", "capital"}


async def test_a_streamed_answer_arrives_as_text_deltas_with_reasoning(
    llm: unillm.LLM, server: FaultServer
) -> None:
    agent = Agent(name="s", model=UnillmAgentsModel(llm))
    answer(server, text="Hello there", reasoning="say hello", stream=True)
    result = Runner.run_streamed(agent, "Hello")
    deltas = [
        e.data.delta
        async for e in result.stream_events()
        if e.type == "raw_response_event" and isinstance(e.data, ResponseTextDeltaEvent)
    ]
    assert "".join(deltas) == "Hello there" and len(deltas) == 2
    kinds = [item.type for item in result.new_items]
    assert kinds == ["reasoning_item", "message_output_item"]


async def test_settings_map_to_unillm_options(llm: unillm.LLM, server: FaultServer) -> None:
    settings = ModelSettings(temperature=0.0, max_tokens=9, top_p=0.5)
    agent = Agent(name="s", model=UnillmAgentsModel(llm), model_settings=settings)
    answer(server, text="ok")
    await Runner.run(agent, "Hi")
    body = sent(server)
    assert (body["temperature"], body["max_tokens"], body["top_p"]) == (0.0, 9, 0.5)


@pytest.mark.parametrize(
    ("agent_kwargs", "match"),
    [
        ({"tools": [WebSearchTool()]}, "hosted tool WebSearchTool"),
        ({"model_settings": ModelSettings(truncation="auto")}, "truncation"),
    ],
)
async def test_what_unillm_cannot_honour_is_refused_before_sending(
    llm: unillm.LLM, server: FaultServer, agent_kwargs: dict[str, object], match: str
) -> None:
    agent = Agent(name="r", model=UnillmAgentsModel(llm), **agent_kwargs)  # type: ignore[arg-type]
    with pytest.raises(unillm.UnsupportedFeature, match=match):
        await Runner.run(agent, "Hi")
    assert server.count("/v1/chat/completions") == 0


async def test_the_provider_reports_the_agents_model_name(llm: unillm.LLM) -> None:
    assert UnillmProvider(llm).get_model("tiny").model == "tiny"  # type: ignore[attr-defined]
