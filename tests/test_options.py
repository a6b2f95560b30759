"""make_request: validation and normalisation of what callers pass (pure, nothing is sent)."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel

from unillm.errors import InvalidOptions
from unillm.options import Choice, Grammar, JsonSchema, Regex, Request, make_request

CHAT = [{"role": "user", "content": "hi"}]


def req(output: Any = None, **options: Any) -> Request:
    return make_request("Hi", None, output, options, stream=False)


# -- prompt / messages ---------------------------------------------------------------------


@pytest.mark.parametrize(("prompt", "messages"), [(None, None), ("Hi", CHAT)])
def test_exactly_one_of_prompt_or_messages(prompt: Any, messages: Any) -> None:
    with pytest.raises(InvalidOptions, match="exactly one"):
        make_request(prompt, messages, None, {}, stream=False)


def test_prompt_request() -> None:
    r = make_request("Hi", None, None, {}, stream=True)
    assert (r.prompt, r.messages, r.stream) == ("Hi", None, True)


def test_empty_prompt_is_allowed() -> None:
    assert make_request("", None, None, {}, stream=False).prompt == ""


@pytest.mark.parametrize("prompt", [123, b"Hi", ["Hi"]])
def test_prompt_must_be_a_string(prompt: Any) -> None:
    with pytest.raises(InvalidOptions, match="prompt"):
        make_request(prompt, None, None, {}, stream=False)


def test_messages_become_a_tuple_of_plain_dicts() -> None:
    r = make_request(None, [{"role": "system", "content": "s"}, *CHAT], None, {}, stream=False)
    assert r.prompt is None
    assert r.messages == ({"role": "system", "content": "s"}, {"role": "user", "content": "hi"})


@pytest.mark.parametrize(
    "messages",
    [
        [],
        "hi",
        b"hi",
        [{"role": "user"}],
        [{"content": "hi"}],
        [{"role": "user", "content": 1}],
        ["hi"],
        [("user", "hi")],
    ],
)
def test_bad_messages_raise(messages: Any) -> None:
    with pytest.raises(InvalidOptions, match="messages"):
        make_request(None, messages, None, {}, stream=False)


# -- option names, types and ranges -----------------------------------------------------------


def test_unknown_option_raises_naming_it() -> None:
    with pytest.raises(InvalidOptions, match="max_token"):
        req(max_token=5)


def test_none_options_are_ignored() -> None:
    r = req(max_tokens=None, temperature=None)
    assert (r.max_tokens, r.temperature) == (None, None)
    assert r.sampling() == {}


def test_sampling_lists_the_options_set() -> None:
    assert req(max_tokens=4, temperature=0.0, seed=0).sampling() == {
        "max_tokens": 4,
        "temperature": 0.0,
        "seed": 0,
    }


GOOD = [
    ("max_tokens", 1),
    ("max_tokens", 4096),
    ("temperature", 0),
    ("temperature", 1.5),
    ("top_p", 0.0),
    ("top_p", 1),
    ("top_k", 40),
    ("top_k", -1),
    ("min_p", 0.1),
    ("seed", 0),
    ("presence_penalty", -2),
    ("presence_penalty", 2.0),
    ("frequency_penalty", 0.5),
    ("repetition_penalty", 1.2),
    ("n", 1),
    ("n", 4),
    ("logprobs", True),
    ("logprobs", False),
    ("top_logprobs", 0),
    ("top_logprobs", 5),
    ("lora", "sql"),
    ("timeout", 2.5),
]


@pytest.mark.parametrize(("name", "value"), GOOD)
def test_valid_option_is_kept(name: str, value: Any) -> None:
    assert getattr(req(**{name: value}), name) == value


BAD_TYPES = [
    ("max_tokens", 1.5),
    ("max_tokens", "16"),
    ("max_tokens", True),
    ("top_k", 4.0),
    ("seed", "1"),
    ("n", 2.0),
    ("top_logprobs", True),
    ("temperature", "hot"),
    ("temperature", True),
    ("top_p", [0.9]),
    ("min_p", "0.1"),
    ("presence_penalty", "0"),
    ("frequency_penalty", False),
    ("repetition_penalty", "1.1"),
    ("logprobs", 1),
    ("logprobs", "yes"),
    ("lora", 5),
    ("timeout", "10"),
]


@pytest.mark.parametrize(("name", "value"), BAD_TYPES)
def test_bad_type_raises_naming_the_option(name: str, value: Any) -> None:
    with pytest.raises(InvalidOptions, match=name):
        req(**{name: value})


OUT_OF_RANGE = [
    ("max_tokens", 0),
    ("max_tokens", -1),
    ("n", 0),
    ("top_logprobs", -1),
    ("temperature", -0.1),
    ("temperature", float("nan")),
    ("top_p", 1.01),
    ("top_p", -0.1),
    ("min_p", 1.5),
    ("presence_penalty", 2.5),
    ("presence_penalty", -2.1),
    ("frequency_penalty", -3),
    ("repetition_penalty", -1),
    ("timeout", -1),
]


@pytest.mark.parametrize(("name", "value"), OUT_OF_RANGE)
def test_out_of_range_raises_naming_the_option(name: str, value: Any) -> None:
    with pytest.raises(InvalidOptions, match=name):
        req(**{name: value})


# -- stop ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("stop", "expected"),
    [
        ("\n", ("\n",)),
        (["a", "b"], ("a", "b")),
        (("x",), ("x",)),
    ],
)
def test_stop_is_normalised_to_a_tuple(stop: Any, expected: tuple[str, ...]) -> None:
    assert req(stop=stop).stop == expected


@pytest.mark.parametrize("stop", ["", ["a", ""], [1], ["a", None], b"ab"])
def test_bad_stop_raises(stop: Any) -> None:
    with pytest.raises(InvalidOptions, match="stop"):
        req(stop=stop)


@pytest.mark.parametrize("stop", [5, 1.5, True])
def test_stop_of_a_non_iterable_type_raises_invalid_options(stop: Any) -> None:
    with pytest.raises(InvalidOptions, match="stop"):
        req(stop=stop)


# -- logprobs --------------------------------------------------------------------------------


def test_top_logprobs_implies_logprobs() -> None:
    r = req(top_logprobs=3)
    assert (r.logprobs, r.top_logprobs) == (True, 3)


def test_top_logprobs_zero_still_implies_logprobs() -> None:
    assert req(top_logprobs=0).logprobs is True


def test_logprobs_alone_has_no_top_logprobs() -> None:
    r = req(logprobs=True)
    assert (r.logprobs, r.top_logprobs) == (True, None)


# -- extra_body ------------------------------------------------------------------------------


def test_extra_body_is_kept() -> None:
    assert req(extra_body={"ignore_eos": True}).extra_body == {"ignore_eos": True}


def test_extra_body_must_be_json_serialisable() -> None:
    with pytest.raises(InvalidOptions, match="extra_body"):
        req(extra_body={"x": object()})


@pytest.mark.parametrize("extra_body", [[1, 2], "ignore_eos", 3])
def test_extra_body_must_be_a_mapping(extra_body: Any) -> None:
    with pytest.raises(InvalidOptions, match="extra_body"):
        req(extra_body=extra_body)


# -- Choice ----------------------------------------------------------------------------------


@pytest.mark.parametrize("options", [[], (), "ab", "", ["a", 1], [None]])
def test_bad_choice_raises(options: Any) -> None:
    with pytest.raises(InvalidOptions, match="Choice"):
        Choice(options)


def test_choice_options_become_a_tuple() -> None:
    assert Choice(["yes", "no"]).options == ("yes", "no")
    assert Choice(["yes", "no"]) == Choice(("yes", "no"))


def test_choice_from_a_generator_keeps_its_options() -> None:
    assert Choice(o for o in ["yes", "no"]).options == ("yes", "no")  # type: ignore[arg-type]


# -- output normalisation --------------------------------------------------------------------

SCHEMA = {"type": "object", "properties": {"n": {"type": "integer"}}}


class Answer(BaseModel):
    city: str
    population: int


def test_no_output_is_none() -> None:
    assert req().output is None


def test_schema_dict_becomes_json_schema() -> None:
    out = req(SCHEMA).output
    assert out == JsonSchema(SCHEMA)
    assert isinstance(out, JsonSchema)
    assert out.model is None
    assert out.name == "output"


def test_pydantic_class_becomes_json_schema_with_its_model() -> None:
    out = req(Answer).output
    assert isinstance(out, JsonSchema)
    assert out.schema == Answer.model_json_schema()
    assert out.model is Answer
    assert out.name == "Answer"


@pytest.mark.parametrize(
    "constraint",
    [
        JsonSchema(SCHEMA),
        Regex(r"\d+"),
        Choice(["a", "b"]),
        Grammar('root ::= "a"'),
        Grammar('start: "a"', syntax="lark"),
    ],
)
def test_constraints_pass_through_unchanged(constraint: Any) -> None:
    assert req(constraint).output is constraint


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "nope"},
        {"type": "object", "properties": {"n": {"type": 5}}},
        {"type": "object", "required": "n"},
        {"minimum": "zero"},
    ],
)
def test_invalid_schema_dict_raises_before_sending(schema: dict[str, Any]) -> None:
    with pytest.raises(InvalidOptions, match="schema"):
        req(schema)


def test_invalid_schema_in_a_json_schema_constraint_raises_before_sending() -> None:
    with pytest.raises(InvalidOptions, match="schema"):
        req(JsonSchema({"type": "nope"}))


@pytest.mark.parametrize("output", ["json", 5, Answer(city="x", population=1), str, [SCHEMA]])
def test_output_of_an_unknown_kind_raises(output: Any) -> None:
    with pytest.raises(InvalidOptions, match="output"):
        req(output)


def test_request_is_frozen() -> None:
    r = req(max_tokens=3)
    with pytest.raises(AttributeError):
        r.max_tokens = 4  # type: ignore[misc]


def test_a_misspelt_option_gets_a_did_you_mean_hint() -> None:
    with pytest.raises(InvalidOptions, match="did you mean 'max_tokens'"):
        make_request("x", None, None, {"max_token": 3}, stream=False)


# -- regressions: values that used to be sent and fail (or be ignored) at the engine ---------


@pytest.mark.parametrize("lora", ["", "  "])
def test_an_empty_lora_name_is_refused_instead_of_sending_the_base_model(lora: str) -> None:
    with pytest.raises(InvalidOptions, match="lora must name an adapter"):
        req(lora=lora)


@pytest.mark.parametrize("name", ["timeout", "deadline"])
@pytest.mark.parametrize("value", [0, 0.0, -0.5])
def test_a_non_positive_timeout_or_deadline_is_refused_up_front(name: str, value: float) -> None:
    with pytest.raises(InvalidOptions, match=f"{name}=.* must be a positive number of seconds"):
        req(**{name: value})


@pytest.mark.parametrize(
    "name",
    [
        "temperature",
        "top_p",
        "min_p",
        "presence_penalty",
        "frequency_penalty",
        "repetition_penalty",
        "timeout",
        "deadline",
    ],
)
@pytest.mark.parametrize("value", [float("inf"), float("-inf"), float("nan")])
def test_a_non_finite_number_is_refused_in_any_option(name: str, value: float) -> None:
    with pytest.raises(InvalidOptions, match=f"{name}=.*not a finite number"):
        req(**{name: value})


@pytest.mark.parametrize(
    "extra", [{"x": float("inf")}, {"a": [1.0, float("nan")]}, {"deep": {"v": float("-inf")}}]
)
def test_a_non_finite_number_in_extra_body_is_refused(extra: dict[str, Any]) -> None:
    with pytest.raises(InvalidOptions, match="extra_body must be standard JSON"):
        req(extra_body=extra)


def test_a_non_finite_number_in_an_output_schema_is_refused() -> None:
    schema = {"type": "object", "properties": {"n": {"type": "number", "maximum": float("inf")}}}
    with pytest.raises(InvalidOptions, match="schema must be standard JSON"):
        req(schema)
    with pytest.raises(InvalidOptions, match="schema must be standard JSON"):
        req(JsonSchema(schema))
