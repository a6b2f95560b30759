"""embed() and tokenize(): argument checks, batching, answer checks, refusals, launch rendering.

The engine side is an httpx MockTransport speaking vLLM's API (real engines are in
tests/integration/test_embeddings_vllm.py); every refusal must happen before a request is sent.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest

import unillm
from unillm.adapter.launch_spec import LaunchSpec
from unillm.adapter.registry import get_adapter
from unillm.embeddings import EmbedBatch, EmbedRequest, check_batch, embed_batches, tokenize_request
from unillm.errors import InvalidOptions, InvalidRequest, MalformedResponse, UnsupportedFeature
from unillm.testing.mock_answers import discovery

pytestmark = pytest.mark.anyio
Handler = Callable[[httpx.Request], httpx.Response]


def vllm_like(
    sent: list[dict[str, Any]], *, dims: Callable[[str], int] = lambda t: 3, status: int = 200
) -> Handler:
    """A vLLM look-alike: embeddings whose first value is the text's length, in reversed order."""

    def handle(request: httpx.Request) -> httpx.Response:
        if (found := discovery(request, model="emb", max_model_len=256)) is not None:
            return found
        body = json.loads(request.content)
        sent.append({"path": request.url.path, **body})
        if status != 200:
            return httpx.Response(status, json={"error": {"message": "nope", "code": status}})
        if request.url.path == "/tokenize":
            ids = [0, *range(10, 10 + len(body.get("prompt") or "ab"))]
            return httpx.Response(200, json={"tokens": ids, "count": len(ids), "max_model_len": 256})
        data = [
            {"index": i, "object": "embedding", "embedding": [float(len(t))] + [0.5] * (dims(t) - 1)}
            for i, t in enumerate(body["input"])
        ]
        return httpx.Response(200, json={"data": data[::-1], "usage": {"prompt_tokens": 2 * len(data)}})

    return handle


def client(handler: Handler, engine: str = "vllm") -> unillm.LLM:
    return unillm.LLM(
        engine,
        "http://engine",
        http_transport=httpx.MockTransport(handler),
        retry=unillm.RetryPolicy(attempts=1),
    )


# -- arguments ------------------------------------------------------------------------------


def test_texts_are_split_into_batches_in_order() -> None:
    batches = embed_batches(["a", "b", "c", "d", "e"], batch_size=2, dimensions=None, timeout=None)
    assert [b.texts for b in batches] == [("a", "b"), ("c", "d"), ("e",)]


def test_a_single_string_is_one_text() -> None:
    assert embed_batches("hello", batch_size=8, dimensions=4, timeout=1.0) == [
        EmbedRequest(("hello",), 4, 1.0)
    ]


@pytest.mark.parametrize(
    ("texts", "options", "match"),
    [
        ([], {}, "non-empty list"),
        (["ok", ""], {}, r"texts\[1\]"),
        (["ok", 3], {}, r"texts\[1\]"),
        ({"a": 1}, {}, "non-empty list"),
        (["ok"], {"batch_size": 0}, "batch_size"),
        (["ok"], {"dimensions": True}, "dimensions"),
        (["ok"], {"timeout": -1}, "timeout"),
    ],
)
def test_bad_embed_arguments_are_refused_with_what_to_do(
    texts: Any, options: dict[str, Any], match: str
) -> None:
    settings = {"batch_size": 8, "dimensions": None, "timeout": None, **options}
    with pytest.raises(InvalidOptions, match=match):
        embed_batches(texts, **settings)


def test_tokenize_needs_exactly_one_of_text_and_messages() -> None:
    with pytest.raises(InvalidOptions, match="tokenize"):
        tokenize_request(None, None)
    with pytest.raises(InvalidOptions, match="tokenize"):
        tokenize_request("a", [{"role": "user", "content": "b"}])
    with pytest.raises(InvalidOptions, match="string"):
        tokenize_request(b"bytes", None)  # type: ignore[arg-type]


# -- answers --------------------------------------------------------------------------------


def test_a_batch_with_too_few_vectors_is_malformed() -> None:
    with pytest.raises(MalformedResponse, match="1 embeddings for 2 texts"):
        check_batch(EmbedBatch([[1.0]]), EmbedRequest(("a", "b")), "vllm", None)


