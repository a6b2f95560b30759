"""An agent with a Python tool and an MCP tool: get_time runs here, get_weather on an MCP server
(examples/_weather_mcp.py, started over stdio). Needs pip install 'unillm-sdk[mcp]'."""

import sys
from pathlib import Path

import anyio
from _args import engine_args

import unillm

SERVER = Path(__file__).with_name("_weather_mcp.py")


def get_time(city: str) -> str:
    """The local time in a city."""
    return f"12:00 in {city}"


async def main() -> None:
    args = engine_args(__doc__, "http://127.0.0.1:8000")
    weather = unillm.MCPServer.stdio([sys.executable, str(SERVER)], timeout=30)
    async with unillm.connect(args.engine, args.url[0], api_key=args.api_key) as llm, weather:
        print("tools:", "get_time,", ", ".join(t.name for t in weather.tools))
        msgs = [{"role": "user", "content": "What is the weather in Oslo?"}]
        run = await llm.run_tools(msgs, tools=[get_time, weather], max_turns=4, max_tokens=64)
        for turn in run.turns:
            for result in turn.results:
                print("called:", result.call.name, result.call.parsed, "->", result.content)
        print(f"answer ({run.stopped}):", run.text)


anyio.run(main)
