"""In process, ``thinking=True`` with a constraint: the grammar allows one optional thought
(``<think>…</think>`` and white space) before the constrained answer, whatever the constraint;
where the tokenizer has the markers as added tokens (llguidance's special tokens, which no text
can spell), the grammar names them as tokens."""

from __future__ import annotations

from typing import Any

import pytest
from unillm_mlx.after_thought import after_thought, special_markers, thinks
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


def test_thinking_with_output_goes_out_in_process() -> None:
    request = make_request(
        None,
        [{"role": "user", "content": "?"}],
        unillm.Choice(["yes", "no"]),
        {"thinking": True},
        stream=False,
    )
    call = get_adapter("mlx").build(request, EngineInfo(engine="mlx", model="m", version="0.32.2+in-process"))
    assert call.json is not None
    assert (call.json["chat_template_kwargs"], call.json["structured_outputs"]) == (
        {"enable_thinking": True},
        {"choice": ["yes", "no"]},
    )


@pytest.fixture(scope="module")
def marked() -> tuple[Any, Any]:
    """A byte-level BPE with ``<think>`` and ``</think>`` added as whole (not special) tokens, as
    the thinking tiny model's and Qwen3's tokenizers have them; and its llguidance tokenizer."""
    from tokenizers import AddedToken, decoders, models, pre_tokenizers, trainers

    tk = tokenizers.Tokenizer(models.BPE())
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tk.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300,
        special_tokens=["<s>", "</s>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tk.train_from_iterator(['Let me think. yes no 42 {"a": 1} xy ok'] * 10, trainer=trainer)
    tk.add_tokens([AddedToken(t, special=False, normalized=False) for t in ("<think>", "</think>")])
    return tk, llguidance.LLTokenizer(tk.to_str(), n_vocab=tk.get_vocab_size(), eos_token=[1])


def test_markers_added_as_tokens_are_special_to_llguidance(marked: tuple[Any, Any], tiny: TinyModel) -> None:
    tk, lltok = marked
    assert special_markers(lltok) and lltok.is_special_token(tk.token_to_id("<think>"))
    # the text grammar cannot take the <think> token: the model's own thought would be masked
    m = llguidance.LLMatcher(lltok, after_thought(compile_constraint({"choice": ["yes"]})))
    assert not m.consume_token(tk.token_to_id("<think>"))
    # the tiny model's tokenizer has no such tokens: its thought is text
    plain = tokenizers.Tokenizer.from_file(str(tiny.path / "tokenizer.json"))
    assert not special_markers(llguidance.LLTokenizer(plain.to_str(), n_vocab=plain.get_vocab_size()))


@pytest.mark.parametrize("kind", sorted(CONSTRAINTS))
@pytest.mark.parametrize("thought", [None, "Let me think.", "a\nb"])
def test_a_thought_between_marker_tokens_then_the_answer(
    marked: tuple[Any, Any], kind: str, thought: str | None
) -> None:
    tk, lltok = marked
    structured, answer = CONSTRAINTS[kind]
    ids = (
        []
        if thought is None
        else [tk.token_to_id("<think>"), *tk.encode(thought).ids, tk.token_to_id("</think>")]
    )
    m = llguidance.LLMatcher(lltok, after_thought(compile_constraint(structured), special=True))
    assert m.consume_tokens([*ids, *tk.encode("\n" + answer if ids else answer).ids]) and m.is_accepting()


@pytest.mark.parametrize("kind", sorted(CONSTRAINTS))
def test_with_marker_tokens_the_answer_is_still_bound(marked: tuple[Any, Any], kind: str) -> None:
    tk, lltok = marked
    structured, _ = CONSTRAINTS[kind]
    think, end = tk.token_to_id("<think>"), tk.token_to_id("</think>")
    grammar = after_thought(compile_constraint(structured), special=True)
    for ids in ([think, *tk.encode("x").ids, end, *tk.encode("bad").ids], [end], tk.encode("zz").ids):
        m = llguidance.LLMatcher(lltok, grammar)
        assert not (m.consume_tokens(ids) and m.is_accepting())
