"""The helpers adapters share (unillm.adapter.versions, unillm.adapter.openai_compat.structured_output)."""

from __future__ import annotations

import pytest

from unillm.adapter.http_errors import missing_route
from unillm.adapter.openai_compat import structured_output
from unillm.adapter.sampling import sampling_fields
from unillm.adapter.versions import at_least, parse_version, since
from unillm.capabilities import NATIVE, Feature
from unillm.options import Choice, Grammar, JsonSchema, Regex, make_request


@pytest.mark.parametrize(
    ("text", "version"),
    [
        ("0.32.0+cpu", (0, 32, 0)),
        ("0.5.23.post1", (0, 5, 23)),
        ("3.3.6-dev0", (3, 3, 6)),
        ("2.1", (2, 1, 0)),
        ("dev", None),
        ("", None),
        (None, None),
    ],
)
def test_versions_parse_to_three_numbers(text: str | None, version: tuple[int, int, int] | None) -> None:
    assert parse_version(text) == version


def test_an_unknown_version_counts_as_the_newest() -> None:
    assert at_least(None, (9, 9, 9)) and at_least((0, 5, 6), (0, 5, 6))
    assert not at_least((0, 5, 5), (0, 5, 6))


def test_a_version_gate_names_the_engine_and_the_version_needed() -> None:
    assert since((2, 1, 0), (2, 1, 0), "TGI") is NATIVE
    assert since(None, (2, 1, 0), "TGI", why="a note").why == "a note"
    old = since((1, 4, 0), (2, 1, 0), "TGI")
    assert old.level == "no" and "TGI >= 2.1.0" in old.why and "Upgrade TGI" in old.alternative


def test_sampling_fields_copy_only_what_the_request_sets() -> None:
    request = make_request("Hi", None, None, {"top_k": 5, "repetition_penalty": 1.1}, stream=False)
    assert sampling_fields(request) == {"top_k": 5, "repetition_penalty": 1.1}
    assert sampling_fields(request, ("min_p",)) == {}


def test_only_the_frameworks_bare_404_is_a_missing_route() -> None:
    def refusal(status: int, body: bytes) -> object:
        return missing_route("e", status, body, Feature.LORA_RUNTIME, "1.0", why="no route", alternative="x")

    error = refusal(404, b'{"detail":"Not Found"}')
    assert error is not None and getattr(error, "feature", None) == Feature.LORA_RUNTIME.value
    assert refusal(404, b'{"error": {"message": "The model `sql` does not exist."}}') is None
    assert refusal(400, b'{"detail":"Not Found"}') is None


def test_constraints_in_the_structured_outputs_layout() -> None:
    assert structured_output(JsonSchema({"type": "object"})) == ("json", {"type": "object"})
    assert structured_output(Regex("a+")) == ("regex", "a+")
    assert structured_output(Choice(["a", "b"])) == ("choice", ["a", "b"])
    lark = Grammar('start: "a"', syntax="lark")
    assert structured_output(lark) == ("grammar", lark.text)
    assert structured_output(lark, lark_key="lark") == ("lark", lark.text)
