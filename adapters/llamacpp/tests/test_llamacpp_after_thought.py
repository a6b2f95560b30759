"""``thinking=True`` with a constraint on llama.cpp: one GBNF grammar, an optional thought
(``<think>…</think>`` and a little white space), then the constrained answer — checked here
against llguidance's GBNF matcher, and as the adapter sends it."""

from __future__ import annotations

import enum
import json
from typing import Any

import pytest
from pydantic import BaseModel, Field
from unillm_llamacpp import LlamaCppAdapter
from unillm_llamacpp.after_thought import (
    MAX_GAP,
    SchemaNotConverted,
    after_thought,
    schema_gbnf,
    thought_rules,
)
from unillm_llamacpp.grammar import GrammarError, check_gbnf, choice_gbnf, regex_gbnf
from unillm_llamacpp.schema import server_schema

import unillm
from unillm.adapter.base import EngineInfo, HttpCall
from unillm.options import make_request
from unillm.testing.tiny_model import TinyModel

llguidance = pytest.importorskip("llguidance")
gbnf_to_lark = pytest.importorskip("llguidance.gbnf_to_lark").gbnf_to_lark

SCHEMA = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
ANSWERS: dict[str, tuple[str, str]] = {  # kind: (answer grammar, an answer it takes)
    "json": (schema_gbnf(SCHEMA), '{"a": 1}'),
    "regex": (regex_gbnf("[0-9]{2}"), "42"),
    "choice": (choice_gbnf(["yes", "no"]), "no"),
    "gbnf": ('root ::= "ok" | "(" root ")"', "((ok))"),
}
THOUGHTS = [
    "",
    "<think>Let me think.</think>",
    "<think>a\nb < c </ d </thin k></think>\n\n",
    "<think></think> ",
]
LOOKAHEAD = {"type": "string", "pattern": "^(?=a)b$"}  # GBNF has no lookahead
CHAT = [{"role": "user", "content": "2+2?"}]
INFO = EngineInfo(engine="llamacpp", model="m", version="0.3.36")


@pytest.fixture(scope="module")
def accepts(tiny: TinyModel) -> Any:
    """``accepts(gbnf, text)``: llguidance's matcher takes all of ``text`` and may stop there."""
    tokenizer = (tiny.path / "tokenizer.json").read_text()
    lltok = llguidance.LLTokenizer(tokenizer)

    def accepts(gbnf: str, text: str) -> bool:
        m = llguidance.LLMatcher(lltok, llguidance.LLMatcher.grammar_from_lark(gbnf_to_lark(gbnf)))
        return bool(m.consume_tokens(lltok.tokenize_str(text))) and m.is_accepting()

    return accepts


# -- the grammar ---------------------------------------------------------------------------
@pytest.mark.parametrize("kind", sorted(ANSWERS))
@pytest.mark.parametrize("thought", THOUGHTS)
def test_an_optional_thought_then_the_answer_is_accepted(accepts: Any, kind: str, thought: str) -> None:
    grammar, answer = ANSWERS[kind]
    assert accepts(grammar, answer)  # the answer alone, before wrapping
    assert accepts(after_thought(grammar), thought + answer)


@pytest.mark.parametrize("kind", sorted(ANSWERS))
@pytest.mark.parametrize(
    "text",
    [
        "<think>x</think>bad",
        "<think>a</think>b</think>{answer}",  # the end marker inside the thought
        "<think>a</think></think>{answer}",
        "<think>unclosed {answer}",
        "x<think>y</think>{answer}",  # text before the thought
        "<think>a</think>{answer}<think>b</think>",
        "<think>a</think>" + " " * (MAX_GAP + 1) + "{answer}",
    ],
)
def test_the_answer_is_still_bound(accepts: Any, kind: str, text: str) -> None:
    grammar, answer = ANSWERS[kind]
    assert not accepts(after_thought(grammar), text.format(answer=answer))


@pytest.mark.parametrize(
    ("markers", "inside", "outside"),
    [
        (("[THINK]", "[/THINK]"), "[/THIN [/ THINK] [[/THINKK", "[/THINK]"),
        (("<a>", "aab"), "aaaa ab aba", "aaab"),  # a marker that overlaps itself
    ],
)
def test_the_thought_ends_at_the_first_end_marker_whatever_the_markers(
    accepts: Any, markers: tuple[str, str], inside: str, outside: str
) -> None:
    grammar = "\n".join(["root ::= think", *thought_rules(markers)])
    check_gbnf(grammar)
    start, end = markers
    assert accepts(grammar, f"{start}{inside}{end}")
    assert not accepts(grammar, f"{start}{outside}{end}")


