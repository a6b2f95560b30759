"""Property tests (hypothesis) over every adapter's decoders: any JSON body, any sequence of SSE
events gives a result or a UnillmError, and no message holds the caller's secrets.

Bodies are drawn from JSON built of the field names the decoders read (so they get deep into
each decoder), with values of every JSON type, NaN and infinities included. Example counts and
seeds come from the ``unillm`` hypothesis profile (conftest.py): few, and the same every run.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

import unillm
from unillm.adapter.base import Adapter, EngineInfo, HttpCall
from unillm.adapter.registry import get_adapter
from unillm.embeddings import EmbedRequest, TokenizeRequest
from unillm.errors import UnillmError
from unillm.options import make_request
from unillm.results import Completion, Delta

SECRET = "sk-property-SECRET-98765"
FIELDS = (
    "choices", "index", "text", "message", "delta", "content", "finish_reason", "usage",
    "prompt_tokens", "completion_tokens", "total_tokens", "tool_calls", "function", "name",
    "arguments", "id", "model", "logprobs", "tokens", "token_logprobs", "top_logprobs", "token",
    "logprob", "error", "code", "message", "meta_info", "output_token_logprobs", "type",
    "status_code", "generated_text", "details", "special", "generated_tokens", "input_length",
    "best_of_sequences", "data", "embedding", "max_model_len", "http_status_code", "error_type",
)  # fmt: skip
scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=6)
    | st.sampled_from(["stop", "length", "eos_token", "stop_sequence", "[DONE]", SECRET[:6]])
)
json_values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.sampled_from(FIELDS) | st.text(max_size=3), inner, max_size=5)
    ),
    max_leaves=10,
)
objects = st.dictionaries(st.sampled_from(FIELDS), json_values, max_size=6)
choice = st.fixed_dictionaries(
    {},
    optional={k: json_values for k in ("index", "text", "message", "delta", "finish_reason", "logprobs")},
)
openai_bodies = st.fixed_dictionaries(
    {"choices": st.lists(choice, max_size=3)}, optional={"usage": json_values, "model": json_values}
)
bodies = json_values | objects | openai_bodies
events = st.lists(bodies.map(json.dumps) | st.sampled_from(["[DONE]", "not json", "{}"]), max_size=5)

VERSIONS = {"vllm": "0.32.0", "sglang": "0.5.23", "tgi": "3.3.6", "mlx": None, "llamacpp": "0.3.16"}
# (engine, the route's path): every decoding path of every first-party adapter. Adapters are
# looked up by name when a test runs: the core tests collect without any adapter installed.
ROUTES = [
    ("vllm", "/v1/completions"),
    ("vllm", "/v1/chat/completions"),
    ("sglang", "/generate"),
    ("sglang-incremental", "/generate"),
    ("sglang", "/v1/chat/completions"),
    ("tgi", "/generate"),
    ("tgi", "/generate_stream"),
    ("tgi", "/v1/completions"),
    ("tgi", "/v1/chat/completions"),
    ("mlx", "/v1/chat/completions"),
    ("llamacpp", "/v1/completions"),
]


def engine(name: str) -> tuple[Adapter, EngineInfo]:
    """The adapter and what discovery would learn (SGLang's incremental stream mode included)."""
    if name.startswith("sglang"):
        adapter = get_adapter("sglang")
        server = {"version": VERSIONS["sglang"], "incremental_streaming_output": name.endswith("incremental")}
        answers = {"server_info": server, "model_info": {"served_model_name": "tiny"}}
        return adapter, adapter.parse_info(answers, "tiny")
    return get_adapter(name), EngineInfo(name, "tiny", VERSIONS[name])


TOOLS = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
OPTIONS: dict[str, Any] = {"max_tokens": 4, "logprobs": True, "stop": ["</s>"]}


def request(path: str, *, stream: bool) -> Any:
    """A request for ``path`` carrying the secret (and, for chat, tools: tool-call decoding)."""
    if path.endswith("/chat/completions"):
        messages = [{"role": "user", "content": SECRET}]
        return make_request(None, messages, None, {**OPTIONS, "tools": TOOLS}, stream=stream)
    return make_request(SECRET, None, None, OPTIONS, stream=stream)


def assert_no_secret(error: UnillmError) -> None:
    assert SECRET not in f"{error} {error!r} {getattr(error, 'engine_message', '')}"


@pytest.mark.parametrize(("name", "path"), ROUTES)
@given(body=bodies)
def test_any_body_parses_to_a_completion_or_a_unillm_error(name: str, path: str, body: Any) -> None:
    adapter, info = engine(name)
    try:
        completion = adapter.parse(body, request(path, stream=False), info, call=HttpCall("POST", path))
    except UnillmError as e:
        assert_no_secret(e)
        return
    assert isinstance(completion, Completion)
    assert isinstance(completion.text, str)  # there is always a choice 0


@pytest.mark.parametrize(("name", "path"), ROUTES)
@given(data=events)
def test_any_event_sequence_decodes_to_deltas_or_a_unillm_error(
    name: str, path: str, data: list[str]
) -> None:
    adapter, info = engine(name)
    decoder = adapter.decoder(request(path, stream=True), info, call=HttpCall("POST", path, stream=True))
    try:
        for payload in data:
            deltas = decoder.feed(payload)
            assert all(isinstance(d, Delta) for d in deltas)
    except UnillmError as e:
        assert_no_secret(e)


@pytest.mark.parametrize("name", ["vllm", "sglang"])
@given(body=bodies | st.fixed_dictionaries({"data": st.lists(objects, max_size=3)}))
def test_any_embeddings_body_parses_or_raises_a_unillm_error(name: str, body: Any) -> None:
    adapter, info = engine(name)
    try:
        adapter.parse_embeddings(body, EmbedRequest(("a", "b")), info)
    except UnillmError as e:
        assert_no_secret(e)


@pytest.mark.parametrize("name", ["vllm", "sglang", "tgi", "llamacpp"])
@given(body=bodies)
def test_any_tokenize_body_parses_or_raises_a_unillm_error(name: str, body: Any) -> None:
    adapter, info = engine(name)
    try:
        adapter.parse_tokens(body, TokenizeRequest(text=SECRET), info)
    except UnillmError as e:
        assert_no_secret(e)


@given(status=st.sampled_from([200, 400, 401, 404, 422, 429, 500, 503]), body=bodies, stream=st.booleans())
def test_any_answer_through_the_client_is_a_result_or_a_unillm_error_without_the_key(
    status: int, body: Any, stream: bool
) -> None:
    """The whole path (transport, status mapping, decoding) for a vLLM answer of any JSON."""
    models = {"data": [{"id": "tiny", "max_model_len": 64}]}

    def answer(r: httpx.Request) -> httpx.Response:
        if r.url.path == "/version":
            return httpx.Response(200, json={"version": "0.32.0"})
        if r.url.path == "/v1/models":
            return httpx.Response(200, json=models)
        if stream and status == 200:
            text = f"data: {json.dumps(body)}\n\ndata: [DONE]\n\n"
            return httpx.Response(200, text=text, headers={"content-type": "text/event-stream"})
        return httpx.Response(status, text=json.dumps(body), headers={"content-type": "application/json"})

    async def call() -> None:
        retry = unillm.RetryPolicy(attempts=1)
        transport = httpx.MockTransport(answer)
        async with unillm.LLM(
            "vllm", "http://e", api_key=SECRET, retry=retry, http_transport=transport
        ) as llm:
            if stream:
                await llm.stream("hi", max_tokens=2).collect()
            else:
                (await llm.generate("hi", max_tokens=2)).text  # noqa: B018

    try:
        asyncio.run(call())
    except UnillmError as e:
        assert_no_secret(e)
