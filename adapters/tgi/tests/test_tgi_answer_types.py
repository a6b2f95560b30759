"""A text of the wrong type in a TGI answer (null, a number, an object) is MalformedResponse, never
its Python repr as the answer (issue 29); null content in a chat message is no text."""

from __future__ import annotations

import json
from typing import Any

import pytest
from unillm_tgi.responses import GenerateStreamDecoder, OpenAIRouteDecoder, parse_generate, parse_openai

from unillm.errors import MalformedResponse
from unillm.options import Request, make_request

WRONG = [None, 5, 0, {"a": 1}, ["a"]]


def prompt(*, stream: bool = False) -> Request:
    return make_request("Hi", None, None, {}, stream=stream)


def chat(*, stream: bool = False) -> Request:
    return make_request(None, [{"role": "user", "content": "Hi"}], None, {}, stream=stream)


@pytest.mark.parametrize("text", WRONG, ids=repr)
def test_a_generated_text_of_the_wrong_type_is_malformed(text: Any) -> None:
    with pytest.raises(MalformedResponse, match="generated_text"):
        parse_generate({"generated_text": text, "details": {"finish_reason": "length"}}, prompt(), "m", None)


@pytest.mark.parametrize("text", WRONG, ids=repr)
def test_a_completion_text_of_the_wrong_type_is_malformed(text: Any) -> None:
    with pytest.raises(MalformedResponse, match="choice text"):
        parse_openai({"choices": [{"text": text, "finish_reason": "stop"}]}, prompt(), "m", None)


@pytest.mark.parametrize("content", WRONG[1:], ids=repr)
def test_a_chat_content_of_the_wrong_type_is_malformed(content: Any) -> None:
    body = {"choices": [{"message": {"role": "assistant", "content": content}, "finish_reason": "stop"}]}
    with pytest.raises(MalformedResponse, match="message content"):
        parse_openai(body, chat(), "m", None)


def test_null_chat_content_is_no_text() -> None:
    body = {"choices": [{"message": {"role": "assistant", "content": None}, "finish_reason": "stop"}]}
    assert parse_openai(body, chat(), "m", None).text == ""


@pytest.mark.parametrize("text", WRONG, ids=repr)
def test_a_streamed_token_text_of_the_wrong_type_is_malformed(text: Any) -> None:
    event = {"token": {"id": 1, "text": text, "logprob": -0.1, "special": False}, "generated_text": None}
    with pytest.raises(MalformedResponse):
        GenerateStreamDecoder(prompt(stream=True)).feed(json.dumps(event))


@pytest.mark.parametrize("content", WRONG[1:], ids=repr)
def test_a_streamed_chat_content_of_the_wrong_type_is_malformed(content: Any) -> None:
    chunk = {"choices": [{"index": 0, "delta": {"role": "assistant", "content": content}}]}
    with pytest.raises(MalformedResponse, match="delta content"):
        OpenAIRouteDecoder(chat(stream=True)).feed(json.dumps(chunk))


@pytest.mark.parametrize("text", WRONG, ids=repr)
def test_a_streamed_completion_text_of_the_wrong_type_is_malformed(text: Any) -> None:
    chunk = {"choices": [{"index": 0, "text": text}]}
    with pytest.raises(MalformedResponse, match="choice text"):
        OpenAIRouteDecoder(prompt(stream=True)).feed(json.dumps(chunk))
