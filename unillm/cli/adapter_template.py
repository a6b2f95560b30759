"""The files ``unillm new-adapter NAME`` writes: a working adapter package for an OpenAI-compatible
engine, laid out as every adapter under ``adapters/`` is (docs/adapters.md), with its tests.

The adapter passes the conformance kit as written (it maps the common launch settings and
refuses the rest, saying so), and its launch test starts :mod:`unillm.testing.fake_engine` in
the engine's place; the newcomer then replaces the guesses (server module, flags, features) with
the engine's own, test by test.
"""

from __future__ import annotations

import re
from pathlib import Path
from string import Template

from unillm.errors import InvalidOptions

PYPROJECT = """\
[build-system]
requires = ["hatchling>=1.24"]
build-backend = "hatchling.build"

[project]
name = "$dist"
dynamic = ["version"]  # unillm's: __version__ in ../../unillm/__init__.py
description = "$display adapter for unillm."
requires-python = ">=3.10"
license = "Apache-2.0"
dependencies = ["unillm-sdk>=0.1,<0.2"]  # the core; `unillm` on the index is another project

[project.optional-dependencies]
# What this adapter's tests need; `./run` installs every adapters/*/ package with its `dev` extra.
dev = []

[project.entry-points."unillm.adapters"]
$name = "$package:$cls"

[tool.hatch.version]
path = "../../unillm/__init__.py"

[tool.hatch.build.targets.wheel]
packages = ["$package"]
"""

README = """\
# $display adapter for unillm

`unillm.connect("$name", url)` and `unillm.launch("$name", model=...)` for $display, an
OpenAI-compatible server. Written by `unillm new-adapter $name`; the guide is docs/adapters.md.

| file | holds |
|---|---|
| `$package/adapter.py` | `$cls`: the capability table (`SUPPORTED`), discovery, constraints |
| `$package/launch.py` | the command line: `SERVER_MODULE`, the flags, the settings refused |
| `tests/test_${name}_conformance.py` | the conformance kit, fed canned answers (record the engine's own) |
| `tests/test_${name}_launch.py` | a launch through unillm with a fake engine process in the engine's place |

To do, each with a test: put the engine's server module and flags in `launch.py` (and the port
and served-name flags in the launch test's `fake_engine.prefix`); mark `NATIVE` in `SUPPORTED`
each feature the engine has (the rest stay refused, saying why); replace the canned answers with
ones recorded from the engine (or written from its source, naming file and commit); pass the API
key the way the engine reads it (`API_KEY_ENV` is a guess the kit cannot catch); add `install()`
for `unillm setup $name`.

The tests do not check the flags: confirm each against the engine's own `--help` or docs, and map
a setting only to a flag with the same meaning (refuse one that only looks alike). List below the
engine's request defaults that differ from OpenAI's (unset options are not sent).

    pip install -e 'adapters/$name[dev]'     # or ./run unit, which installs every adapters/*/
    pytest adapters/$name/tests

## $display's quirks and what the adapter does

* (none yet: the engine's own defaults, routes that ignore an option, ...)
"""

INIT = '''\
"""$display adapter for unillm (an OpenAI-compatible server): ``unillm.connect("$name", url)``."""

from .adapter import $cls

__all__ = ["$cls"]
'''