def test_vectors_of_different_lengths_are_malformed() -> None:
    with pytest.raises(MalformedResponse, match="different lengths"):
        check_batch(EmbedBatch([[1.0], [1.0, 2.0]]), EmbedRequest(("a", "b")), "vllm", None)


def test_a_length_other_than_the_dimensions_asked_for_is_malformed() -> None:
    with pytest.raises(MalformedResponse, match=r"expected 8 \(dimensions= asked for it"):
        check_batch(EmbedBatch([[1.0, 2.0]]), EmbedRequest(("a",), dimensions=8), "vllm", 8)


def test_the_openai_answer_is_read_in_input_order_whatever_its_order() -> None:
    adapter = get_adapter("vllm")
    info = adapter.parse_info({"version": {"version": "0.32.0"}, "models": {"data": [{"id": "m"}]}}, None)
    body = {
        "data": [{"index": 1, "embedding": [2, 2]}, {"index": 0, "embedding": [1.5, 1]}],
        "usage": {"prompt_tokens": 7},
    }
    batch = adapter.parse_embeddings(body, EmbedRequest(("a", "b")), info)
    assert batch == EmbedBatch([[1.5, 1.0], [2.0, 2.0]], 7)
    with pytest.raises(MalformedResponse, match="lists of numbers"):
        adapter.parse_embeddings({"data": [{"index": 0, "embedding": "AAAA"}]}, EmbedRequest(("a",)), info)


# -- LLM.embed / LLM.tokenize -----------------------------------------------------------------


async def test_embed_batches_concurrently_and_returns_vectors_in_input_order() -> None:
    sent: list[dict[str, Any]] = []
    texts = [f"text {'x' * i}" for i in range(7)]
    async with client(vllm_like(sent)) as llm:
        e = await llm.embed(texts, batch_size=3, concurrency=2)
    assert [v[0] for v in e.vectors] == [float(len(t)) for t in texts]
    assert sorted(len(r["input"]) for r in sent) == [1, 3, 3]
    assert all(r["model"] == "emb" and r["encoding_format"] == "float" for r in sent)
    assert (e.dimensions, e.usage.prompt_tokens, e.model, e.engine) == (3, 14, "emb", "vllm")
    assert len(e) == 7 and e.cosine(0, 0) == pytest.approx(1.0)


async def test_dimensions_are_sent_and_checked() -> None:
    sent: list[dict[str, Any]] = []
    async with client(vllm_like(sent, dims=lambda t: 2)) as llm:
        assert (await llm.embed(["a"], dimensions=2)).dimensions == 2
        with pytest.raises(MalformedResponse, match="expected 5"):
            await llm.embed(["a"], dimensions=5)
    assert [r.get("dimensions") for r in sent] == [2, 5]


