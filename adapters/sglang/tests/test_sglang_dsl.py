"""SGLang's frontend language through unillm: the parameter mapping, a light offline install, and
DSL programs on a real SGLang server (the same programs run on vLLM in
tests/integration/test_sglang_dsl_vllm.py). Random weights: assert structure, never content.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from typing import Any

import jsonschema
import pytest
import sglang_dsl_programs as dsl
from sglang.lang.choices import unconditional_likelihood_normalized  # type: ignore[import-untyped]
from sglang.lang.ir import REGEX_INT, SglSamplingParams  # type: ignore[import-untyped]
from unillm_sglang.dsl import UnillmBackend, gen_args

import unillm


# -- gen parameters -> unillm options (pure) ------------------------------------------------
def test_gen_params_map_to_unified_options() -> None:
    params = SglSamplingParams(
        max_new_tokens=9,
        stop="\n",
        temperature=0.3,
        top_p=0.9,
        top_k=5,
        min_p=0.1,
        frequency_penalty=0.5,
        presence_penalty=0.2,
        n=2,
    )
    args = gen_args(params, "vllm")
    assert args.options == {
        "max_tokens": 9,
        "stop": ["\n"],
        "temperature": 0.3,
        "top_p": 0.9,
        "top_k": 5,
        "min_p": 0.1,
        "frequency_penalty": 0.5,
        "presence_penalty": 0.2,
        "n": 2,
    }
    assert args.output is None


def test_sglang_defaults_add_no_engine_specific_options() -> None:
    assert gen_args(SglSamplingParams(), "tgi").options == {
        "max_tokens": 128,
        "temperature": 1.0,
        "top_p": 1.0,
    }


def test_regex_becomes_a_regex_constraint() -> None:
    args = gen_args(SglSamplingParams(regex="[0-9]+"), "vllm")
    assert args.output == unillm.Regex("[0-9]+")


def test_json_schema_string_becomes_a_json_schema_constraint() -> None:
    args = gen_args(SglSamplingParams(json_schema=json.dumps(dsl.SCHEMA)), "vllm")
    assert args.output == unillm.JsonSchema(dsl.SCHEMA)


def test_dtype_int_becomes_sglangs_int_regex_with_its_stops() -> None:
    args = gen_args(SglSamplingParams(dtype=int, stop=["END"]), "vllm")
    assert args.output == unillm.Regex(REGEX_INT)
    assert args.options["stop"] == ["END", " ", "\n"]


def test_return_logprob_asks_for_token_logprobs() -> None:
    args = gen_args(SglSamplingParams(return_logprob=True, top_logprobs_num=3), "vllm")
    assert args.options["logprobs"] is True and args.options["top_logprobs"] == 3


@pytest.mark.parametrize(
    ("params", "feature"),
    [
        (SglSamplingParams(min_new_tokens=4), "min_tokens"),
        (SglSamplingParams(stop_token_ids=[2]), "stop_token_ids"),
        (SglSamplingParams(ignore_eos=True), "ignore_eos"),
        (SglSamplingParams(logprob_start_len=0), "logprob_start_len"),
    ],
)
def test_gen_options_without_a_unified_equivalent_are_refused(
    params: SglSamplingParams, feature: str
) -> None:
    with pytest.raises(unillm.UnsupportedFeature, match=feature) as e:
        gen_args(params, "mlx")
    assert e.value.engine == "mlx"


@pytest.mark.parametrize(
    "params",
    [
        SglSamplingParams(regex="a", json_schema="{}"),
        SglSamplingParams(dtype=int, regex="[0-9]"),
        SglSamplingParams(json_schema="{not json"),
        SglSamplingParams(dtype=list),
    ],
)
def test_conflicting_or_malformed_constraints_are_invalid_options(params: SglSamplingParams) -> None:
    with pytest.raises(unillm.InvalidOptions):
        gen_args(params, "vllm")


def test_backend_rejects_an_unknown_api_mode() -> None:
    with pytest.raises(unillm.InvalidOptions, match="api="):
        UnillmBackend(unillm.connect("vllm", "http://127.0.0.1:9"), api="chat")  # type: ignore[arg-type]


def test_import_and_construction_stay_light_and_offline() -> None:
    """No torch/triton/GPU kernels, no tiktoken, and no socket opened at import or construction."""
    code = textwrap.dedent("""
        import socket, sys
        def refuse(*args, **kwargs):
            raise OSError("network used at import or construction")
        socket.socket.connect = socket.create_connection = socket.getaddrinfo = refuse
        import sglang as sgl  # type: ignore[import-untyped]
        import unillm
        from unillm_sglang.dsl import UnillmBackend
        backend = UnillmBackend(unillm.connect("sglang", "http://127.0.0.1:9"))
        sgl.set_default_backend(backend)
        backend.close()
        heavy = ("torch", "triton", "sgl_kernel", "flashinfer", "tiktoken", "openai", "transformers")
        print(",".join(m for m in heavy if m in sys.modules))
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == ""


