"""The thinking tiny model's corpus: a thought before the last assistant turn, an answer or a tool
call in the template's hermes layout, and only that turn trained (history goes back thoughtless)."""

from __future__ import annotations

from unillm.testing.tiny_corpus import corpus
from unillm.testing.trained_model import THOUGHT, _rows

ROWS = _rows(corpus(seed=3, size=300), thinking=True)


def test_a_tool_call_follows_the_thought() -> None:
    trained = [text[a:b] for text, spans in ROWS for a, b in spans]
    assert any(t.startswith(f'<think>{THOUGHT}</think><tool_call>\n{{"name": ') for t in trained)


def test_every_trained_turn_starts_with_the_thought() -> None:
    chats = [text[a:b] for text, spans in ROWS if "<|assistant|>" in text for a, b in spans]
    assert chats and all(t.startswith(f"<think>{THOUGHT}</think>") for t in chats)


def test_a_call_in_the_history_is_neither_thought_nor_trained() -> None:
    after_result = [(text, spans) for text, spans in ROWS if "<|tool|>" in text]
    assert after_result and all(len(spans) == 1 for _, spans in after_result)
    assert all(
        text.count("<think>") == 1 and text.index("<|tool|>") < spans[0][0] for text, spans in after_result
    )
