"""``unillm probe``: each cell kind judged by effect against look-alike servers."""

from __future__ import annotations

import json

import pytest

import unillm
from unillm.cli.main import main
from unillm.probing import judge
from unillm.probing.asking import Answer, Choice
from unillm.probing.cells import CELLS
from unillm.probing.report import Cell
from unillm.testing.fault_server import CHAT, FaultServer
from unillm.testing.honest_server import HonestServer

pytestmark = pytest.mark.anyio

#: For each cell, the body key a server drops to make that option a silent drop.
DROPS = {
    "temperature=0": "temperature",
    "seed": "seed",
    "max_tokens": "max_tokens",
    "stop": "stop",
    "logprobs/top_logprobs": "top_logprobs",
    "n": "n",
    "presence_penalty": "presence_penalty",
    "frequency_penalty": "frequency_penalty",
    "repetition_penalty": "repetition_penalty",
    "output=JSON schema": "structured_outputs",
    "output=Regex": "structured_outputs",
    "output=Choice": "structured_outputs",
    "output=Grammar": "structured_outputs",
    "lora": "lora",
    "thinking on/off": "chat_template_kwargs",
    "tool_choice=none": "tool_choice",
    "tool_choice=required": "structured_outputs",
    "tool_choice=named": "structured_outputs",
    "stream usage": "stream_options",
}


async def _probe(server: FaultServer, **kwargs: object) -> unillm.ProbeReport:
    async with unillm.connect("vllm", server.url) as llm:
        return await unillm.probe(llm, samples=2, **kwargs)  # type: ignore[arg-type]


async def test_an_honest_engine_honours_every_measurable_option() -> None:
    with HonestServer(loras=("sql",), thinks_by_default=True) as server:
        report = await _probe(server)
    verdicts = {c.option: c.verdict for c in report.cells}
    assert verdicts == {name: "unmeasurable" if name == "cached tokens" else "honoured" for name in CELLS}


@pytest.mark.parametrize("option", sorted(DROPS))
async def test_an_option_the_engine_drops_is_reported_ignored(option: str) -> None:
    with HonestServer(loras=("sql",), thinks_by_default=True, ignore={DROPS[option]}) as server:
        report = await _probe(server, only=[option])
    assert [(c.option, c.verdict) for c in report.cells] == [(option, "ignored")], report.text()


async def test_an_option_unillm_refuses_is_refused_without_a_request() -> None:
    with FaultServer(version="0.5.0") as server:
        report = await _probe(server, only=["output=JSON schema"])
        sent = server.seen(CHAT)
    cell = report.cells[0]
    assert (cell.verdict, cell.requests, sent) == ("refused", 0, [])
    assert "UnsupportedFeature" in cell.evidence


async def test_an_option_the_engine_answers_400_to_is_rejected() -> None:
    with HonestServer() as server:
        server.check = lambda path, body: "n must be 1" if body.get("n") else None
        report = await _probe(server, only=["n"])
    assert report.cells[0].verdict == "rejected"
    assert "n must be 1" in report.cells[0].evidence


async def test_lora_without_adapters_is_not_measurable() -> None:
    with HonestServer() as server:
        report = await _probe(server, only=["lora"])
    assert (report.cells[0].verdict, report.cells[0].evidence) == (
        "unmeasurable",
        "the engine serves no LoRA adapter",
    )


async def test_an_unknown_option_name_is_refused() -> None:
    with HonestServer() as server, pytest.raises(unillm.InvalidOptions, match="unknown probe option"):
        await _probe(server, only=["temprature=0"])


async def test_progress_is_reported_for_each_cell_and_the_end() -> None:
    seen: list[tuple[str, int, int]] = []
    with HonestServer() as server:
        await _probe(server, only=["seed", "stop"], progress=lambda *a: seen.append(a))
    assert seen == [("seed", 0, 2), ("stop", 1, 2), ("", 2, 2)]


def test_the_cli_prints_json_and_exits_1_on_a_silent_drop(capsys: pytest.CaptureFixture[str]) -> None:
    with FaultServer() as server:  # answers the same text whatever is asked
        code = main(["probe", "--engine", "vllm", "--url", server.url, "--only", "n,stop", "--json"])
    report = json.loads(capsys.readouterr().out)
    assert code == 1
    assert [c["verdict"] for c in report["cells"]] == ["ignored", "ignored"]


