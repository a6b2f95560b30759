"""Constrained output: the engine may only write JSON for a pydantic model; unillm validates it."""

import anyio
from _args import engine_args
from pydantic import BaseModel

import unillm


class City(BaseModel):
    name: str
    country: str


async def main() -> None:
    args = engine_args(__doc__, "http://127.0.0.1:8000")
    async with unillm.connect(args.engine, args.url[0], api_key=args.api_key) as llm:
        r = await llm.generate("Name a city as JSON:", output=City, max_tokens=64)
        print("parsed:", r.parsed)


anyio.run(main)
