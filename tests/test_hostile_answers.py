"""A hostile server: every answer unillm reads, garbled on purpose, gives a result or a UnillmError.

Each case scripts one path of :class:`unillm.testing.fault_server.FaultServer` (a vLLM look-alike)
with an answer of the wrong shape, the wrong type, truncated or undecodable JSON, a line or body
past the size limits, a false Content-Encoding or the wrong content type, then makes the call that
reads it: generate, stream, embed, tokenize, metrics or discovery. Never another exception, never
the API key in a message, never an unbounded message. The first tests pin the defects of issue 16.
"""

from __future__ import annotations

import json
import tracemalloc
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import pytest
from fault_helpers import checked_server

import unillm
from unillm import Pool, RetryPolicy, Timeouts
from unillm.errors import ENGINE_MESSAGE_LIMIT, InvalidRequest, MalformedResponse, UnillmError
from unillm.testing.fault_server import CHAT, COMPLETIONS, FaultServer, Raw

pytestmark = pytest.mark.anyio

API_KEY = "sk-hostile-0123456789-SECRET"
LIMITS = Pool(max_answer_bytes=256 * 1024, max_event_bytes=64 * 1024)
Op = Callable[[unillm.LLM], Awaitable[object]]


@pytest.fixture(scope="module")
def server() -> Iterator[FaultServer]:
    yield from checked_server(model="tiny")


@pytest.fixture(autouse=True)
def clean(server: FaultServer) -> Iterator[None]:
    yield
    server.scripts.clear()


def connect(server: FaultServer, pool: Pool = LIMITS) -> unillm.LLM:
    return unillm.connect(
        "vllm",
        server.url,
        model="tiny",
        api_key=API_KEY,
        pool=pool,
        retry=RetryPolicy(attempts=1),
        timeouts=Timeouts(connect=2, read=5),
    )


# -- the calls -------------------------------------------------------------------------------------
async def generate(llm: unillm.LLM) -> object:
    r = await llm.generate("hi", max_tokens=4)
    return (r.text, r.finish_reason, r.usage, r.tool_calls, r.logprobs)


async def chat(llm: unillm.LLM) -> object:
    r = await llm.generate(messages=[{"role": "user", "content": "hi"}], max_tokens=4)
    return (r.text, r.finish_reason, r.usage, r.tool_calls, r.message())


async def stream(llm: unillm.LLM) -> object:
    async with llm.stream("hi", max_tokens=4) as s:
        deltas = [d async for d in s]
    return (s.text, deltas)


async def chat_stream(llm: unillm.LLM) -> object:
    async with llm.stream(messages=[{"role": "user", "content": "hi"}], max_tokens=4) as s:
        deltas = [d async for d in s]
    return (s.text, s.tool_calls, deltas)


async def embed(llm: unillm.LLM) -> object:
    e = await llm.embed(["a cat", "a dog"])
    return (e.vectors, e.dimensions, e.cosine(0, 1))


async def tokenize(llm: unillm.LLM) -> object:
    t = await llm.tokenize("hi")
    return (t.count, t.ids, t.max_model_len)


async def metrics(llm: unillm.LLM) -> object:
    m = await llm.metrics()
    return (m.names(), m.normalized())


async def info(llm: unillm.LLM) -> object:
    i = await llm.info()
    return (i.model, i.version, await llm.capabilities())


async def outcome(server: FaultServer, op: Op, pool: Pool = LIMITS) -> str:
    """``"ok"`` or the name of the UnillmError the call raised (any other exception fails the test)."""
    failure: UnillmError | None = None
    async with connect(server, pool) as llm:
        try:
            await op(llm)
        except UnillmError as e:
            failure = e
    if failure is None:
        return "ok"
    assert API_KEY not in f"{failure}\n{failure!r}\n{getattr(failure, 'engine_message', '')}"
    assert len(str(failure)) < 4 * ENGINE_MESSAGE_LIMIT, "an unbounded error message"
    return type(failure).__name__


def body(doc: Any) -> Raw:
    return Raw(200, json.dumps(doc).encode())


def events(*docs: Any, done: bool = True) -> Raw:
    """A 200 event stream: dicts and lists as JSON, strings as they are, then ``[DONE]``."""
    pieces = [f"data: {d if isinstance(d, str) else json.dumps(d)}\n\n".encode() for d in docs]
    return Raw(200, [*pieces, *([b"data: [DONE]\n\n"] if done else [])], content_type="text/event-stream")


