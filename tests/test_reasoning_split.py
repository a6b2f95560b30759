"""The client-side thinking splitter: a thought at the start of the text, between a chat
template's markers, is split from the answer, whole or streamed in any chunking."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from unillm.adapter.reasoning import ReasoningSplitter, TrimmedStream, held_suffix, split_reasoning


def streamed(pieces: list[str]) -> tuple[str, str]:
    splitter = ReasoningSplitter()
    thought, answer = [], []
    for piece in pieces:
        t, a = splitter.feed(piece)
        thought.append(t)
        answer.append(a)
    t, a = splitter.finish()
    return "".join(thought) + t, "".join(answer) + a


def chunked(text: str, cuts: list[int]) -> list[str]:
    points = sorted({c % (len(text) + 1) for c in cuts})
    return [text[a:b] for a, b in zip([0, *points], [*points, len(text)], strict=True)]


def test_a_leading_think_block_is_the_reasoning_and_the_rest_the_answer() -> None:
    assert split_reasoning("<think>\n2 and 2 make 4.\n</think>\n\nFour.") == ("2 and 2 make 4.", "Four.")


def test_text_without_a_leading_marker_is_all_answer() -> None:
    assert split_reasoning("I <think> so.") == (None, "I <think> so.")


def test_a_thought_never_closed_is_all_reasoning() -> None:
    assert split_reasoning("<think>still thinking") == ("still thinking", "")


def test_other_template_markers_are_split_too() -> None:
    assert split_reasoning("[THINK]hm[/THINK]Yes.") == ("hm", "Yes.")
    assert split_reasoning("<seed:think>hm</seed:think>Yes.") == ("hm", "Yes.")


def test_held_suffix_counts_what_could_start_a_marker() -> None:
    assert held_suffix("abc</thi", ["</think>"]) == 5
    assert held_suffix("abc", ["</think>"]) == 0


#: (piece fed, or None for the end of the stream; what it releases: (thought, answer)) in order
Steps = list[tuple[str | None, tuple[str, str]]]


@pytest.mark.parametrize(
    "steps",
    [
        pytest.param([("<th", ("", "")), ("ink>ok", ("ok", ""))], id="start-marker-held-back"),
        pytest.param([("<think>a</th", ("a", "")), ("ink>B", ("", "B"))], id="end-marker-held-then-dropped"),
        pytest.param([("<th", ("", "")), ("e end", ("", "<the end"))], id="held-non-marker-released"),
        pytest.param(
            [("<think>a</th", ("a", "")), (None, ("</th", ""))],
            id="partial-end-marker-at-end-stays-reasoning",
        ),
    ],
)
def test_a_marker_split_across_chunks_is_held_back_until_it_is_known(steps: Steps) -> None:
    splitter = ReasoningSplitter()
    for piece, released in steps:
        assert (splitter.finish() if piece is None else splitter.feed(piece)) == released


def test_the_engines_own_split_leaves_the_text_all_answer() -> None:
    splitter = ReasoningSplitter()
    splitter.parsed_by_engine()
    assert splitter.feed("\n\n<think>x") == ("", "<think>x")


@given(
    thought=st.text(alphabet="ab <>/\n", max_size=20).filter(lambda t: "</think>" not in t),
    answer=st.text(alphabet="cd <>/\n", max_size=20),
    cuts=st.lists(st.integers(min_value=0, max_value=60), max_size=6),
)
def test_any_chunking_of_a_stream_splits_as_the_whole_text_does(
    thought: str, answer: str, cuts: list[int]
) -> None:
    text = f"<think>{thought}</think>{answer}"
    assert streamed(chunked(text, cuts)) == split_reasoning(text)


@given(
    text=st.text(alphabet="ab<>/k \n", max_size=30),
    cuts=st.lists(st.integers(min_value=0, max_value=40), max_size=6),
)
def test_a_stream_without_a_thought_delivers_its_text_unchanged(text: str, cuts: list[int]) -> None:
    if split_reasoning(text)[0] is None:
        assert streamed(chunked(text, cuts)) == ("", text)


@given(
    text=st.text(alphabet="ab \n\t", max_size=20),
    cuts=st.lists(st.integers(min_value=0, max_value=30), max_size=6),
)
def test_a_trimmed_stream_gives_the_whole_texts_strip(text: str, cuts: list[int]) -> None:
    trim = TrimmedStream()
    assert "".join(trim.feed(piece) for piece in chunked(text, cuts)) == text.strip()


def test_whitespace_inside_a_streamed_thought_is_kept() -> None:
    splitter = ReasoningSplitter()
    pieces = [splitter.feed(p) for p in ("<think>\n", "a \n", " b", "\n</think>", "\n\n4")]
    assert pieces == [("", ""), ("a", ""), (" \n b", ""), ("", ""), ("", "4")]
