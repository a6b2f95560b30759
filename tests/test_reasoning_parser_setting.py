"""``reasoning_parser`` goes to the engines whose launch takes one (vLLM, SGLang), in each
engine's own spelling; it is read off a ``<think>`` chat template when omitted; an unknown name,
or any name on an engine without such a setting, is refused before anything starts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import unillm

PY = "/usr/bin/python3"


@pytest.fixture
def thinking_model(tmp_path: Path) -> Path:
    template = "{% for m in messages %}{{ m.content }}{% endfor %}{% if enable_thinking %}<think>{% endif %}"
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"chat_template": template}))
    return tmp_path


def argv_value(argv: list[str], flag: str) -> str | None:
    return argv[argv.index(flag) + 1] if flag in argv else None


@pytest.mark.parametrize(("engine", "name"), [("vllm", "deepseek_r1"), ("sglang", "deepseek-r1")])
def test_a_parser_is_passed_in_the_engines_own_spelling(engine: str, name: str) -> None:
    argv = unillm.launch(engine, model="/m", reasoning_parser="deepseek_r1", python=PY).command().argv
    assert argv_value(argv, "--reasoning-parser") == name


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_a_think_template_implies_the_qwen3_parser(engine: str, thinking_model: Path) -> None:
    argv = unillm.launch(engine, model=str(thinking_model), python=PY).command().argv
    assert argv_value(argv, "--reasoning-parser") == "qwen3"


def test_no_parser_is_passed_for_a_template_without_thinking_markers(tmp_path: Path) -> None:
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"chat_template": "{{ messages }}"}))
    argv = unillm.launch("vllm", model=str(tmp_path), python=PY).command().argv
    assert "--reasoning-parser" not in argv


def test_an_unknown_parser_name_is_refused_with_the_engines_names() -> None:
    with pytest.raises(unillm.InvalidOptions, match=r"no reasoning parser 'thinky'.*qwen3"):
        unillm.launch("vllm", model="/m", reasoning_parser="thinky", python=PY)


@pytest.mark.parametrize("engine", ["mlx", "tgi", "llamacpp"])
def test_an_explicit_parser_is_refused_where_the_engine_takes_none(engine: str) -> None:
    with pytest.raises(unillm.UnsupportedFeature, match="reasoning_parser"):
        unillm.launch(engine, model="/m/tiny.gguf", reasoning_parser="qwen3", python=PY)


def test_reasoning_parser_none_launches_without_one(thinking_model: Path) -> None:
    argv = unillm.launch("vllm", model=str(thinking_model), reasoning_parser="none", python=PY).command().argv
    assert "--reasoning-parser" not in argv
