"""LoRA per request, and the loras the engine serves."""

import anyio
from _args import engine_args

import unillm


async def main() -> None:
    args = engine_args(__doc__, "http://127.0.0.1:8000")
    async with unillm.connect(args.engine, args.url[0], api_key=args.api_key) as llm:
        print("serving:", [lora.name for lora in await llm.loras.list()])
        r = await llm.generate("SELECT", lora="sql", max_tokens=8)
        print("with sql:", r.text)


anyio.run(main)