async def test_vectors_with_strings_or_booleans_in_them_are_malformed() -> None:
    def handle(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/embeddings":
            data = [{"index": 0, "embedding": [0.5, "0.25"]}, {"index": 1, "embedding": [True, 1]}]
            return httpx.Response(200, json={"data": data})
        return vllm_like([])(request)

    async with client(handle) as llm:
        with pytest.raises(MalformedResponse, match="not all finite numbers"):
            await llm.embed(["a", "b"])


async def test_batches_of_different_lengths_are_malformed() -> None:
    sent: list[dict[str, Any]] = []
    async with client(vllm_like(sent, dims=lambda t: 4 if t == "long" else 3)) as llm:
        with pytest.raises(MalformedResponse, match="earlier batches"):
            await llm.embed(["short", "long"], batch_size=1, concurrency=1)


async def test_an_engine_error_in_one_batch_surfaces_typed_not_as_a_group() -> None:
    sent: list[dict[str, Any]] = []
    async with client(vllm_like(sent, status=400)) as llm:
        with pytest.raises(InvalidRequest, match="nope"):
            await llm.embed(["a", "b", "c"], batch_size=1)


async def test_tokenize_sends_the_text_or_the_messages_with_the_generation_prompt() -> None:
    sent: list[dict[str, Any]] = []
    async with client(vllm_like(sent)) as llm:
        t = await llm.tokenize("abc")
        await llm.tokenize(messages=[{"role": "user", "content": "hi"}])
    assert (t.ids, t.count, t.max_model_len, t.model) == ([0, 10, 11, 12], 4, 256, "emb")
    assert sent[0] == {"path": "/tokenize", "model": "emb", "prompt": "abc"}
    assert sent[1] == {
        "path": "/tokenize",
        "model": "emb",
        "add_generation_prompt": True,
        "messages": [{"role": "user", "content": "hi"}],
    }


def tgi_like(sent: list[str]) -> Handler:
    def handle(request: httpx.Request) -> httpx.Response:
        sent.append(request.url.path)
        if request.url.path == "/info":
            return httpx.Response(200, json={"model_id": "m", "version": "3.3.6", "max_total_tokens": 64})
        if request.url.path == "/tokenize":
            return httpx.Response(
                200,
                json=[
                    {"id": 5, "text": "a", "start": 0, "stop": 1},
                    {"id": 6, "text": "b", "start": 1, "stop": 2},
                ],
            )
        if request.url.path == "/chat_tokenize":
            return httpx.Response(
                200,
                json={
                    "templated_text": "x",
                    "tokenize_response": [{"id": 9, "text": "x", "start": 0, "stop": 1}],
                },
            )
        return httpx.Response(404)

    return handle


async def test_tgi_refuses_embed_before_sending_and_points_to_tei() -> None:
    sent: list[str] = []
    async with client(tgi_like(sent), "tgi") as llm:
        with pytest.raises(UnsupportedFeature, match="Text Embeddings Inference"):
            await llm.embed(["a"])
        text = await llm.tokenize("ab")
        chat = await llm.tokenize(messages=[{"role": "user", "content": "x"}])
    assert sent == ["/info", "/tokenize", "/chat_tokenize"]
    assert (text.ids, text.max_model_len, chat.ids) == ([5, 6], 64, [9])


async def test_mlx_server_refuses_embed_and_tokenize_before_sending() -> None:
    sent: list[str] = []

    def handle(request: httpx.Request) -> httpx.Response:
        sent.append(request.url.path)
        models = request.url.path == "/v1/models"
        return httpx.Response(200, json={"data": []}) if models else httpx.Response(404)

    async with client(handle, "mlx") as llm:
        with pytest.raises(UnsupportedFeature, match='task="embed"'):
            await llm.embed(["a"])
        with pytest.raises(UnsupportedFeature, match="in_process=True"):
            await llm.tokenize("a")
    assert "/tokenize" not in sent and "/v1/embeddings" not in sent


# -- launch ---------------------------------------------------------------------------------


def test_task_embed_renders_each_engines_embedding_mode() -> None:
    spec = LaunchSpec(model="/m", task="embed", python="py")
    assert get_adapter("vllm").command(spec).argv[-2:] == ["--runner", "pooling"]
    assert "--is-embedding" in get_adapter("sglang").command(spec).argv
    assert "--runner" not in get_adapter("vllm").command(LaunchSpec(model="/m")).argv
    for engine in ("tgi", "mlx"):
        with pytest.raises(UnsupportedFeature, match='task="embed"'):
            get_adapter(engine).command(spec)


def test_capability_table_has_embedding_and_tokenize_rows() -> None:
    expected = {"vllm": (True, True), "sglang": (True, True), "tgi": (False, True), "mlx": (False, False)}
    for engine, (embed, tokenize) in expected.items():
        caps = get_adapter(engine).capabilities()
        assert (caps.supports(unillm.Feature.EMBEDDINGS), caps.supports(unillm.Feature.TOKENIZE)) == (
            embed,
            tokenize,
        ), engine
    assert not get_adapter("sglang").capabilities("0.5.2").supports(unillm.Feature.TOKENIZE)


async def test_a_fleet_forwards_embed_and_tokenize_to_a_replica_and_fails_over() -> None:
    sent: list[dict[str, Any]] = []
    good = vllm_like(sent)

    def down(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    replicas = [
        unillm.LLM(
            "vllm",
            f"http://replica-{i}",
            http_transport=httpx.MockTransport(h),
            retry=unillm.RetryPolicy(attempts=1),
            model="emb",
        )
        for i, h in enumerate((down, good))
    ]
    async with unillm.Fleet(replicas) as fleet:
        e = await fleet.embed(["a", "bb"])
        t = await fleet.tokenize("abc")
    assert [v[0] for v in e.vectors] == [1.0, 2.0] and t.count == 4
    assert [r["path"] for r in sent] == ["/v1/embeddings", "/tokenize"]