ADAPTER = '''\
"""The $display adapter: capabilities, discovery and constraints (the wire is OpenAI's)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from unillm.adapter import (
    NATIVE,
    Capabilities,
    Constraint,
    EngineInfo,
    Feature,
    HttpCall,
    JsonSchema,
    LaunchCommand,
    LaunchSpec,
    OpenAICompatAdapter,
    unsupported,
)

from . import launch

#: The features $display honours; every other one is refused before sending, with the reason.
SUPPORTED = (Feature.COMPLETION, Feature.CHAT, Feature.STREAM, Feature.STOP, Feature.JSON_SCHEMA)


class $cls(OpenAICompatAdapter):
    """$display: an OpenAI-compatible server; JSON schema constraints."""

    name = "$name"
    display_name = "$display"

    def capabilities(self, version: str | None = None) -> Capabilities:
        """Every feature: NATIVE when in SUPPORTED, else refused with why and what instead."""
        refused = unsupported("the $display adapter does not map it (yet)", "Use an engine that has it")
        features = {f: NATIVE if f in SUPPORTED else refused for f in Feature}
        return Capabilities(engine=self.name, version=version, features=features)

    def discovery(self) -> dict[str, HttpCall]:
        """The call that learns the served model."""
        return {"models": HttpCall("GET", "/v1/models")}

    def parse_info(self, answers: Mapping[str, Any], model: str | None) -> EngineInfo:
        """The served model (the first listed) unless the caller named one."""
        listed = answers.get("models") or {}
        served = [m.get("id") for m in listed.get("data", []) if isinstance(m, dict)]
        return EngineInfo(engine=self.name, model=model or next((s for s in served if s), ""))

    def constraint_fields(self, output: Constraint, info: EngineInfo) -> dict[str, Any]:
        """``output=`` as OpenAI's ``response_format`` (the core refused every other kind).

        Declare REGEX / CHOICE / GRAMMAR in SUPPORTED and map ``Regex.pattern``, ``Choice.options``
        and ``Grammar.text`` (``.syntax``: "ebnf" or "lark") here too, when the engine takes them.
        """
        assert isinstance(output, JsonSchema)
        schema = {"name": "out", "schema": output.schema}
        return {"response_format": {"type": "json_schema", "json_schema": schema}}

    def command(self, spec: LaunchSpec) -> LaunchCommand:
        """The server's command line (see launch.py)."""
        return launch.command(spec, self.health_path())
'''

LAUNCH = '''\
"""$display's launch: the command line for a LaunchSpec (pure: no I/O)."""

from __future__ import annotations

from unillm.adapter import Flags, LaunchCommand, LaunchSpec, Refuse

__all__ = ["API_KEY_ENV", "SERVER_MODULE", "command"]

SERVER_MODULE = "$name.server"  # the engine's server: `python -m $name.server` (put its own here)
# A guess too: pass the key the way the engine reads it (an env var, or a flag such as --api-key),
# kept in secrets=. The kit checks only that the key is passed and masked, not that the engine reads it.
API_KEY_ENV = "${upper}_API_KEY"
_NOT_MAPPED = "the $display adapter does not map this setting (yet)"


def command(spec: LaunchSpec, health_path: str = "/health") -> LaunchCommand:
    """``python -m SERVER_MODULE --model M --host H --port P ...``; refuses what it cannot map."""
    _refuse_unmapped(spec)
    argv = [spec.python or "python", "-m", SERVER_MODULE, "--model", spec.model, "--host", spec.host]
    flags = Flags(argv)
    flags.add("--port", spec.port)  # the launch test's fake engine reads these two: keep its
    flags.add("--served-model-name", spec.served_name)  # port_flag= and name_flag= the same
    flags.add("--dtype", spec.dtype)
    flags.add("--max-model-len", spec.max_model_len)
    argv += spec.extra_args
    key = spec.key()
    env = {API_KEY_ENV: key} if key else {}
    return LaunchCommand(argv=argv, env=env, health_path=health_path, secrets=(key,) if key else ())


def _refuse_unmapped(spec: LaunchSpec) -> None:
    """Every setting the command does not map is refused before anything starts, never dropped."""
    no = Refuse("$name")
    p = spec.parallel
    if p.tensor > 1 or p.pipeline > 1 or p.data > 1 or p.expert:
        raise no("parallel", _NOT_MAPPED, "Drop parallel=")
    if spec.task != "generate":
        raise no(f"task={spec.task!r}", _NOT_MAPPED, 'Drop task= (or task="generate")')
    if spec.lora or spec.runtime_lora:
        raise no("lora", _NOT_MAPPED, "Drop lora= and runtime_lora=")
    unmapped = ("max_num_seqs", "memory_fraction", "quantization", "prefix_caching", "max_lora_rank")
    no.set_settings(spec, {name: _NOT_MAPPED for name in (*unmapped, "max_loras", "speculative", "pd")})
    no.set_settings(spec, {"nodes": _NOT_MAPPED})
    no.admission(spec, "$name")
'''

