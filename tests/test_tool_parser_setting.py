"""``tool_parser`` goes only to engines whose launch takes one: the core detects a parser from the
chat template for those (vLLM, SGLang) and refuses an explicit one elsewhere, before starting."""

from __future__ import annotations

from pathlib import Path

import pytest

import unillm
from unillm.adapter import get_adapter

PY = "/usr/bin/python3"


@pytest.fixture
def hermes_model(tmp_path: Path) -> Path:
    """A model folder whose chat template writes hermes-style ``<tool_call>`` blocks."""
    (tmp_path / "config.json").write_text('{"architectures": ["LlamaForCausalLM"]}')
    (tmp_path / "chat_template.jinja").write_text(
        "{% if tools %}<tool_call>{{ tools }}</tool_call>{% endif %}"
    )
    return tmp_path


@pytest.mark.parametrize("engine", ["mlx", "tgi", "llamacpp"])
def test_an_explicit_tool_parser_is_refused_where_the_engine_takes_none(engine: str) -> None:
    with pytest.raises(unillm.UnsupportedFeature, match="tool_parser") as caught:
        unillm.launch(engine, model="/m/tiny.gguf", tool_parser="hermes", python=PY)
    assert caught.value.engine == engine and "Drop tool_parser=" in caught.value.alternative


@pytest.mark.parametrize("engine", ["mlx", "tgi"])  # (llama.cpp serves GGUF files, not such folders)
def test_no_parser_is_detected_for_an_engine_that_takes_none(engine: str, hermes_model: Path) -> None:
    launch = unillm.launch(engine, model=str(hermes_model), python=PY)
    assert launch.spec.parser() is None


@pytest.mark.parametrize(
    ("engine", "name"), [("vllm", "hermes"), ("sglang", "qwen25")]
)  # SGLang's name for it
def test_a_parser_is_detected_and_passed_where_the_engine_takes_one(
    engine: str, name: str, hermes_model: Path
) -> None:
    assert get_adapter(engine).takes_tool_parser
    argv = unillm.launch(engine, model=str(hermes_model), python=PY).command().argv
    assert argv[argv.index("--tool-call-parser") + 1] == name


@pytest.mark.parametrize("engine", ["mlx", "tgi", "llamacpp"])
def test_tool_parser_none_is_accepted_everywhere(engine: str) -> None:
    model = "/m/tiny.gguf" if engine == "llamacpp" else "/m"
    assert unillm.launch(engine, model=model, tool_parser="none", python=PY).spec.parser() is None
