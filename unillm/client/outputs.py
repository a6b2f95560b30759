"""Turns constrained answers into ``parsed`` values, and says clearly when one does not fit."""

from __future__ import annotations

import json
import re
from decimal import Decimal
from functools import lru_cache
from typing import Any

from pydantic import ValidationError

from unillm.errors import OutputParseError
from unillm.options import Choice, Constraint, Grammar, JsonSchema, Regex
from unillm.results import Completion, CompletionChoice
from unillm.schema_refs import local_validator


def attach_parsed(completion: Completion[Any], output: Constraint, engine: str) -> None:
    """Fill ``parsed`` on every choice, or raise OutputParseError naming the cause."""
    for choice in completion.choices:
        choice.parsed = _parse(choice, output, engine)


def _parse(choice: CompletionChoice[Any], output: Constraint, engine: str) -> Any:
    text, finish = choice.text, choice.finish_reason
    hint = (
        " The answer was cut at max_tokens: raise max_tokens."
        if finish == "length"
        else f" {engine} did not enforce the constraint (the answer is complete)."
    )
    if isinstance(output, JsonSchema):
        try:
            if output.model is not None:
                return output.model.model_validate_json(text)
            value = json.loads(text)
        except (ValidationError, json.JSONDecodeError) as e:
            raise OutputParseError(
                f"choice {choice.index}: the answer is not valid JSON for the schema "
                f"({_first_line(e)}).{hint}",
                text=text,
                finish_reason=finish,
            ) from None
        _validate(value, output, choice, engine, hint)
        return value
    if isinstance(output, Choice):
        if text not in output.options:
            raise OutputParseError(
                f"choice {choice.index}: {text!r} is not one of {list(output.options)}.{hint}",
                text=text,
                finish_reason=finish,
            )
        return text
    if isinstance(output, Regex):
        try:
            pattern = re.compile(output.pattern)
        except re.error:
            return text  # an engine-dialect pattern Python cannot read: trust the engine
        if pattern.fullmatch(text) is None:
            raise OutputParseError(
                f"choice {choice.index}: {text!r} does not fully match {output.pattern!r}.{hint}",
                text=text,
                finish_reason=finish,
            )
        return text
    assert isinstance(output, Grammar)
    return text


def _validate(value: Any, output: JsonSchema, choice: CompletionChoice[Any], engine: str, hint: str) -> None:
    from jsonschema import validators

    validator = local_validator(output.schema, _decimal_validator(validators.validator_for(output.schema)))
    try:
        error = next(iter(validator.iter_errors(value)), None)
    except (
        Exception
    ):  # a schema Python's validator cannot run (e.g. an engine-dialect regex): trust the engine
        return
    if error is not None:
        raise OutputParseError(
            f"choice {choice.index}: the JSON does not validate: {error.message}.{hint}",
            text=choice.text,
            finish_reason=choice.finish_reason,
        )


@lru_cache(maxsize=8)
def _decimal_validator(base: Any) -> Any:
    """``base`` with ``multipleOf`` judged on the numbers as written in JSON (decimal), not as
    binary floats: 3730.99 is a multiple of 0.01, though ``3730.99 / 0.01`` is not whole."""
    from jsonschema import validators

    plain = base.VALIDATORS["multipleOf"]

    def multiple_of(validator: Any, step: Any, instance: Any, schema: Any) -> Any:
        if (
            validator.is_type(instance, "number")
            and isinstance(step, (int, float))
            and not isinstance(step, bool)
        ):
            try:
                if Decimal(repr(instance)) % Decimal(repr(step)) == 0:
                    return
            except ArithmeticError:  # exponents out of Decimal's range: the plain rule decides
                pass
        yield from plain(validator, step, instance, schema)

    return validators.extend(base, {"multipleOf": multiple_of})


def _first_line(e: Exception) -> str:
    return str(e).splitlines()[0] if str(e) else type(e).__name__
