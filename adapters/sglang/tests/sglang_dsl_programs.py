"""The SGLang programs both DSL test modules run (on SGLang and on vLLM), written once.

They are the programs SGLang users write: few-shot QA, multi-turn chat, select, JSON by regex
and by schema, fork, run_batch, stream.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

# Both DSL test modules import this one first: without SGLang's frontend they are skipped here.
sgl = pytest.importorskip(
    "sglang",
    reason="SGLang's DSL frontend is not installed: pip install "
    "'unillm-sglang[dsl]' (this adapter's dev extra; ./run setup installs it)",
)
from sglang.lang.interpreter import ProgramState  # type: ignore[import-untyped]  # noqa: E402
from unillm_sglang.dsl import UnillmBackend  # noqa: E402

# sglang ships no type hints: a typed alias keeps the decorated programs checked.
program: Callable[[Callable[..., None]], Any] = sgl.function
NOTEBOOK = Path(__file__).parents[3] / "notebooks" / "sglang_dsl.ipynb"
SCHEMA = {
    "type": "object",
    "properties": {
        "color": {"type": "string", "enum": ["red", "green", "blue"]},
        "count": {"type": "integer", "minimum": 0, "maximum": 99},
    },
    "required": ["color", "count"],
    "additionalProperties": False,
}
JSON_REGEX = r'\{"name": "[a-z]{1,8}", "age": [0-9]{1,2}\}'
OPTIONS = ["yes", "no", "maybe"]


def run_notebook(monkeypatch: pytest.MonkeyPatch, server: Any, engine: str | None, *, timeout: int) -> None:
    """Execute the DSL notebook against ``server`` (``engine`` None: the notebook's default) and
    assert that no code cell failed."""
    import nbformat
    from nbclient import NotebookClient

    if engine is None:
        monkeypatch.delenv("UNILLM_ENGINE", raising=False)
    else:
        monkeypatch.setenv("UNILLM_ENGINE", engine)
    monkeypatch.setenv("UNILLM_BASE_URL", server.base_url)
    monkeypatch.setenv("UNILLM_API_KEY", server.api_key or "")
    nb = nbformat.read(NOTEBOOK, as_version=4)
    NotebookClient(
        nb,
        timeout=timeout,
        kernel_name="python3",
        resources={"metadata": {"path": os.fspath(NOTEBOOK.parent)}},
    ).execute()
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    assert not [o for o in outputs if o.get("output_type") == "error"]


def run(program: Any, backend: UnillmBackend, **kwargs: Any) -> ProgramState:
    """Run a program and fail with SGLang's stored error, if any."""
    state = program.run(backend=backend, **kwargs)
    state.sync()
    assert state.error() is None, repr(state.error())
    return state


def stream_story(backend: UnillmBackend, monkeypatch: pytest.MonkeyPatch) -> ProgramState:
    """Run ``story`` streamed and check the backend streamed it in pieces that make up the variable.

    ``text_iter`` hands over what has arrived since it last looked (a busy reader may get it all at
    once), so a test counts the pieces where the backend yields them.
    """
    delivered: list[str] = []
    streamed = backend.generate_stream

    def counted(*args: Any, **kwargs: Any) -> Iterator[tuple[str, dict[str, Any]]]:
        for piece, meta in streamed(*args, **kwargs):
            delivered.append(piece)
            yield piece, meta

    monkeypatch.setattr(backend, "generate_stream", counted)
    state = story.run(backend=backend, stream=True, temperature=0)
    assert "".join(state.text_iter("story")) == "".join(delivered) == state["story"]
    assert len([p for p in delivered if p]) > 1, delivered
    return state


# -- programs --------------------------------------------------------------------------------
@program
def few_shot_qa(s: Any, question: str) -> None:
    s += "Q: What is 2+2?\nA: 4\n\nQ: What is the capital of France?\nA: Paris\n\n"
    s += "Q: " + question + "\nA:" + sgl.gen("answer", max_tokens=12, stop="\n")


@program
def chat(s: Any) -> None:
    s += sgl.system("You answer briefly.")
    s += sgl.user("Hi there")
    s += sgl.assistant(sgl.gen("first", max_tokens=8))
    s += sgl.user("And then?")
    s += sgl.assistant(sgl.gen("second", max_tokens=8))


@program
def pick_chat(s: Any) -> None:
    s += sgl.user("Is the sky blue?")
    s += sgl.assistant(sgl.select("answer", choices=OPTIONS))


@program
def pick_text(s: Any) -> None:
    s += "Is the sky blue? Answer: " + sgl.gen("answer", choices=OPTIONS)


@program
def json_by_regex(s: Any) -> None:
    s += "A person as JSON: " + sgl.gen("person", regex=JSON_REGEX, max_tokens=40)


@program
def json_by_schema(s: Any) -> None:
    s += sgl.user("Describe the box as JSON.")
    s += sgl.assistant(sgl.gen("box", json_schema=json.dumps(SCHEMA), max_tokens=48))


@program
def typed_int(s: Any) -> None:
    s += "How many legs has a cat? " + sgl.gen("legs", dtype=int, max_tokens=8)


@program
def tips(s: Any) -> None:
    s += "Two tips for staying healthy.\n"
    forks = s.fork(2)
    for i, f in enumerate(forks):
        f += f"Tip {i + 1}:" + sgl.gen("tip", max_tokens=8, stop="\n")
    forks.join()
    s += "Summary:" + sgl.gen("summary", max_tokens=8)


@program
def tips_concatenated(s: Any) -> None:
    s += "Tips:\n"
    forks = s.fork(2)
    for i, f in enumerate(forks):
        f += f" ({i + 1})" + sgl.gen("tip", max_tokens=6)
    forks.join("concate_and_append")


@program
def story(s: Any) -> None:
    s += "Once upon a time" + sgl.gen("story", max_tokens=24)
