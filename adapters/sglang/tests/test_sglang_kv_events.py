"""SGLang-CPU publishes its KV-cache events in vLLM's format: a cache_aware fleet can route on them.

The session's server publishes on ``kv_events_endpoint()`` (conftest) and has served other tests
before: the subscription asks for the batches published before it joined (the replay endpoint),
without which the first pages every prompt shares (BOS: SGLang-CPU's pages are one token) would be
unknown and no chain would walk.
"""

from __future__ import annotations

import random
import string

import anyio
import pytest
from sglang_fixtures import SGLangServer, kv_events_endpoint

from unillm.fleet.kv_events import KVEvents
from unillm.fleet.prompt_tokens import PromptTokens
from unillm.launching.model_facts import chat_template
from unillm.options import make_request
from unillm.testing.tiny_model import TinyModel

pytestmark = [pytest.mark.anyio, pytest.mark.engine]


async def test_sglang_reports_the_blocks_of_a_prompt_it_computed(
    sglang_server: SGLangServer, tiny: TinyModel
) -> None:
    tokens = PromptTokens.from_folder(tiny.path, chat_template(tiny.path))
    endpoint, replay = kv_events_endpoint()
    events = KVEvents([endpoint], tokens, [replay])
    await events.start()
    try:
        async with sglang_server.connect() as llm:
            rng = random.Random()
            prompt = " ".join("".join(rng.choices(string.ascii_lowercase, k=5)) for _ in range(60))
            ids = tokens(make_request(prompt, None, None, {}, stream=False))
            assert ids == (await llm.tokenize(prompt)).ids  # the client tokenizes as SGLang does
            await anyio.sleep(0.5)  # the subscription has joined, the replay is in
            assert events.replicas[0].replayed > 0
            await llm.generate(prompt, max_tokens=2)
            with anyio.fail_after(10):
                while not events.held(0, ids, None):
                    await anyio.sleep(0.05)
            size = events.replicas[0].index.block_size
            assert size is not None
            with anyio.fail_after(10):  # the whole prompt, in whole pages, once the request is cached
                while (events.held(0, ids, None) or 0) < (len(ids) - 1) // size * size:
                    await anyio.sleep(0.05)
        assert events.status()[0]["usable"] and events.status()[0]["batches"]
    finally:
        await events.aclose()
