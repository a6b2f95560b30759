"""Client timings of a stream, and an observer that sees every call."""

from typing import Any

import anyio
from _args import engine_args

import unillm


class Log:
    def start(self, call: Any) -> None:
        print(f"call: {call.engine} {call.model} {call.operation} {dict(call.attributes)}")


async def main() -> None:
    args = engine_args(__doc__, "http://127.0.0.1:8000")
    unillm.observe.add(Log())
    async with unillm.connect(args.engine, args.url[0], api_key=args.api_key) as llm:
        with unillm.observe.attributes({"app.user": "u1"}):
            async for d in llm.stream("Hello", max_tokens=8):
                if d.timings is not None:
                    print(f"ttft {d.timings.ttft_s:.4f} s, total {d.timings.total_s:.4f} s")


anyio.run(main)
