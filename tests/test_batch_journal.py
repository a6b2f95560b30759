"""The batch output as a journal: the resume scan, the torn-line repair, the lock, and the pacer."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from batch_helpers import DiskFullAfter, result

from unillm import InvalidOptions, UnillmError
from unillm.batch import OutputWriteError, Pacer, journal, plan
from unillm.batch.journal import Journal
from unillm.batch.lines import parse_line
from unillm.batch.render import encode, failure_line


def write_input(path: Path, n: int) -> None:
    path.write_text("".join(json.dumps({"custom_id": f"r{i}", "prompt": f"p{i}"}) + "\n" for i in range(n)))


def test_scan_sorts_existing_results_into_succeeded_and_failed(tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    out.write_text(result("a") + result("b", ok=False))
    with Journal(out) as j:
        resume = j.scan({"a", "b", "c"})
    assert (resume.succeeded, resume.failed) == ({"a"}, {"b"})


def test_a_torn_last_line_is_cut_off(tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    out.write_text(result("a") + result("b")[:20])
    with Journal(out) as j:
        resume = j.scan({"a", "b"})
    assert (resume.done, resume.torn_bytes, out.read_text()) == ({"a"}, 20, result("a"))


def test_an_unreadable_last_line_with_its_newline_is_cut_off(tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    out.write_text(result("a") + "\x00\x00\x00\n")
    with Journal(out) as j:
        j.scan({"a"})
    assert out.read_text() == result("a")


def test_a_corrupt_line_before_the_last_is_refused(tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    out.write_text(result("a") + "garbage\n" + result("b"))
    with Journal(out) as j, pytest.raises(InvalidOptions, match="line 2 is not a batch result"):
        j.scan({"a", "b"})


def test_a_result_for_an_id_the_input_lacks_is_refused(tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    out.write_text(result("zzz"))
    with Journal(out) as j, pytest.raises(InvalidOptions, match="another batch's output"):
        j.scan({"a"})


def test_an_id_written_twice_is_refused(tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    out.write_text(result("a") + result("a"))
    with Journal(out) as j, pytest.raises(InvalidOptions, match="twice"):
        j.scan({"a"})


def test_a_second_run_on_the_same_output_is_refused(tmp_path: Path) -> None:
    with Journal(tmp_path / "out.jsonl"), pytest.raises(InvalidOptions, match="another unillm batch"):
        Journal(tmp_path / "out.jsonl")


def test_drop_removes_only_the_named_lines(tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    out.write_text(result("a") + result("b", ok=False) + result("c"))
    with Journal(out) as j:
        j.drop({"b"})
        j.append([result("b").encode()])
    assert out.read_text() == result("a") + result("c") + result("b")


def test_plan_skips_finished_ids_and_failed_ones_unless_retried(tmp_path: Path) -> None:
    write_input(tmp_path / "in.jsonl", 4)
    (tmp_path / "out.jsonl").write_text(result("r0") + result("r1", ok=False))
    with plan(tmp_path / "in.jsonl", tmp_path / "out.jsonl") as p:
        assert [i.custom_id for i in p.pending] == ["r2", "r3"]


def test_plan_with_retry_failed_reruns_the_failed_ones(tmp_path: Path) -> None:
    write_input(tmp_path / "in.jsonl", 4)
    (tmp_path / "out.jsonl").write_text(result("r0") + result("r1", ok=False))
    with plan(tmp_path / "in.jsonl", tmp_path / "out.jsonl", retry_failed=True) as p:
        assert ([i.custom_id for i in p.pending], (tmp_path / "out.jsonl").read_text()) == (
            ["r1", "r2", "r3"],
            result("r0"),
        )


def test_bad_input_is_refused_before_the_output_is_created(tmp_path: Path) -> None:
    (tmp_path / "in.jsonl").write_text("{}\n")
    with pytest.raises(InvalidOptions):
        plan(tmp_path / "in.jsonl", tmp_path / "out.jsonl")
    assert not (tmp_path / "out.jsonl").exists()


def test_pacer_grows_while_the_engine_queue_is_short_and_the_limit_used() -> None:
    pacer = Pacer(64, start=4)
    assert [pacer.tick(0, pacer.limit) for _ in range(3)] == [8, 16, 32]


def test_pacer_does_not_grow_a_limit_it_does_not_use() -> None:
    pacer = Pacer(64, start=4)
    assert pacer.tick(0, in_flight=1) == 4


def test_pacer_shrinks_when_the_engine_queue_is_long() -> None:
    pacer = Pacer(64, start=32)
    assert pacer.tick(waiting=20, in_flight=32) == 24


def test_pacer_never_passes_its_cap() -> None:
    pacer = Pacer(10, start=8)
    assert max(pacer.tick(0, pacer.limit) for _ in range(10)) == 10


def test_pacer_without_a_queue_shrinks_when_latency_doubles() -> None:
    pacer = Pacer(64, start=16)
    pacer.latency(0.1)
    pacer.tick(None, 16)
    for _ in range(4):
        pacer.latency(0.5)
    assert pacer.tick(None, pacer.limit) < 32


@pytest.mark.parametrize("link", ["same", "hard", "symlink"])
def test_an_output_that_is_the_input_is_refused_and_both_stay_as_they_were(tmp_path: Path, link: str) -> None:
    write_input(tmp_path / "in.jsonl", 3)
    before = (tmp_path / "in.jsonl").read_bytes()
    out = tmp_path / ("in.jsonl" if link == "same" else "out.jsonl")
    if link == "hard":
        out.hardlink_to(tmp_path / "in.jsonl")
    elif link == "symlink":
        out.symlink_to(tmp_path / "in.jsonl")
    with pytest.raises(InvalidOptions, match="is the batch input itself"):
        plan(tmp_path / "in.jsonl", out, retry_failed=True)
    assert (tmp_path / "in.jsonl").read_bytes() == before


def test_an_input_line_does_not_count_as_a_result(tmp_path: Path) -> None:
    write_input(tmp_path / "in.jsonl", 2)
    (tmp_path / "copy.jsonl").write_bytes((tmp_path / "in.jsonl").read_bytes())
    with Journal(tmp_path / "copy.jsonl") as j, pytest.raises(InvalidOptions, match="not a batch result"):
        j.scan({"r0", "r1"})


UNRELATED = {
    "other JSONL": '{"a": 1}\n{"b": 2}\n{"c": 3',
    "one unreadable line": '{"name": "settings"}\n',
    "one incomplete line": '{"name": "sett',
    "another batch's results": result("zzz") + result("yyy")[:30],
    "an input with a torn line": json.dumps({"custom_id": "r0", "prompt": "p"}) + '\n{"custom_',
}


@pytest.mark.parametrize("text", UNRELATED.values(), ids=UNRELATED.keys())
def test_an_output_that_is_no_results_file_of_this_batch_keeps_every_byte(tmp_path: Path, text: str) -> None:
    write_input(tmp_path / "in.jsonl", 2)
    (tmp_path / "other.jsonl").write_text(text)
    with pytest.raises(InvalidOptions):
        plan(tmp_path / "in.jsonl", tmp_path / "other.jsonl")
    assert (tmp_path / "other.jsonl").read_text() == text


def test_a_torn_first_result_is_cut_off(tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    line = encode(
        failure_line(parse_line(json.dumps({"custom_id": "a", "prompt": "p"}), 1), UnillmError("x"))
    )
    out.write_bytes(line[:25])
    with Journal(out) as j:
        resume = j.scan({"a"})
    assert (resume.torn_bytes, out.read_bytes()) == (25, b"")


def test_a_failed_append_takes_its_lines_back_and_says_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "out.jsonl"
    monkeypatch.setattr(journal, "os", DiskFullAfter(1))
    with Journal(out) as j:
        j.append([result("a").encode()])
        with pytest.raises(OutputWriteError, match=r"No space left on device.*rerun the same command"):
            j.append([result("b").encode(), result("c").encode()])
    assert out.read_text() == result("a")


def test_a_huge_custom_id_of_another_batch_is_quoted_cut(tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    out.write_text(result("z" * 1_000_000))
    with Journal(out) as j, pytest.raises(InvalidOptions, match="another batch's output") as e:
        j.scan({"a"})
    assert len(str(e.value)) < 1000


def test_retry_failed_on_a_full_disk_leaves_the_output_as_it_was(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_input(tmp_path / "in.jsonl", 3)
    text = result("r0") + result("r1", ok=False) + result("r2")
    (tmp_path / "out.jsonl").write_text(text)
    monkeypatch.setattr(journal, "os", DiskFullAfter(0))
    with pytest.raises(OutputWriteError, match="The output is as it was"):
        plan(tmp_path / "in.jsonl", tmp_path / "out.jsonl", retry_failed=True)
    files = sorted(p.name for p in tmp_path.iterdir())
    assert (files, (tmp_path / "out.jsonl").read_text()) == (["in.jsonl", "out.jsonl"], text)
