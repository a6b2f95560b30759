"""Constrained answers are validated the way JSON writes numbers, and a complete answer that does
not fit says the engine did not enforce the constraint."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from unillm.client.outputs import attach_parsed
from unillm.errors import InvalidOptions, OutputParseError
from unillm.options import JsonSchema, make_request
from unillm.results import CompletionChoice

CENTS = JsonSchema({"type": "object", "properties": {"amount": {"type": "number", "multipleOf": 0.01}}})


def answer(text: str, finish: str = "stop") -> Any:
    """What attach_parsed reads of a Completion: its choices."""
    return SimpleNamespace(choices=[CompletionChoice(index=0, text=text, finish_reason=finish)])


@pytest.mark.parametrize("amount", ["3730.99", "0.07", "12", "1e2"])
def test_a_decimal_multiple_of_a_decimal_step_validates(amount: str) -> None:
    completion = answer(f'{{"amount": {amount}}}')
    attach_parsed(completion, CENTS, "e")
    assert completion.choices[0].parsed == {
        "amount": float(amount) if "." in amount or "e" in amount else int(amount)
    }


def test_a_number_off_the_step_is_refused_saying_the_engine_did_not_enforce_it() -> None:
    with pytest.raises(OutputParseError, match=r"not a multiple of 0\.01.*e did not enforce the constraint"):
        attach_parsed(answer('{"amount": 3730.995}'), CENTS, "e")


def test_an_answer_cut_at_max_tokens_says_so_instead() -> None:
    with pytest.raises(OutputParseError, match="cut at max_tokens") as caught:
        attach_parsed(answer('{"amount": 3', "length"), CENTS, "e")
    assert caught.value.finish_reason == "length"


def test_a_schema_the_validator_cannot_run_trusts_the_engine_instead_of_raising_a_library_error() -> None:
    odd = JsonSchema({"type": "string", "pattern": "(?<name>x)"})  # an ECMA group Python's re rejects
    completion = answer('"x"')
    attach_parsed(completion, odd, "e")
    assert completion.choices[0].parsed == "x"


@pytest.mark.parametrize("depth", [150, 5000])  # past the validator's depth, past the encoder's
def test_a_schema_nested_too_deeply_is_refused_before_sending_not_a_recursion_error(depth: int) -> None:
    schema: dict[str, Any] = {"type": "object"}
    for _ in range(depth):
        schema = {"type": "object", "properties": {"a": schema}}
    with pytest.raises(InvalidOptions, match="nested too deeply"):
        make_request("x", None, JsonSchema(schema), {"max_tokens": 4}, stream=False)
