"""Token counts of a text and of chat messages (with --embed: embeddings, on an embedding model)."""

import anyio
from _args import engine_args

import unillm


async def main() -> None:
    args = engine_args(__doc__, "http://127.0.0.1:8000")
    async with unillm.connect(args.engine, args.url[0], api_key=args.api_key) as llm:
        t = await llm.tokenize("Hello world")
        print("text:", t.count, "tokens of", t.max_model_len)
        t = await llm.tokenize(messages=[{"role": "user", "content": "Hello world"}])
        print("chat:", t.count, "tokens")
        if args.embed:
            e = await llm.embed(["A cat sits on the mat", "A kitten rests on a rug"])
            print("cosine:", e.cosine(0, 1))


anyio.run(main)
