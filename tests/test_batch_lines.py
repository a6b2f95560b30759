"""Batch input lines into unillm requests, and results into OpenAI Batch output lines (no I/O)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from unillm import InvalidOptions, InvalidRequest, JsonSchema, Regex
from unillm.batch.lines import parse_line, parse_lines
from unillm.batch.render import failed, failure_line, success_line
from unillm.results import Completion, CompletionChoice, Timings, Usage


def openai(custom_id: str = "a", url: str = "/v1/chat/completions", **body: Any) -> str:
    body.setdefault("messages", [{"role": "user", "content": "hi"}])
    if url == "/v1/completions":
        body.pop("messages")
        body.setdefault("prompt", "Once")
    return json.dumps({"custom_id": custom_id, "method": "POST", "url": url, "body": body})


def test_openai_chat_line_maps_its_fields_onto_unillm_options() -> None:
    item = parse_line(openai(model="gpt-4o-mini", max_completion_tokens=7, temperature=0.5, seed=3), 1)
    assert (item.endpoint, item.messages, item.options) == (
        "chat",
        [{"role": "user", "content": "hi"}],
        {"max_tokens": 7, "temperature": 0.5, "seed": 3},
    )


def test_completions_logprobs_count_asks_for_that_many_alternatives() -> None:
    item = parse_line(openai(url="/v1/completions", logprobs=2), 1)
    assert item.options == {"logprobs": True, "top_logprobs": 2}


def test_response_format_json_schema_becomes_a_constraint() -> None:
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}}
    fmt = {"type": "json_schema", "json_schema": {"name": "n", "schema": schema}}
    assert parse_line(openai(response_format=fmt), 1).output == JsonSchema(schema, name="n")


def test_vllm_guided_regex_becomes_a_constraint() -> None:
    assert parse_line(openai(guided_regex="[0-9]+"), 1).output == Regex("[0-9]+")


def test_engine_specific_fields_are_sent_as_extra_body() -> None:
    assert parse_line(openai(ignore_eos=True), 1).options == {"extra_body": {"ignore_eos": True}}


def test_simple_line_takes_unillm_options_and_defaults_its_id_to_the_line_number() -> None:
    item = parse_line(json.dumps({"prompt": "Hi", "max_tokens": 4, "output": {"choice": ["a", "b"]}}), 7)
    assert (item.custom_id, item.endpoint, item.prompt, item.options) == (
        "line-7",
        "completions",
        "Hi",
        {"max_tokens": 4},
    )


def test_embeddings_line_keeps_its_texts_and_dimensions() -> None:
    line = json.dumps(
        {"custom_id": "e", "url": "/v1/embeddings", "body": {"input": ["a", "b"], "dimensions": 8}}
    )
    item = parse_line(line, 1)
    assert (item.endpoint, item.texts, item.dimensions) == ("embeddings", ["a", "b"], 8)


def test_duplicate_custom_ids_are_refused_naming_both_lines() -> None:
    with pytest.raises(InvalidOptions, match=r"line 3: custom_id 'a' repeats line 1"):
        parse_lines([openai("a"), openai("b"), openai("a")])


def test_missing_custom_id_in_an_openai_line_is_refused() -> None:
    line = json.dumps({"method": "POST", "url": "/v1/chat/completions", "body": {"messages": []}})
    with pytest.raises(InvalidOptions, match="line 1: custom_id is missing"):
        parse_lines([line])


def test_a_bad_option_is_refused_with_its_line_number() -> None:
    with pytest.raises(InvalidOptions, match="line 2: temperature must be"):
        parse_lines([openai("a"), openai("b", temperature="hot")])


def test_every_bad_line_is_listed_at_once() -> None:
    with pytest.raises(InvalidOptions, match="3 bad line") as e:
        parse_lines(["{not json", openai("a", url="/v1/images"), openai("b", stream=True), openai("c")])
    assert all(f"line {n}:" in str(e.value) for n in (1, 2, 3))


def test_a_prompt_list_is_refused_one_request_per_line() -> None:
    with pytest.raises(InvalidOptions, match="one string"):
        parse_line(openai(url="/v1/completions", prompt=["a", "b"]), 1)


def test_an_input_of_blank_lines_is_refused() -> None:
    with pytest.raises(InvalidOptions, match="no requests"):
        parse_lines(["\n", "  \n"])


def test_requests_sharing_a_prefix_sort_together() -> None:
    items = parse_lines([json.dumps({"prompt": p}) for p in ("sys A q1", "sys B q1", "sys A q2")])
    assert [i.prompt for i in sorted(items, key=lambda i: i.prefix_key())] == [
        "sys A q1",
        "sys A q2",
        "sys B q1",
    ]


def completion(text: str = "ok") -> Completion[Any]:
    choice: CompletionChoice[Any] = CompletionChoice(index=0, text=text, finish_reason="stop")
    return Completion(
        choices=[choice],
        usage=Usage(prompt_tokens=2, completion_tokens=1),
        timings=Timings(total_s=0.1),
        engine="vllm",
        engine_version="0.32.0",
        model="tiny",
    )


def test_a_chat_result_renders_as_an_openai_chat_completion() -> None:
    line = success_line(parse_line(openai("a"), 1), completion("yes"))
    body = line["response"]["body"]
    assert (line["custom_id"], line["error"], body["object"], body["choices"][0]["message"]["content"]) == (
        "a",
        None,
        "chat.completion",
        "yes",
    )


def test_an_engine_refusal_renders_with_its_status_and_typed_error() -> None:
    error = InvalidRequest("vllm refused it", engine="vllm", status=400)
    line = failure_line(parse_line(openai("a"), 1), error)
    assert (line["response"]["status_code"], line["error"]["code"]) == (400, "InvalidRequest")


def test_a_vllm_run_batch_error_line_counts_as_failed() -> None:
    assert failed({"custom_id": "a", "response": {"status_code": 400, "request_id": "r"}, "error": "bad"})


def test_a_success_line_does_not_count_as_failed() -> None:
    assert not failed(success_line(parse_line(openai("a"), 1), completion()))


def test_a_line_nested_100000_deep_is_refused_as_a_bad_line() -> None:
    line = '{"prompt": "x", "extra_body": ' + "[" * 100_000 + "]" * 100_000 + "}"
    with pytest.raises(InvalidOptions, match="line 1: nested too deeply"):
        parse_lines([line])


def test_a_line_nested_deeper_than_the_limit_but_readable_is_refused() -> None:
    line = '{"prompt": "x", "extra_body": {"a": ' + "[" * 500 + "]" * 500 + "}}"
    with pytest.raises(InvalidOptions, match="line 1: nested too deeply"):
        parse_lines([line])


def test_guided_json_that_is_not_json_is_a_bad_line_naming_the_field() -> None:
    with pytest.raises(InvalidOptions, match=r"line 1: body.guided_json is a string but not JSON"):
        parse_lines([openai(guided_json="{not json")])


def test_guided_json_given_as_a_json_string_is_read() -> None:
    assert parse_line(openai(guided_json='{"type": "object"}'), 1).output == JsonSchema({"type": "object"})


BIG = "a" * 1_000_000
BIG_VALUES = {
    "custom_id": {"custom_id": [BIG], "prompt": "p"},
    "method": {"custom_id": "a", "method": BIG, "url": "/v1/completions", "body": {"prompt": "p"}},
    "url": {"custom_id": "a", "url": BIG, "body": {}},
    "prompt": {"custom_id": "a", "url": "/v1/completions", "body": {"prompt": [BIG]}},
    "option": {"prompt": "p", "temperature": BIG},
    "option name": {"prompt": "p", BIG: 1},
    "constraint": {"prompt": "p", "output": BIG},
    "constraint name": {"prompt": "p", "output": {BIG: 1, "b": 2}},
    "response_format": {
        "custom_id": "a",
        "url": "/v1/chat/completions",
        "body": {"messages": [], "response_format": BIG},
    },
    "embeddings field": {"custom_id": "a", "url": "/v1/embeddings", "body": {"input": "x", BIG: 1}},
    "dimensions": {"custom_id": "a", "url": "/v1/embeddings", "body": {"input": "x", "dimensions": BIG}},
    "regex": {"prompt": "p", "output": {"regex": ["(" + BIG]}},
    "stop": {"prompt": "p", "stop": {"a": BIG}},
}


@pytest.mark.parametrize("line", BIG_VALUES.values(), ids=BIG_VALUES.keys())
def test_a_huge_value_in_a_bad_line_is_quoted_cut(line: dict[str, Any]) -> None:
    with pytest.raises(InvalidOptions) as e:
        parse_lines([json.dumps(line)])
    assert len(str(e.value)) < 1000


def test_a_huge_repeated_custom_id_is_quoted_cut() -> None:
    with pytest.raises(InvalidOptions, match="repeats line 1") as e:
        parse_lines([json.dumps({"custom_id": BIG, "prompt": "p"})] * 2)
    assert len(str(e.value)) < 1000