CONFTEST = '''\
"""Async tests run on asyncio."""

import pytest


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"
'''

CONFORMANCE = '''\
"""The conformance kit on the $display adapter. The canned answers are OpenAI-shaped guesses:
replace them with answers recorded from $display (docs/adapters.md, "Recording wire fixtures")."""

from collections.abc import Mapping
from typing import ClassVar

from $package import $cls

from unillm.adapter import EngineInfo
from unillm.testing.conformance import ERROR_STATUSES, AdapterConformance, openai_error

ANSWER = {
    "object": "text_completion",
    "model": "tiny",
    "choices": [{"index": 0, "text": " world", "finish_reason": "length"}],
    "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
}
STREAM = [
    '{"choices": [{"index": 0, "delta": {"role": "assistant", "content": "Hel"}}]}',
    '{"choices": [{"index": 0, "delta": {"content": "lo"}, "finish_reason": "stop"}]}',
    "[DONE]",
]


class Test${cls}Conformance(AdapterConformance):
    adapter = $cls()
    info = EngineInfo(engine="$name", model="tiny")
    answer_body = ANSWER
    answer_text = " world"
    stream_events = STREAM
    stream_text = "Hello"
    error_bodies: ClassVar[Mapping[int, bytes]] = {s: openai_error(f"failed: {s}", s) for s in ERROR_STATUSES}
'''

LAUNCH_TEST = '''\
"""A launch through unillm's supervisor (start, readiness, a request, teardown) with a fake engine
process in $display's place: unillm.testing.fake_engine serves an OpenAI look-alike on the port
the adapter's command names."""

from pathlib import Path

import pytest
from $package import $cls

import unillm
from unillm.adapter import LaunchSpec
from unillm.testing import fake_engine

pytestmark = pytest.mark.anyio
# The flags of launch.py's command that carry the port and the served model name, where the fake
# engine reads them: change to the engine's flags (e.g. --server-port, --model-name).
PREFIX = fake_engine.prefix(port_flag="--port", name_flag="--served-model-name")


async def test_a_launch_serves_and_stops(tmp_path: Path) -> None:
    spec = LaunchSpec(model="tiny", served_name="tiny", api_key=None, prefix=PREFIX)
    run = unillm.Launch($cls(), spec, progress=None, log_path=tmp_path / "engine.log")
    async with run as llm:
        assert (await llm.generate("Hi", max_tokens=4)).text
    assert run.pid is not None
'''

FILES = {
    "pyproject.toml": PYPROJECT,
    "README.md": README,
    "$package/__init__.py": INIT,
    "$package/adapter.py": ADAPTER,
    "$package/launch.py": LAUNCH,
    "$package/py.typed": "",
    "tests/conftest.py": CONFTEST,
    "tests/test_${name}_conformance.py": CONFORMANCE,
    "tests/test_${name}_launch.py": LAUNCH_TEST,
}


def write_adapter(name: str, folder: Path, display_name: str | None = None) -> list[Path]:
    """Write the adapter package for engine ``name`` into ``folder/name``.

    Args:
        name: The engine's name: lower case letters, digits and underscores (``"lmdeploy"``).
        folder: The adapters folder (``adapters``).
        display_name: The engine's label ("LMDeploy"); None: ``name``.

    Returns:
        The files written.

    Raises:
        InvalidOptions: ``name`` is not a valid engine name, or its folder exists already.
    """
    if not re.fullmatch(r"[a-z][a-z0-9_]*", name):
        raise InvalidOptions(
            f"an engine name is lower case letters, digits and _ (e.g. lmdeploy), got {name!r}"
        )
    target = folder / name
    if target.exists():
        raise InvalidOptions(f"{target} exists already: pick another name or --dir")
    words = {
        "name": name,
        "display": display_name or name,
        "dist": "unillm-" + name.replace("_", "-"),
        "package": f"unillm_{name}",
        "cls": "".join(part.capitalize() for part in name.split("_")) + "Adapter",
        "upper": name.upper(),
    }
    written = []
    for path, text in FILES.items():
        out = target / Template(path).substitute(words)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(Template(text).substitute(words))
        written.append(out)
    return written