def chunk(**choice: Any) -> dict[str, Any]:
    return {"id": "x", "object": "text_completion", "model": "tiny", "choices": [{"index": 0, **choice}]}


# -- the defects of issue 16 ----------------------------------------------------------------------
async def test_a_200_without_choices_is_malformed_response(server: FaultServer) -> None:
    server.script(COMPLETIONS, body({"id": "x", "model": "tiny", "choices": []}))
    assert await outcome(server, generate) == "MalformedResponse"


@pytest.mark.parametrize(
    "choice",
    [{"text": "a", "finish_reason": 7}, {"text": "a", "index": "first"}, {"text": "a", "index": [0]}],
    ids=["finish_reason", "index", "index-list"],
)
async def test_a_choice_field_of_the_wrong_type_is_malformed_response(
    server: FaultServer, choice: dict[str, Any]
) -> None:
    server.script(COMPLETIONS, body({"model": "tiny", "choices": [choice]}))
    assert await outcome(server, generate) == "MalformedResponse"


async def test_a_model_of_the_wrong_type_is_malformed_response(server: FaultServer) -> None:
    server.script(COMPLETIONS, body({"model": 5, "choices": [{"text": "a", "finish_reason": "stop"}]}))
    assert await outcome(server, generate) == "MalformedResponse"


