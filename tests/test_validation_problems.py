"""One formatter for pydantic's errors: every settings model, config table and CLI flag set reads
the same (``field.sub: message; ...``)."""

from __future__ import annotations

import pytest
from pydantic import BaseModel, ValidationError, model_validator

from unillm.errors import validation_problems


class Inner(BaseModel):
    port: int


class Outer(BaseModel):
    inner: Inner
    name: str = "x"

    @model_validator(mode="after")
    def _named(self) -> Outer:
        if self.name == "bad":
            raise ValueError("the name is bad")
        return self


def error_of(data: dict[str, object]) -> ValidationError:
    with pytest.raises(ValidationError) as caught:
        Outer.model_validate(data)
    return caught.value


def test_a_field_error_names_its_dotted_path() -> None:
    assert validation_problems(error_of({"inner": {"port": "many"}})).startswith(
        "inner.port: Input should be"
    )


def test_several_problems_are_joined_by_semicolons() -> None:
    text = validation_problems(error_of({"inner": {"port": "many"}, "name": 3}))
    assert text.count("; ") == 1 and "name: " in text


def test_an_error_about_the_whole_object_is_named_as_asked() -> None:
    assert (
        validation_problems(error_of({"inner": {"port": 1}, "name": "bad"}), "(top)")
        == "(top): the name is bad"
    )


def test_an_unnamed_whole_object_error_is_its_message_without_pydantics_prefix() -> None:
    assert validation_problems(error_of({"inner": {"port": 1}, "name": "bad"})) == "the name is bad"
