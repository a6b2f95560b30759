"""SGLang's frontend language (``@sgl.function``) running on a real vLLM through unillm's DSL backend.

The programs are the ones SGLang users write (few-shot QA, multi-turn chat, select, JSON by regex and
by schema, fork, run_batch, stream). Random weights: assert structure and constraints, never content.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import jsonschema
import pytest
from sglang_dsl_programs import (
    OPTIONS,
    SCHEMA,
    chat,
    few_shot_qa,
    json_by_regex,
    json_by_schema,
    pick_chat,
    pick_text,
    program,
    run,
    run_notebook,
    sgl,
    stream_story,
    tips,
    tips_concatenated,
    typed_int,
)
from unillm_sglang.dsl import UnillmBackend

import unillm

pytestmark = pytest.mark.engine


@pytest.fixture(scope="module")
def backend(vllm_server: Any) -> Iterator[UnillmBackend]:
    with UnillmBackend(vllm_server.connect()) as b:
        yield b


# -- the programs run -------------------------------------------------------------------------
def test_few_shot_qa_runs_on_the_completions_api_and_honours_stop(backend: UnillmBackend) -> None:
    state = run(few_shot_qa, backend, question="What is 1+1?", temperature=0)
    meta = state.get_meta_info("answer")
    assert meta["api"] == "completion" and meta["engine"] == "vllm"
    assert meta["finish_reason"] in ("stop", "length") and 0 < meta["completion_tokens"] <= 12
    assert "\n" not in state["answer"]
    assert state.text().endswith("A:" + state["answer"])


def test_multi_turn_chat_is_rendered_once_by_the_models_own_template(backend: UnillmBackend) -> None:
    state = run(chat, backend, temperature=0)
    messages = state.messages()
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "user", "assistant"]
    assert messages[1]["content"] == "Hi there"  # no SGLang role markers inside the content
    assert messages[4]["content"] == state["second"].lstrip()  # SGLang strips the turn
    second = state.get_meta_info("second")
    assert second["api"] == "chat"
    # The engine rendered exactly these four messages with its own template, nothing more.
    direct = backend.llm.generate(messages=messages[:4], max_tokens=1)
    assert second["prompt_tokens"] == direct.usage.prompt_tokens


@pytest.mark.parametrize("program", [pick_chat, pick_text], ids=["chat", "text"])
def test_select_returns_one_of_the_options_by_constrained_choice(
    backend: UnillmBackend, program: Any
) -> None:
    state = run(program, backend)
    assert state["answer"] in OPTIONS
    meta = state.get_meta_info("answer")
    assert meta["method"] == "constrained_choice" and meta["finish_reason"] == "stop"


def test_select_with_temperature_samples_among_the_options(backend: UnillmBackend) -> None:
    @program
    def sample(s: Any) -> None:
        s += "Pick: " + sgl.select("answer", choices=OPTIONS, temperature=1.0)

    states = sample.run_batch([{}] * 6, backend=backend, num_threads=3)
    assert all(s["answer"] in OPTIONS for s in states)


def test_json_by_regex_matches_the_pattern(backend: UnillmBackend) -> None:
    state = run(json_by_regex, backend)
    person = json.loads(state["person"])
    assert set(person) == {"name", "age"} and 0 <= person["age"] <= 99


def test_json_by_schema_validates_against_the_schema(backend: UnillmBackend) -> None:
    state = run(json_by_schema, backend)
    jsonschema.validate(json.loads(state["box"]), SCHEMA)
    assert state.get_meta_info("box")["api"] == "chat"


def test_dtype_int_yields_an_integer(backend: UnillmBackend) -> None:
    state = run(typed_int, backend)
    int(state["legs"])


def test_fork_runs_branches_and_join_gathers_their_variables(backend: UnillmBackend) -> None:
    state = run(tips, backend, temperature=0)
    assert isinstance(state["tip"], list) and len(state["tip"]) == 2
    assert all("\n" not in t for t in state["tip"])
    assert isinstance(state["summary"], str)


def test_fork_concate_and_append_joins_the_branch_texts(backend: UnillmBackend) -> None:
    state = run(tips_concatenated, backend)
    text = state.text()
    assert text.startswith("Tips:\n") and text.index(" (1)") < text.index(" (2)")


def test_run_batch_runs_every_program(backend: UnillmBackend) -> None:
    questions = [f"What is {i}+{i}?" for i in range(5)]
    states = few_shot_qa.run_batch(
        [{"question": q} for q in questions], backend=backend, num_threads=5, temperature=0
    )
    assert len(states) == 5
    for state, q in zip(states, questions, strict=True):
        assert state.error() is None and f"Q: {q}\n" in state.text()
        assert isinstance(state["answer"], str)


def test_stream_delivers_pieces_that_concatenate_to_the_variable(
    backend: UnillmBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    state = stream_story(backend, monkeypatch)
    meta = state.get_meta_info("story")
    assert meta["finish_reason"] == "length" and meta["completion_tokens"] == 24
    assert state.error() is None


def test_n_greater_than_one_keeps_every_sample_and_appends_the_first(backend: UnillmBackend) -> None:
    @program
    def samples(s: Any) -> None:
        s += "Say:" + sgl.gen("out", max_tokens=4, n=3)

    state = run(samples, backend, temperature=1.0)
    assert isinstance(state["out"], list) and len(state["out"]) == 3
    assert state.text() == "Say:" + state["out"][0]


def test_return_logprob_puts_token_logprobs_in_meta_info(backend: UnillmBackend) -> None:
    @program
    def scored(s: Any) -> None:
        s += "Hello" + sgl.gen("out", max_tokens=5, return_logprob=True, top_logprobs_num=2)

    meta = run(scored, backend, temperature=0).get_meta_info("out")
    assert len(meta["output_token_logprobs"]) == meta["completion_tokens"] == 5
    assert all(lp <= 0 for lp, _, _ in meta["output_token_logprobs"])
    assert all(len(top) == 2 for top in meta["output_top_logprobs"])


def test_api_completion_renders_roles_with_sglangs_template(vllm_server: Any) -> None:
    with UnillmBackend(vllm_server.connect(), api="completion", chat_template="chatml") as b:

        @program
        def prefixed(s: Any) -> None:
            s += sgl.user("Hi")
            s += sgl.assistant("Sure:" + sgl.gen("out", max_tokens=4))

        state = run(prefixed, b, temperature=0)
        assert state.get_meta_info("out")["api"] == "completion"
        assert state.text().startswith("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nSure:")


# -- what is refused, and how errors surface --------------------------------------------------
def test_text_before_gen_inside_the_assistant_turn_is_refused(backend: UnillmBackend) -> None:
    @program
    def prefixed(s: Any) -> None:
        s += sgl.user("Hi")
        s += sgl.assistant("Sure: " + sgl.gen("out", max_tokens=4))

    with pytest.raises(unillm.UnsupportedFeature, match=r"text before sgl\.gen inside sgl\.assistant"):
        prefixed.run(backend=backend, use_thread=False)


def test_text_outside_roles_in_a_chat_program_is_refused(backend: UnillmBackend) -> None:
    @program
    def loose(s: Any) -> None:
        s += "Some context. "
        s += sgl.user("Hi")
        s += sgl.assistant(sgl.gen("out", max_tokens=4))

    with pytest.raises(unillm.UnsupportedFeature, match=r"text outside sgl\.system/user/assistant"):
        loose.run(backend=backend, use_thread=False)


@pytest.mark.filterwarnings("ignore:Error in stream_executor")  # SGLang warns, then stores it
def test_errors_from_sglangs_worker_thread_are_kept_in_state_error(backend: UnillmBackend) -> None:
    @program
    def too_long(s: Any) -> None:
        s += "Hi" + sgl.gen("out", max_tokens=100_000)

    state = too_long.run(backend=backend)
    state.sync()
    assert isinstance(state.error(), unillm.InvalidRequest)


def test_the_notebook_runs_against_vllm(vllm_server: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    run_notebook(monkeypatch, vllm_server, "vllm", timeout=300)