@pytest.mark.parametrize(
    "chunk_doc",
    [
        {"choices": 5},
        {"choices": [5]},
        {"choices": [{"index": 0, "delta": "text"}]},
        {"choices": [{"index": 0, "delta": {"tool_calls": 5}}]},
        {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": [1]}]}}]},
        {"choices": [{"index": None, "delta": {"content": "a"}}]},
        {"choices": [{"index": 0, "delta": {"content": "a"}, "finish_reason": {"why": "stop"}}]},
        {"choices": [], "usage": ["many"]},
        {"choices": [], "usage": {"completion_tokens": "many"}},
    ],
    ids=[
        "choices",
        "choice",
        "delta",
        "tool_calls",
        "tool_call_index",
        "index",
        "finish_reason",
        "usage",
        "usage_count",
    ],
)
async def test_a_chat_stream_chunk_of_the_wrong_shape_is_malformed_response(
    server: FaultServer, chunk_doc: dict[str, Any]
) -> None:
    server.script(CHAT, events(chunk_doc))
    assert await outcome(server, chat_stream) == "MalformedResponse"


async def test_a_completion_stream_text_of_the_wrong_type_is_malformed_response(server: FaultServer) -> None:
    server.script(COMPLETIONS, events(chunk(text={"a": 1})))
    assert await outcome(server, stream) == "MalformedResponse"


# -- issue 29: a text of the wrong type is no text -----------------------------------------------
WRONG_TEXTS = [None, 5, 0, False, {"a": 1}, ["a"]]
WRONG_CONTENTS = [5, 0, False, {"a": 1}, ["a"]]  # null content is a chat message without text


def chat_body(content: Any) -> Raw:
    return body({"model": "tiny", "choices": [{"message": {"role": "assistant", "content": content}}]})


WRONG_TEXT_CASES = [
    *(
        pytest.param(
            COMPLETIONS,
            body({"choices": [{"text": t, "finish_reason": "stop"}]}),
            generate,
            id=f"generate-{t!r}",
        )
        for t in WRONG_TEXTS
    ),
    *(pytest.param(CHAT, chat_body(c), chat, id=f"chat-{c!r}") for c in WRONG_CONTENTS),
    *(
        pytest.param(
            COMPLETIONS,
            events(chunk(text="a"), chunk(text=t), chunk(text="", finish_reason="stop")),
            stream,
            id=f"stream-{t!r}",
        )
        for t in WRONG_TEXTS
    ),
    *(
        pytest.param(
            CHAT,
            events(chunk(delta={"content": "a"}), chunk(delta={"content": c}, finish_reason="stop")),
            chat_stream,
            id=f"chat_stream-{c!r}",
        )
        for c in WRONG_CONTENTS
    ),
]


@pytest.mark.parametrize(("path", "answer", "op"), WRONG_TEXT_CASES)
async def test_a_text_of_the_wrong_type_is_malformed_response(
    server: FaultServer, path: str, answer: Raw, op: Op
) -> None:
    server.script(path, answer)
    assert await outcome(server, op) == "MalformedResponse"


async def test_null_content_with_tool_calls_is_an_answer_without_text(server: FaultServer) -> None:
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    message = {"role": "assistant", "content": None, "tool_calls": [call]}
    server.script(
        CHAT, body({"model": "tiny", "choices": [{"message": message, "finish_reason": "tool_calls"}]})
    )
    async with connect(server) as llm:
        r = await llm.generate(messages=[{"role": "user", "content": "hi"}], max_tokens=4)
    assert (r.text, [c.name for c in r.tool_calls]) == ("", ["f"])


async def test_null_delta_content_streams_as_no_text(server: FaultServer) -> None:
    server.script(
        CHAT,
        events(
            chunk(delta={"role": "assistant", "content": None}),
            chunk(delta={"content": "a"}),
            chunk(delta={"content": None}, finish_reason="stop"),
        ),
    )
    async with connect(server) as llm:
        assert await llm.stream(messages=[{"role": "user", "content": "hi"}]).collect() == "a"


async def test_a_false_content_encoding_is_malformed_response(server: FaultServer) -> None:
    plain = json.dumps({"choices": [{"text": "a", "finish_reason": "stop"}]}).encode()
    server.script(COMPLETIONS, Raw(200, plain, headers={"content-encoding": "gzip"}))
    assert await outcome(server, generate) == "MalformedResponse"


async def test_a_false_content_encoding_on_a_stream_is_malformed_response(server: FaultServer) -> None:
    raw = events(chunk(text="a", finish_reason="stop"))
    server.script(COMPLETIONS, Raw(200, raw.body, raw.content_type, headers={"content-encoding": "gzip"}))
    assert await outcome(server, stream) == "MalformedResponse"


async def test_an_sse_line_past_the_event_limit_is_malformed_response_read_no_further(
    server: FaultServer,
) -> None:
    piece = b"x" * (1024 * 1024)
    server.script(COMPLETIONS, Raw(200, [b"data: ", *[piece] * 32], content_type="text/event-stream"))
    tracemalloc.start()
    try:
        result = await outcome(server, stream)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert result == "MalformedResponse"
    assert peak < 8 * 1024 * 1024, f"a 32 MiB line cost {peak} bytes past a 64 KiB limit"


async def test_many_data_lines_of_one_event_past_the_limit_are_malformed_response(
    server: FaultServer,
) -> None:
    server.script(
        COMPLETIONS, Raw(200, [b"data: 0123456789\n" * 1000] * 10, content_type="text/event-stream")
    )
    assert await outcome(server, stream) == "MalformedResponse"


async def test_events_under_the_limit_pass_however_long_the_stream(server: FaultServer) -> None:
    docs = [chunk(text="x" * 1000) for _ in range(200)] + [chunk(text="", finish_reason="stop")]
    server.script(COMPLETIONS, events(*docs))
    async with connect(server) as llm:
        assert len(await llm.stream("hi").collect()) == 200 * 1000  # 200 KB in all, past 64 KiB


async def test_a_body_past_the_answer_limit_is_malformed_response(server: FaultServer) -> None:
    server.script(COMPLETIONS, Raw(200, b'{"choices": [{"text": "' + b"x" * 300_000 + b'"}]}'))
    assert await outcome(server, generate) == "MalformedResponse"


async def test_a_chunked_body_past_the_answer_limit_is_malformed_response(server: FaultServer) -> None:
    server.script(COMPLETIONS, Raw(200, [b'{"choices": [{"text": "', *[b"x" * 65536] * 8]))
    assert await outcome(server, generate) == "MalformedResponse"


async def test_the_answer_limit_is_settable(server: FaultServer) -> None:
    server.script(COMPLETIONS, body({"choices": [{"text": "x" * 300_000, "finish_reason": "stop"}]}))
    assert await outcome(server, generate, Pool(max_answer_bytes=1024 * 1024)) == "ok"


@pytest.mark.parametrize("value", [0, -1, 1.5, "8MiB", True])
def test_pool_size_limits_must_be_positive_integers(value: object) -> None:
    with pytest.raises(unillm.InvalidOptions, match="max_event_bytes"):
        Pool(max_event_bytes=value)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "data",
    [
        [{"index": 0, "embedding": [0.5, float("nan")]}, {"index": 1, "embedding": [0.5, 0.5]}],
        [{"index": 0, "embedding": [0.5, float("inf")]}, {"index": 1, "embedding": [0.5, 0.5]}],
        [{"index": 0, "embedding": [0.5, 0.5]}, {"index": 0, "embedding": [0.1, 0.2]}],
        [{"index": 0, "embedding": [0.5, 0.5]}, {"index": 2, "embedding": [0.1, 0.2]}],
        [{"index": 0, "embedding": [0.5, 0.5]}, {"index": True, "embedding": [0.1, 0.2]}],
    ],
    ids=["nan", "infinity", "duplicate-index", "index-gap", "bool-index"],
)
async def test_embeddings_with_a_non_finite_number_or_a_bad_index_are_malformed_response(
    server: FaultServer, data: list[dict[str, Any]]
) -> None:
    server.script("/v1/embeddings", body({"data": data}))
    assert await outcome(server, embed) == "MalformedResponse"


