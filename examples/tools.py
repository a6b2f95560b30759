"""A tool call: the model asks for get_weather, the answer goes back, the model replies."""

import anyio
from _args import engine_args

import unillm


def get_weather(city: str) -> str:
    """Current weather in a city."""
    return f"sunny, 21 C in {city}"


async def main() -> None:
    args = engine_args(__doc__, "http://127.0.0.1:8000")
    async with unillm.connect(args.engine, args.url[0], api_key=args.api_key) as llm:
        msgs = [{"role": "user", "content": "Weather in Rome?"}]
        r = await llm.generate(messages=msgs, tools=[get_weather], tool_choice="required", max_tokens=64)
        call = r.tool_calls[0]
        print("call:", call.name, call.parsed)
        result = get_weather(**(call.parsed or {"city": "?"}))
        msgs += [r.message(), {"role": "tool", "tool_call_id": call.id, "content": result}]
        print("answer:", (await llm.generate(messages=msgs, max_tokens=32)).text)


anyio.run(main)