def test_a_backend_never_closed_does_not_hang_interpreter_exit() -> None:
    code = (
        "import sglang as sgl, unillm\nfrom unillm_sglang.dsl import UnillmBackend\n"
        "sgl.set_default_backend(UnillmBackend(unillm.connect('sglang', 'http://127.0.0.1:9')))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


@pytest.fixture(scope="module")
def backend(sglang_server: Any) -> Iterator[UnillmBackend]:
    with UnillmBackend(sglang_server.connect()) as b:
        yield b


# -- on a real SGLang server -----------------------------------------------------------------
def test_few_shot_qa_runs_on_sglang(backend: UnillmBackend) -> None:
    state = dsl.run(dsl.few_shot_qa, backend, question="What is 1+1?", temperature=0)
    meta = state.get_meta_info("answer")
    assert meta["api"] == "completion" and meta["engine"] == "sglang"
    assert meta["finish_reason"] in ("stop", "length") and 0 < meta["completion_tokens"] <= 12
    assert "\n" not in state["answer"]


def test_multi_turn_chat_on_sglang_is_rendered_by_the_models_own_template(backend: UnillmBackend) -> None:
    state = dsl.run(dsl.chat, backend, temperature=0)
    messages = state.messages()
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "user", "assistant"]
    assert messages[1]["content"] == "Hi there"
    second = state.get_meta_info("second")
    assert second["api"] == "chat"
    direct = backend.llm.generate(messages=messages[:4], max_tokens=1)
    assert second["prompt_tokens"] == direct.usage.prompt_tokens


@pytest.mark.parametrize("program", [dsl.pick_chat, dsl.pick_text], ids=["chat", "text"])
def test_select_on_sglang_returns_one_of_the_options(backend: UnillmBackend, program: Any) -> None:
    state = dsl.run(program, backend)
    assert state["answer"] in dsl.OPTIONS
    assert state.get_meta_info("answer")["method"] == "constrained_choice"


def test_json_by_regex_on_sglang_matches_the_pattern(backend: UnillmBackend) -> None:
    person = json.loads(dsl.run(dsl.json_by_regex, backend)["person"])
    assert set(person) == {"name", "age"}


def test_json_by_schema_on_sglang_validates(backend: UnillmBackend) -> None:
    jsonschema.validate(json.loads(dsl.run(dsl.json_by_schema, backend)["box"]), dsl.SCHEMA)


def test_fork_on_sglang_gathers_both_branches(backend: UnillmBackend) -> None:
    state = dsl.run(dsl.tips, backend, temperature=0)
    assert isinstance(state["tip"], list) and len(state["tip"]) == 2
    assert isinstance(state["summary"], str)


def test_run_batch_on_sglang_runs_every_program(backend: UnillmBackend) -> None:
    states = dsl.few_shot_qa.run_batch(
        [{"question": f"{i}+{i}?"} for i in range(4)], backend=backend, num_threads=4, temperature=0
    )
    assert [s.error() for s in states] == [None] * 4
    assert all(isinstance(s["answer"], str) for s in states)


def test_stream_on_sglang_delivers_pieces_of_the_variable(
    backend: UnillmBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    state = dsl.stream_story(backend, monkeypatch)
    assert state.get_meta_info("story")["completion_tokens"] == 24


def test_programs_run_on_sglangs_native_generate_api(sglang_server: Any) -> None:
    with UnillmBackend(sglang_server.connect(api="native")) as b:
        assert "\n" not in dsl.run(dsl.few_shot_qa, b, question="1+1?", temperature=0)["answer"]
        assert set(json.loads(dsl.run(dsl.json_by_regex, b)["person"])) == {"name", "age"}
        assert dsl.run(dsl.pick_text, b)["answer"] in dsl.OPTIONS
        state = dsl.story.run(backend=b, stream=True, temperature=0)
        assert "".join(state.text_iter("story")) == state["story"]


def test_unsupported_choice_scoring_is_refused_on_sglang(backend: UnillmBackend) -> None:
    @dsl.program
    def scored(s: Any) -> None:
        s += "Pick: " + dsl.sgl.select(
            "x", choices=dsl.OPTIONS, choices_method=unconditional_likelihood_normalized
        )

    with pytest.raises(unillm.UnsupportedFeature, match="choices_method"):
        scored.run(backend=backend, use_thread=False)


def test_the_notebook_runs_against_sglang(sglang_server: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The notebook as a user runs it: engine="sglang" (its default), the server's URL."""
    dsl.run_notebook(monkeypatch, sglang_server, None, timeout=600)