def test_the_answer_rules_are_renamed_apart_from_the_thought() -> None:
    grammar = after_thought('root ::= think\nthink ::= "root" | [a-z]{2} # think root')
    assert 'answer-root ::= answer-think\nanswer-think ::= "root" | [a-z]{2} # think root' in grammar
    assert grammar.startswith("root ::= think? answer-root\n")


def test_an_answer_grammar_llama_cpp_cannot_parse_is_refused() -> None:
    with pytest.raises(GrammarError):
        after_thought('root ::= "a" undefined')


class Colour(str, enum.Enum):
    RED = "red"
    BLUE = "blue"


class Address(BaseModel):
    city: str
    zip: str = Field(pattern=r"^[0-9]{5}$")


class Person(BaseModel):  # nested objects, an enum, an array, bounds, optional fields
    name: str = Field(max_length=20)
    age: int = Field(ge=0, le=120)
    colour: Colour
    tags: list[str] = Field(max_length=3)
    address: Address
    nick: str | None = None


def test_a_schema_becomes_gbnf_that_takes_its_instances_only(accepts: Any) -> None:
    grammar = schema_gbnf(server_schema(Person.model_json_schema()))
    check_gbnf(grammar)
    address = {"city": "Oslo", "zip": "01234"}
    person = {"name": "Ada", "age": 36, "colour": "red", "tags": ["x", "y"], "address": address}
    assert accepts(grammar, json.dumps(person))
    assert accepts(grammar, json.dumps({**person, "nick": None}))
    for wrong in ({"age": 121}, {"colour": "green"}, {"tags": ["a", "b", "c", "d"]}, {"name": "a" * 21}):
        assert not accepts(grammar, json.dumps({**person, **wrong})), wrong
    assert not accepts(grammar, json.dumps({**person, "address": {"city": "Oslo", "zip": "1234"}}))
    bounded = schema_gbnf(server_schema({"type": "integer", "minimum": 1, "maximum": 3}))
    assert [accepts(bounded, n) for n in "0123"] == [False, True, True, True]


def optional(count: int) -> dict[str, Any]:
    return {"type": "object", "properties": {f"p{i}": {"type": "integer"} for i in range(count)}}


RECURSIVE = {
    "$defs": {"node": {"type": "object", "properties": {"kids": {"type": "array", "items": {"$ref": "#"}}}}},
    "$ref": "#/$defs/node",
}


@pytest.mark.parametrize(
    ("schema", "why"),
    [
        (LOOKAHEAD, "no GBNF equivalent"),
        ({"type": "string", "pattern": "^\\p{L}+$"}, "no GBNF equivalent"),
        ({"$ref": "#/$defs/missing"}, "outlines-core"),
        (RECURSIVE, "recursive"),
        ({"type": "object", "properties": {"kids": {"type": "array", "items": {"$ref": "#"}}}}, "recursive"),
        (optional(40), "optional"),
    ],
)
def test_a_schema_that_cannot_be_converted_says_why(schema: dict[str, Any], why: str) -> None:
    with pytest.raises(SchemaNotConverted, match=why):
        schema_gbnf(schema)


def test_a_schema_that_refers_to_a_definition_twice_is_not_recursive(accepts: Any) -> None:
    point = {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]}
    schema = {
        "$defs": {"point": point},
        "type": "object",
        "properties": {"a": {"$ref": "#/$defs/point"}, "b": {"$ref": "#/$defs/point"}},
        "required": ["a", "b"],
    }
    assert accepts(schema_gbnf(schema), '{"a": {"x": 1}, "b": {"x": 2}}')


def test_fourteen_optional_properties_fit_llama_cpps_parser_fifteen_do_not() -> None:
    """Each optional property repeats the ones before it in the regex; llama.cpp 0.3.36's parser
    took the grammar for 14 and refused the one for 15 ("exceeds sane defaults")."""
    check_gbnf(schema_gbnf(optional(14)))
    with pytest.raises(GrammarError, match="times 1"):
        check_gbnf(schema_gbnf(optional(15)))


