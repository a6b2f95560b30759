"""Benchmark workloads: synthetic prompts (random or shared prefix), JSONL datasets and traces' lines."""

from __future__ import annotations

from pathlib import Path

import pytest
from tokenizers import Tokenizer

from unillm.bench.trace import MooncakeTrace
from unillm.bench.workload import JsonlPrompts, Synthetic
from unillm.errors import InvalidOptions
from unillm.testing.tiny_model import TinyModel, build_tiny_model


@pytest.fixture(scope="module")
def tiny_model() -> TinyModel:
    return build_tiny_model()


def test_synthetic_without_tokenizer_gives_word_prompts_of_the_input_length() -> None:
    reqs = Synthetic(num_prompts=5, input_len=12, output_len=7).requests()
    assert len(reqs) == 5
    assert all(len((r.prompt or "").split()) == 12 and r.max_tokens == 7 for r in reqs)
    assert len({r.prompt for r in reqs}) == 5  # random, not one prompt repeated


def test_synthetic_is_seeded() -> None:
    assert Synthetic(seed=3).requests() == Synthetic(seed=3).requests()
    assert Synthetic(seed=3).requests() != Synthetic(seed=4).requests()


def test_range_ratio_spreads_lengths_around_the_means() -> None:
    reqs = Synthetic(num_prompts=200, input_len=100, output_len=50, range_ratio=0.5).requests()
    outs = [r.max_tokens for r in reqs]
    assert min(outs) >= 25 and max(outs) <= 75 and len(set(outs)) > 10


def test_shared_prefix_is_the_same_in_every_prompt() -> None:
    reqs = Synthetic(num_prompts=6, input_len=20, prefix_len=15).requests()
    prefixes = {" ".join((r.prompt or "").split()[:15]) for r in reqs}
    tails = {" ".join((r.prompt or "").split()[15:]) for r in reqs}
    assert len(prefixes) == 1 and len(tails) == 6


def test_tokenizer_makes_prompts_of_exact_token_lengths(tiny_model: TinyModel) -> None:
    tok = Tokenizer.from_file(str(tiny_model.path / "tokenizer.json"))
    reqs = Synthetic(num_prompts=20, input_len=64, tokenizer=str(tiny_model.path)).requests()
    # with the BOS the engine adds, as vLLM's random dataset counts
    lengths = [len(tok.encode(r.prompt or "").ids) for r in reqs]
    assert lengths == [r.input_len for r in reqs]
    assert sum(n == 64 for n in lengths) >= 15  # decode/re-encode can merge a boundary pair


def test_chat_sends_one_user_message() -> None:
    (r,) = Synthetic(num_prompts=1, input_len=3, chat=True).requests()
    assert r.prompt is None and r.messages is not None and r.messages[0]["role"] == "user"


def test_jsonl_reads_prompts_messages_and_per_line_lengths(tmp_path: Path) -> None:
    data = tmp_path / "d.jsonl"
    data.write_text(
        '{"prompt": "Hi"}\n\n{"messages": [{"role": "user", "content": "Yo"}], "max_tokens": 5}\n'
    )
    reqs = JsonlPrompts(path=str(data), output_len=9).requests()
    assert [(r.prompt, r.max_tokens) for r in reqs] == [("Hi", 9), (None, 5)]
    assert reqs[1].messages == ({"role": "user", "content": "Yo"},)
    assert len(JsonlPrompts(path=str(data), num_prompts=5).requests()) == 5  # cycles


def test_empty_dataset_is_a_clear_error(tmp_path: Path) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    with pytest.raises(InvalidOptions, match="has no prompts"):
        JsonlPrompts(path=str(empty)).requests()
    with pytest.raises(InvalidOptions, match="does not exist"):
        JsonlPrompts(path=str(tmp_path / "missing.jsonl")).requests()


@pytest.mark.parametrize(
    ("reader", "line", "match"),
    [
        (JsonlPrompts, "not json", "d.jsonl:1 is not JSON"),
        (JsonlPrompts, '{"text": "x"}', 'd.jsonl:1: needs a non-empty "prompt"'),
        (JsonlPrompts, '{"prompt": "x", "max_tokens": 0}', "max_tokens must be a positive integer"),
        (JsonlPrompts, "[1]", "must be a JSON object"),
        (MooncakeTrace, "not json", "d.jsonl:1 is not JSON"),
        (MooncakeTrace, '{"timestamp": 0, "input_length": 0, "output_length": 1}', "at least 1"),
        (MooncakeTrace, '{"timestamp": -1, "input_length": 2, "output_length": 1}', "non-negative"),
        (
            MooncakeTrace,
            '{"timestamp": 0, "input_length": 2, "output_length": 1, "hash_ids": ["a"]}',
            "hash_ids",
        ),
    ],
)
def test_malformed_lines_name_the_line(
    tmp_path: Path, reader: type[JsonlPrompts | MooncakeTrace], line: str, match: str
) -> None:
    """A dataset's or a trace's bad line is refused naming it."""
    data = tmp_path / "d.jsonl"
    data.write_text(line + "\n")
    with pytest.raises(InvalidOptions, match=match):
        reader(path=str(data)).requests()


def test_missing_tokenizer_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(InvalidOptions, match="no tokenizer"):
        Synthetic(tokenizer=str(tmp_path)).requests()
