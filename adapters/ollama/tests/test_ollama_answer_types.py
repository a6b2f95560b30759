"""A text of the wrong type in an Ollama answer (a number, an object; null where Ollama always sends
a string) is MalformedResponse, never its Python repr as the answer (issue 29)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from unillm_ollama.responses import NDJSONDecoder, parse_answer

from unillm.errors import MalformedResponse
from unillm.options import Request, make_request

WRONG = [5, 0, {"a": 1}, ["a"]]


def prompt(*, stream: bool = False) -> Request:
    return make_request("Hi", None, None, {}, stream=stream)


def chat(*, stream: bool = False) -> Request:
    return make_request(None, [{"role": "user", "content": "Hi"}], None, {}, stream=stream)


@pytest.mark.parametrize("text", [None, *WRONG], ids=repr)
def test_a_generate_response_of_the_wrong_type_is_malformed(text: Any) -> None:
    with pytest.raises(MalformedResponse, match="response"):
        parse_answer({"response": text, "done": True}, prompt(), "m", None, chat=False)


@pytest.mark.parametrize("content", WRONG, ids=repr)
def test_a_chat_content_of_the_wrong_type_is_malformed(content: Any) -> None:
    body = {"message": {"role": "assistant", "content": content}, "done": True}
    with pytest.raises(MalformedResponse, match="message content"):
        parse_answer(body, chat(), "m", None, chat=True)


@pytest.mark.parametrize("content", WRONG, ids=repr)
def test_a_streamed_chat_content_of_the_wrong_type_is_malformed(content: Any) -> None:
    line = {"message": {"role": "assistant", "content": content}, "done": False}
    with pytest.raises(MalformedResponse, match="message content"):
        NDJSONDecoder(chat(stream=True), chat=True).feed(json.dumps(line))


@pytest.mark.parametrize("text", [None, *WRONG], ids=repr)
def test_a_streamed_response_of_the_wrong_type_is_malformed(text: Any) -> None:
    with pytest.raises(MalformedResponse, match="response"):
        NDJSONDecoder(prompt(stream=True), chat=False).feed(json.dumps({"response": text, "done": False}))
