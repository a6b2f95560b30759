"""SGLang DSL programs (``unillm_sglang.dsl``) against the vLLM look-alike: what a user's program sees
when a step fails, and a clean interpreter exit. (Real-engine DSL runs: adapters/sglang/tests.)
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import unillm
from unillm.testing.fault_server import FaultServer

# About the SGLang adapter's DSL backend: it needs that adapter with its `dsl` extra.
sgl = pytest.importorskip(
    "sglang", reason="SGLang's DSL is not installed: pip install 'unillm-sdk[sglang-dsl]'"
)
UnillmBackend = pytest.importorskip(
    "unillm_sglang.dsl",
    reason="the SGLang adapter is not installed: pip install 'unillm-sdk[sglang-dsl]'",
).UnillmBackend

# SGLang's worker thread warns when a step fails, as every program here makes one do
pytestmark = pytest.mark.filterwarnings("ignore:Error in stream_executor")
TESTS = Path(__file__).parent
SCHEMA = '{"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}'


@pytest.fixture
def backend() -> Iterator[Any]:  # an unillm_sglang.dsl.UnillmBackend
    with (
        FaultServer(model="tiny", pieces=('{"ci', 'ty": "Pa')) as server,  # JSON cut short
        UnillmBackend(unillm.connect("vllm", server.url)) as b,
    ):
        yield b


@sgl.function
def city(s: Any) -> None:
    s += "Where? " + sgl.gen("city", max_tokens=4, json_schema=SCHEMA)


def test_variables_set_before_the_failing_step_stay_readable(backend: Any) -> None:
    @sgl.function
    def two(s: Any) -> None:
        s += "A: " + sgl.gen("first", max_tokens=4)
        s += " B: " + sgl.gen("second", max_tokens=4, json_schema=SCHEMA)

    state = two.run(backend=backend)
    state.sync()
    assert state["first"] == '{"city": "Pa'  # set before the failing step: still readable
    with pytest.raises(unillm.OutputParseError):
        state["second"]


# A step failing inside `with s.var_scope("out")`: SGLang keeps the scope's start offset (an int)
# under "out" until the scope ends, which it never does; reading it raises the stored error.
@sgl.function
def scoped(s: Any) -> None:
    with s.var_scope("out"):
        s += "Where? " + sgl.gen("city", max_tokens=4, json_schema=SCHEMA)


@pytest.mark.parametrize(
    ("program", "name"),
    [(city, "city"), (scoped, "out")],
    ids=["variable-of-a-cut-constrained-answer", "scope-of-a-failed-step"],
)
def test_reading_what_a_failed_step_set_raises_the_stored_output_parse_error(
    backend: Any, program: Any, name: str
) -> None:
    state = program.run(backend=backend)
    with pytest.raises(unillm.OutputParseError) as caught:
        state[name]
    assert caught.value.text == '{"city": "Pa'
    assert state.error() is caught.value


def test_a_scope_that_ended_before_the_failing_step_stays_readable(backend: Any) -> None:
    @sgl.function
    def two(s: Any) -> None:
        with s.var_scope("first"):
            s += "A: " + sgl.gen("a", max_tokens=4)
        s += " B: " + sgl.gen("b", max_tokens=4, json_schema=SCHEMA)

    state = two.run(backend=backend)
    state.sync()
    assert state["first"] == 'A: {"city": "Pa'


EXIT_PROGRAM = """
import sglang as sgl, unillm
from unillm.testing.fault_server import FaultServer
from unillm_sglang.dsl import UnillmBackend

server = FaultServer(model="tiny").start()
sgl.set_default_backend(UnillmBackend(unillm.connect("vllm", server.url)))  # never closed

@sgl.function
def hello(s):
    s += "Hi " + sgl.gen("a", max_tokens=4)

print(hello.run()["a"])
server.stop()
"""


def test_a_program_that_used_the_backend_exits_without_errors_on_stderr() -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(EXIT_PROGRAM)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "Hello, world!"
    assert "Exception ignored" not in done.stderr
    assert "portal is not running" not in done.stderr
