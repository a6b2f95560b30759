"""Two replicas behind one client: prefix routing, session pinning, per-replica stats."""

import anyio
from _args import engine_args

import unillm


async def main() -> None:
    args = engine_args(__doc__, "http://127.0.0.1:8000", "http://127.0.0.1:8001")
    async with unillm.connect(args.engine, args.url, policy="prefix", api_key=args.api_key) as fleet:
        for question in ("What is 2+2?", "What is 3+3?"):
            await fleet.generate("You are terse. " + question, max_tokens=8)
        await fleet.generate("Hi", session="user-42", max_tokens=8)
        for replica in fleet.stats().replicas:
            print(replica)


anyio.run(main)