@pytest.mark.parametrize(
    "schema",
    [optional(15), {"type": "array", "items": {"type": "string", "maxLength": 50}, "maxItems": 50}],
)
def test_a_schema_whose_grammar_llama_cpp_would_refuse_is_refused_before_sending(
    schema: dict[str, Any],
) -> None:
    with pytest.raises(unillm.UnsupportedFeature, match="thinking=True with output=") as raised:
        build(schema, thinking=True)
    assert "llama.cpp refuses" in raised.value.why


# -- what the adapter sends ----------------------------------------------------------------
def build(output: Any = None, **options: Any) -> HttpCall:
    request = make_request(None, CHAT, output, options, stream=False)
    return LlamaCppAdapter().build(request, INFO)


class Sum(BaseModel):
    answer: int


@pytest.mark.parametrize(
    ("output", "answer"),
    [
        (unillm.Choice(["yes", "no"]), "yes"),
        (unillm.Regex("[0-9]+"), "17"),
        (unillm.Grammar('root ::= "ok"'), "ok"),
        (Sum, '{"answer": 5}'),
    ],
)
def test_thinking_with_output_sends_one_grammar_with_room_for_a_thought(
    accepts: Any, output: Any, answer: str
) -> None:
    sent = build(output, thinking=True).json
    assert sent is not None and "response_format" not in sent and "chat_template_kwargs" not in sent
    assert accepts(sent["grammar"], f"<think>Let me think.</think>{answer}")
    assert accepts(sent["grammar"], answer)
    assert not accepts(sent["grammar"], "<think>Let me think.</think>maybe")


def test_without_thinking_true_the_constraint_goes_as_before() -> None:
    plain = build(Sum).json
    assert plain is not None and "grammar" not in plain
    assert plain["response_format"]["schema"]["required"] == ["answer"]
    choice, thinking = (
        build(unillm.Choice(["yes", "no"])).json,
        build(unillm.Choice(["yes", "no"]), thinking=True).json,
    )
    assert choice is not None and thinking is not None
    assert choice["grammar"] == choice_gbnf(["yes", "no"]) != thinking["grammar"]
    assert {**choice, "grammar": None} == {**thinking, "grammar": None}


def test_thinking_true_alone_sends_nothing_more_and_thinking_false_is_refused() -> None:
    assert build(thinking=True).json == build().json
    with pytest.raises(unillm.UnsupportedFeature, match="thinking"):
        build(thinking=False)


def weather(city: str) -> str:
    """Weather in a city."""
    return city


@pytest.mark.parametrize("choice", ["required", "weather"])
def test_a_forced_call_with_thinking_is_its_arguments_grammar_after_a_thought(
    accepts: Any, choice: str
) -> None:
    sent = build(tools=[weather], tool_choice=choice, thinking=True).json
    assert sent is not None and sent["tool_choice"] == "none" and "response_format" not in sent
    arguments = {"city": "Oslo"}
    call = arguments if choice == "weather" else {"name": "weather", "arguments": arguments}
    assert accepts(sent["grammar"], "<think>Let me think.</think>" + json.dumps(call))
    assert not accepts(sent["grammar"], "<think>Let me think.</think>" + json.dumps({"town": "Oslo"}))


def test_a_schema_the_server_would_not_enforce_is_still_refused_with_thinking() -> None:
    with pytest.raises(unillm.UnsupportedFeature, match="uniqueItems"):
        build({"type": "array", "items": {"type": "integer"}, "uniqueItems": True}, thinking=True)


def test_a_schema_the_converter_fails_on_is_refused_before_sending() -> None:
    with pytest.raises(unillm.UnsupportedFeature, match="thinking=True with output=") as raised:
        build(LOOKAHEAD, thinking=True)
    assert "GBNF equivalent" in raised.value.why and "thinking=True" in raised.value.alternative


def test_the_answer_and_a_forced_call_are_read_after_the_thought() -> None:
    def parse(content: str, output: Any = None, **options: Any) -> Any:
        request = make_request(None, CHAT, output, {"thinking": True, **options}, stream=False)
        body = {"choices": [{"index": 0, "message": {"role": "assistant", "content": content}}]}
        return LlamaCppAdapter().parse(body, request, INFO)

    r = parse('<think>Let me think.</think>\n{"answer": 5}', Sum)
    assert (r.reasoning, r.text) == ("Let me think.", '{"answer": 5}')
    r = parse('<think>Let me think.</think>{"city": "Oslo"}', tools=[weather], tool_choice="weather")
    assert r.reasoning == "Let me think." and [(c.name, json.loads(c.arguments)) for c in r.tool_calls] == [
        ("weather", {"city": "Oslo"})
    ]
