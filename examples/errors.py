"""Bad input is refused before sending; the engine's refusals come back typed."""

import anyio
from _args import engine_args

import unillm


async def main() -> None:
    args = engine_args(__doc__, "http://127.0.0.1:8000")
    async with unillm.connect(args.engine, args.url[0], api_key=args.api_key) as llm:
        for options in ({"temperature": float("nan")}, {"lora": "no-such-lora"}):
            try:
                await llm.generate("Hi", max_tokens=4, **options)
            except unillm.UnillmError as e:
                print(f"{options}: {type(e).__name__}: {e}")


anyio.run(main)