async def test_a_huge_engine_message_is_cut_in_the_error_and_its_attribute(server: FaultServer) -> None:
    message = "bad request " + "x" * 5_000_000
    server.script(COMPLETIONS, Raw(400, json.dumps({"error": {"message": message, "code": 400}}).encode()))
    async with connect(server, Pool()) as llm:
        with pytest.raises(InvalidRequest) as caught:
            await llm.generate("hi")
    assert len(caught.value.engine_message) <= ENGINE_MESSAGE_LIMIT
    assert caught.value.engine_message.startswith("bad request xxx")
    assert "5000012 characters in all" in caught.value.engine_message
    assert len(str(caught.value)) < ENGINE_MESSAGE_LIMIT + 200


async def test_a_huge_error_event_in_a_stream_is_cut(server: FaultServer) -> None:
    server.script(COMPLETIONS, events({"error": {"message": "y" * 60_000, "code": 400}}))
    async with connect(server) as llm:
        with pytest.raises(InvalidRequest) as caught:
            await llm.stream("hi").collect()
    assert len(str(caught.value)) < ENGINE_MESSAGE_LIMIT + 200


# -- the sweep: every call against every kind of garbage ------------------------------------------
GZIP_LIE = {"content-encoding": "gzip"}
DEEP = b"[" * 100_000 + b"]" * 100_000
GARBAGE: dict[str, Raw] = {
    "not-json": Raw(200, b"hello, I am not JSON"),
    "truncated-json": Raw(200, b'{"choices": [{"text": "a"'),
    "empty": Raw(200, b""),
    "null": Raw(200, b"null"),
    "list": Raw(200, b"[1, 2, 3]"),
    "number": Raw(200, b"42"),
    "string": Raw(200, b'"choices"'),
    "deep-nesting": Raw(200, DEEP[:200_000]),
    "nan-literal": Raw(200, b"NaN"),
    "invalid-utf8": Raw(200, b'{"choices": "\xff\xfe\xfd"}'),
    "too-large": Raw(200, b'{"a": "' + b"x" * 300_000 + b'"}'),
    "gzip-lie": Raw(200, b'{"a": 1}', headers=GZIP_LIE),
    "unknown-charset": Raw(200, b'{"a": 1}', content_type="application/json; charset=klingon"),
    "html": Raw(200, b"<html><body>502 Bad Gateway</body></html>", content_type="text/html"),
    "no-content-type": Raw(200, b'{"a": 1}', content_type=None),
    "short-body": Raw(200, b'{"a": 1', headers={"content-length": "500"}, close=True),
    "error-object-in-200": Raw(200, b'{"error": {"message": "oops", "code": "E42"}}'),
    "400-list": Raw(400, b"[1, 2]"),
    "400-huge": Raw(400, b'{"error": "' + b"z" * 200_000 + b'"}'),
    "400-error-number": Raw(400, b'{"error": 5}'),
    "500-deep": Raw(500, DEEP[:200_000]),
    "401-html": Raw(401, b"<h1>no</h1>", content_type="text/html"),
    "429-bad-retry-after": Raw(429, b"{}", headers={"retry-after": "soon"}),
    "503-infinite-retry-after": Raw(503, b"{}", headers={"retry-after": "1e999"}),
    "404-not-a-model": Raw(404, b'{"detail": ["model", 5]}'),
    "302-redirect": Raw(302, b"", headers={"location": "http://127.0.0.1:1/"}),
    "204-no-content": Raw(204, b"", content_type=None),
}
ENDPOINTS: dict[str, tuple[str, Op]] = {
    "generate": (COMPLETIONS, generate),
    "chat": (CHAT, chat),
    "stream": (COMPLETIONS, stream),
    "chat_stream": (CHAT, chat_stream),
    "embed": ("/v1/embeddings", embed),
    "tokenize": ("/tokenize", tokenize),
    "metrics": ("/metrics", metrics),
    "version": ("/version", info),
    "models": ("/v1/models", info),
}
SHAPES: dict[str, list[Any]] = {  # JSON bodies of the right syntax and the wrong shape, per call
    "generate": [
        {"choices": {}},
        {"choices": "abc"},
        {"choices": [None]},
        {"choices": [{"text": None, "finish_reason": []}]},
        {"choices": [{"text": "a", "logprobs": {"tokens": 5}}]},
        {"choices": [{"text": "a", "logprobs": {"tokens": ["a"], "token_logprobs": ["x"]}}]},
        {"choices": [{"text": "a", "logprobs": {"content": [{"token": 1}]}}]},
        {"choices": [{"text": "a"}], "usage": []},
        {"choices": [{"text": "a"}], "usage": {"prompt_tokens": 1e400}},
        {"choices": [{"text": "a"}], "usage": {"prompt_tokens": -1.5}},
        {"choices": [{"text": "a", "index": 1e400}]},
        {"choices": [{"text": "a", "index": {"i": 0}}, {"text": "b", "index": "x"}]},
        {"choices": [{"text": "a"}], "model": ["tiny"], "id": 5},
    ],
    "chat": [
        {"choices": [{"message": "hello"}]},
        {"choices": [{"message": None}]},
        {"choices": [{"message": {"content": {"a": 1}}}]},
        {"choices": [{"message": {"content": "a", "tool_calls": 5}}]},
        {"choices": [{"message": {"content": "a", "tool_calls": [5]}}]},
        {"choices": [{"message": {"content": "a", "tool_calls": [{"function": "f"}]}}]},
        {"choices": [{"message": {"tool_calls": [{"id": 5, "function": {"name": 5, "arguments": 5}}]}}]},
        {"choices": [{"message": {"content": "a"}, "logprobs": {"content": 5}}]},
        {"choices": [{"message": {"content": "a"}, "finish_reason": 5}]},
    ],
    "embed": [
        {"data": 5},
        {"data": [{}]},
        {"data": [{"index": 0}, {"index": 1}]},
        {"data": [{"index": 0, "embedding": "AAAA"}, {"index": 1, "embedding": "AAAA"}]},
        {"data": [{"index": 0, "embedding": [[1.0]]}, {"index": 1, "embedding": [[1.0]]}]},
        {"data": [{"index": 0, "embedding": ["1"]}, {"index": 1, "embedding": [None]}]},
        {"data": [{"index": 0, "embedding": [1.0]}, {"index": 1, "embedding": [1.0, 2.0]}]},
        {"data": [{"index": 0, "embedding": [1.0]}]},
        {"data": [{"index": 0, "embedding": []}, {"index": 1, "embedding": []}]},
        {"data": [{"index": "0", "embedding": [1.0]}, {"index": "1", "embedding": [1.0]}]},
        {"data": [{"index": 0, "embedding": [1.0]}, {"index": 1, "embedding": [1.0]}], "usage": 5},
    ],
    "tokenize": [
        {"tokens": "many"},
        {"tokens": [1.5]},
        {"tokens": [[1]]},
        {"tokens": None},
        {"tokens": [1], "max_model_len": "big"},
        {"count": 3},
    ],
    "version": [{"version": 5}, {"version": None}, {"version": ["0.32"]}, {"version": "not.a.version"}],
    "models": [
        {"data": 5},
        {"data": [5]},
        {"data": [{"id": None}]},
        {"data": [{"id": 5, "max_model_len": "long"}]},
        {"data": []},
        {"object": "list"},
    ],
}
STREAMS: dict[str, Raw] = {  # event streams of the wrong shape (completions and chat alike)
    "not-json-event": events("this is not json"),
    "event-is-a-list": events([1, 2]),
    "event-is-a-string": events('"hello"'),
    "choices-number": events({"choices": 7}),
    "choices-strings": events({"choices": ["a"]}),
    "text-object": events(chunk(text={"a": 1})),
    "text-number": events(chunk(text=5, finish_reason="stop")),
    "index-string": events(chunk(text="a", index="zero")),
    "index-float": events(chunk(text="a", index=0.5)),
    "finish-number": events(chunk(text="a", finish_reason=1)),
    "logprobs-number": events(chunk(text="a", logprobs=5)),
    "logprobs-bad-content": events(chunk(text="a", logprobs={"content": [5]})),
    "delta-list": events(chunk(delta=[1])),
    "delta-content-number": events(chunk(delta={"content": 5}, finish_reason="stop")),
    "delta-tool-calls-string": events(chunk(delta={"tool_calls": "call"})),
    "delta-tool-call-function-list": events(chunk(delta={"tool_calls": [{"index": 0, "function": [1]}]})),
    "delta-tool-call-id-number": events(chunk(delta={"tool_calls": [{"index": 0, "id": 5}]})),
    "usage-list": events({"choices": [], "usage": [1]}),
    "usage-bad-count": events({"choices": [], "usage": {"prompt_tokens": "x"}}),
    "error-string": events({"error": "boom"}),
    "error-bad-code": events({"error": {"message": "boom", "code": "E1"}}),
    "no-finish": events(chunk(text="a"), done=False),
    "nothing": Raw(200, [b": just a comment\n\n"], content_type="text/event-stream"),
    "json-content-type": Raw(200, b'{"choices": [{"text": "a"}]}'),
    "gzip-lie": Raw(200, [b"data: {}\n\n"], content_type="text/event-stream", headers=GZIP_LIE),
    "invalid-utf8": Raw(200, [b"data: \xff\xfe\n\n"], content_type="text/event-stream"),
    "huge-line": Raw(200, [b"data: ", b"x" * 100_000], content_type="text/event-stream"),
    "deep-nesting": Raw(200, [b"data: " + DEEP[:100_000] + b"\n\n"], content_type="text/event-stream"),
    "500-mid-stream": Raw(500, b'{"error": {"message": "gone"}}'),
}
METRICS: dict[str, Raw] = {
    "garbage": Raw(200, b"this is { not prometheus", content_type="text/plain"),
    "bad-value": Raw(200, b"vllm:num_requests_running{} lots\n", content_type="text/plain"),
    "bad-labels": Raw(200, b'vllm:num_requests_running{a="1} 2\n', content_type="text/plain"),
    "binary": Raw(200, bytes(range(256)), content_type="text/plain"),
}

