"""Route prompts by meaning. The toy embedder counts words; use EngineEmbedder(minilm) for real."""

import hashlib
import re
from collections.abc import Sequence

import anyio
from _args import engine_args

import unillm
from unillm.semantic import Route, SemanticRouter


class WordCounts:
    key = "word-counts"

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        vectors = []
        for text in texts:
            v = [0.0] * 64
            for word in re.findall(r"\w+", text.lower()):
                v[int(hashlib.sha256(word.encode()).hexdigest(), 16) % 64] += 1.0
            vectors.append(v)
        return vectors

    async def aclose(self) -> None:
        pass


async def main() -> None:
    args = engine_args(__doc__, "http://127.0.0.1:8000")
    routes = [
        Route(name="code", utterances=["How do I fix this Python error?"], keywords=["git"]),
        Route(name="chitchat", utterances=["Hello, how are you?"]),
    ]
    llm = unillm.connect(args.engine, args.url[0], api_key=args.api_key)
    async with SemanticRouter(routes, embedder=WordCounts(), llm=llm, default="chitchat") as router:
        for prompt in ("Why does git say detached HEAD?", "Hello there, how are you?"):
            r = await router.generate(prompt, max_tokens=8)
            print(f"{prompt!r} -> {r.route.route} ({r.route.reason})")


anyio.run(main)