def test_the_cli_prints_markdown_and_exits_0_when_nothing_is_dropped(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with HonestServer() as server:
        code = main(["probe", "--engine", "vllm", "--url", server.url, "--only", "seed", "--markdown"])
    out = capsys.readouterr().out
    assert code == 0
    assert "| `seed` | honoured |" in out


def _answer(text: str, finish: str | None = "length", tokens: int | None = None) -> Answer:
    return Answer(choices=(Choice(text=text, finish_reason=finish),), completion_tokens=tokens)


def test_max_tokens_short_of_the_limit_after_a_natural_stop_is_not_measurable() -> None:
    assert judge.exact_length(_answer("hi", "stop", 2), 5)[0] == "unmeasurable"


def test_a_cut_constrained_answer_counts_only_when_it_went_wrong_before_the_cut() -> None:
    is_valid, start = judge.matches_regex("alpha|beta"), judge.matches_regex("a(l(p(h(a)?)?)?)?")
    assert judge.valid_share([_answer("alp")], is_valid, start, "choice")[0] == "unmeasurable"
    assert judge.valid_share([_answer("zzz")], is_valid, start, "choice")[0] == "ignored"


class _Scripted:
    """A probe client whose answers are given in advance (and counted)."""

    name = "scripted"

    def __init__(self, *answers: Answer) -> None:
        self.answers, self.asked = list(answers), 0

    async def ask(self, ask: object) -> Answer:
        self.asked += 1
        return self.answers.pop(0)

    async def loras(self) -> list[str]:
        return []


async def test_a_constraint_cell_draws_on_while_the_answers_are_cut_and_still_valid() -> None:
    cut = _answer('{"name":"ab","age":123456')  # valid so far: proves nothing
    client = _Scripted(cut, cut, cut, _answer('{"name":"ab","age":1}', "stop"), _answer("{}", "stop"))
    verdict, evidence = await CELLS["output=JSON schema"](client, 2)
    assert client.asked == 5 and verdict == "ignored" and "1/2" in evidence


async def test_a_constraint_cell_stops_drawing_at_its_limit() -> None:
    client = _Scripted(*[_answer('{"name":"ab","age":1234')] * 9)
    assert (await CELLS["output=JSON schema"](client, 2))[0] == "unmeasurable"
    assert client.asked == 8  # DRAW_LIMIT (4) times the 2 samples


async def test_think_tags_left_in_the_text_are_split_by_unillm() -> None:
    with HonestServer(thinks_by_default=True, ignore={"reasoning_parser"}) as server:
        report = await _probe(server, only=["reasoning split"])
    assert report.cells[0].verdict == "honoured"


def test_think_tags_left_in_the_answer_text_are_judged_ignored() -> None:
    assert judge.reasoning_split(_answer("<think>hm</think>hi"))[0] == "ignored"


def test_the_stop_word_is_the_first_occurrence_from_the_middle() -> None:
    word = judge.stop_word("the cat the dog the end")
    assert word is not None and "the cat the dog the end".find(word) >= 3


def test_an_answer_that_repeats_itself_from_the_middle_is_cut_nearer_its_start() -> None:
    # a tiny random model's greedy answer on one CPU: every 3 characters from a third on occur earlier
    baseline = "odeOhin 37quorat 48 17lr 92" + " model" * 12
    word = judge.stop_word(baseline)
    assert word is not None and baseline.find(word) >= 3 and word.strip()


def test_a_changed_answer_is_shown_from_where_it_differs() -> None:
    verdict, evidence = judge.changed(_answer("same start A"), _answer("same start B"), "seed=1")
    assert verdict == "honoured" and "from char 11: 'A' -> 'B'" in evidence


async def test_a_stream_without_usage_is_refused_from_the_capability_table() -> None:
    # llama-cpp-python's streams carry no usage: its table says so, nothing is sent for the cell
    with HonestServer() as server:
        async with unillm.connect("llamacpp", server.url) as llm:
            report = await unillm.probe(llm, samples=1, only=["stream usage"])
        streamed = [r for r in server.requests if (r.body or {}).get("stream")]
    cell = report.cells[0]
    assert (cell.verdict, cell.requests, streamed) == ("refused", 0, []), report.text()
    assert "stream_options" in cell.evidence


def test_problems_name_each_ignored_cell_and_each_option_not_honoured() -> None:
    cells = [Cell(option="seed", verdict="ignored", evidence="3 texts"), Cell(option="n", verdict="refused")]
    report = unillm.ProbeReport(engine="e", model="m", samples=1, cells=cells)
    assert report.problems(honoured={"n"}) == ["seed: ignored (3 texts)", "n: refused, not honoured"]
    assert report.problems() == ["seed: ignored (3 texts)"]