CASES: list[tuple[str, str, Raw, Op]] = [
    *(
        (f"{name}-{kind}", path, raw, op)
        for name, (path, op) in ENDPOINTS.items()
        for kind, raw in GARBAGE.items()
    ),
    *(
        (f"{name}-shape{i}", ENDPOINTS[name][0], body(doc), ENDPOINTS[name][1])
        for name, docs in SHAPES.items()
        for i, doc in enumerate(docs)
    ),
    *(
        (f"{name}-{kind}", ENDPOINTS[name][0], raw, ENDPOINTS[name][1])
        for name in ("stream", "chat_stream")
        for kind, raw in STREAMS.items()
    ),
    *((f"metrics-{kind}", "/metrics", raw, metrics) for kind, raw in METRICS.items()),
]


@pytest.mark.parametrize(
    ("path", "answer", "op"),
    [pytest.param(*c[1:], id=c[0]) for c in CASES],
)
async def test_a_hostile_answer_gives_a_result_or_a_unillm_error(
    server: FaultServer, path: str, answer: Raw, op: Op
) -> None:
    server.script(path, answer)
    await outcome(server, op)  # raises (failing the test) for anything but a result or a UnillmError


def test_the_sweep_covers_every_call_and_kind() -> None:
    covered = {c[3] for c in CASES}
    assert covered == {generate, chat, stream, chat_stream, embed, tokenize, metrics, info}
    assert len(CASES) > 300


async def test_a_wrong_shape_is_reported_as_malformed_not_as_a_crash(server: FaultServer) -> None:
    """The sweep's shape cases that cannot be read at all are MalformedResponse, naming the engine."""
    server.script("/tokenize", body({"tokens": "many"}))
    async with connect(server) as llm:
        with pytest.raises(MalformedResponse, match=r"^vllm: unexpected tokenize"):
            await llm.tokenize("hi")
