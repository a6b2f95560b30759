"""In process, ``thinking=True`` with a constraint: the grammar allows one optional thought
(``<think>…</think>`` and white space) before the constrained answer, whatever the constraint."""

from __future__ import annotations

from typing import Any

import pytest
from unillm_mlx.after_thought import after_thought, thinks
from unillm_mlx.grammar import compile_constraint

import unillm
from unillm.adapter import get_adapter
from unillm.adapter.base import EngineInfo
from unillm.options import make_request
from unillm.testing.tiny_model import TinyModel

llguidance = pytest.importorskip("llguidance")
tokenizers = pytest.importorskip("tokenizers")

SCHEMA = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
CONSTRAINTS: dict[str, tuple[dict[str, Any], str]] = {
    "json": ({"json": SCHEMA}, '{"a":1}'),
    "regex": ({"regex": "[0-9]{2}"}, "42"),
    "choice": ({"choice": ["yes", "no"]}, "no"),
    "lark": ({"lark": 'start: "x" "y"'}, "xy"),
    "gbnf": ({"grammar": 'root ::= "ok"'}, "ok"),
}


@pytest.fixture(scope="module")
def matcher(tiny: TinyModel) -> Any:
    tk = tokenizers.Tokenizer.from_file(str(tiny.path / "tokenizer.json"))
    lltok = llguidance.LLTokenizer(tk.to_str(), n_vocab=tk.get_vocab_size(), eos_token=[2])

    def accepts(grammar: str, text: str) -> bool:
        m = llguidance.LLMatcher(lltok, grammar)
        return bool(m.consume_tokens(tk.encode(text, add_special_tokens=False).ids)) and m.is_accepting()

    return accepts


@pytest.mark.parametrize("kind", sorted(CONSTRAINTS))
@pytest.mark.parametrize("thought", ["", "<think>Let me think.</think>", "<think>a\nb</think>\n\n"])
def test_an_optional_thought_then_the_answer_is_accepted(matcher: Any, kind: str, thought: str) -> None:
    structured, answer = CONSTRAINTS[kind]
    assert matcher(after_thought(compile_constraint(structured)), thought + answer)


@pytest.mark.parametrize("kind", sorted(CONSTRAINTS))
@pytest.mark.parametrize(
    "text",
    [
        "<think>x</think>bad",
        "<think>a</think>b</think>{answer}",
        "<think>unclosed {answer}",
        "x<think>y</think>{answer}",
    ],
)
def test_the_answer_is_still_bound(matcher: Any, kind: str, text: str) -> None:
    structured, answer = CONSTRAINTS[kind]
    assert not matcher(after_thought(compile_constraint(structured)), text.format(answer=answer))


def test_only_a_request_that_turns_thinking_on_gets_room_to_think() -> None:
    on = {"chat_template_kwargs": {"enable_thinking": True}}
    off: list[dict[str, Any]] = [
        {},
        {"chat_template_kwargs": {"enable_thinking": False}},
        {"chat_template_kwargs": "x"},
    ]
    assert [thinks(on), *map(thinks, off)] == [True, False, False, False]


def test_thinking_with_output_is_refused_in_process() -> None:
    # the grammar above is not enabled: a <think> that is one special token gets no room under it
    request = make_request(
        None,
        [{"role": "user", "content": "?"}],
        unillm.Choice(["yes", "no"]),
        {"thinking": True},
        stream=False,
    )
    with pytest.raises(unillm.UnsupportedFeature, match="thinking=True with output="):
        get_adapter("mlx").build(request, EngineInfo(engine="mlx", model="m", version="0.32.2+in-process"))
