"""A made-up engine adapter for core tests, so they need no engine adapter package installed.

``FakeAdapter`` speaks the OpenAI-compatible layout (so it also talks to ``unillm.testing.fault_server``),
declares every feature, and launches a command that does not exist. Register it for one test
with :func:`registered` (it patches the entry-point table; nothing is installed)::

    with registered(FakeAdapter):
        llm = unillm.connect("fake", "http://127.0.0.1:9")
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import pytest

import unillm.adapter
from unillm.adapter.base import Adapter, EngineInfo, HttpCall
from unillm.adapter.launch_spec import Flags, LaunchCommand, LaunchSpec
from unillm.adapter.openai_compat import OpenAICompatAdapter
from unillm.adapter.sampling import EXTRA_SAMPLING
from unillm.capabilities import LAYOUT_FEATURES, NATIVE, Capabilities, Feature, Support, unsupported
from unillm.errors import MalformedResponse
from unillm.options import Choice, Constraint, Grammar, JsonSchema, Regex
from unillm.testing.conformance import CORE_LAUNCH_SETTINGS

_NOT_HERE = unsupported("the fake engine runs on one device", "Use a real engine")
_SINGLE_DEVICE = LAYOUT_FEATURES


class FakeAdapter(OpenAICompatAdapter):
    """The fake engine: OpenAI routes, constraints in a ``fake_output`` field, ``top_k``/``min_p``."""

    name = "fake"
    display_name = "Fake"
    extra_sampling_fields = EXTRA_SAMPLING

    def capabilities(self, version: str | None = None) -> Capabilities:
        features: dict[Feature, Support] = {f: NATIVE for f in Feature}
        features.update(dict.fromkeys(_SINGLE_DEVICE, _NOT_HERE))
        features[Feature.GRAMMAR_LARK] = unsupported(
            "the fake engine has no Lark grammars", "Use output=unillm.Grammar(...) in EBNF"
        )
        features[Feature.CHOICE] = Support(level="emulated", why="as a regex alternation")
        return Capabilities(engine=self.name, version=version, features=features)

    def discovery(self) -> Mapping[str, HttpCall]:
        return {"models": HttpCall("GET", "/v1/models"), "version": HttpCall("GET", "/version")}

    def parse_info(self, answers: Mapping[str, Any], model: str | None) -> EngineInfo:
        models = (answers.get("models") or {}).get("data") or []
        if model is None:
            if not models:
                raise MalformedResponse("fake: /v1/models lists no model")
            model = str(models[0]["id"])
        version = (answers.get("version") or {}).get("version")
        return EngineInfo(engine=self.name, model=model, version=version)

    def constraint_fields(self, output: Constraint, info: EngineInfo) -> dict[str, Any]:
        if isinstance(output, Choice):
            return {"fake_output": {"regex": output.as_regex()}}
        if isinstance(output, JsonSchema):
            return {"fake_output": {"json": output.schema}}
        if isinstance(output, Regex):
            return {"fake_output": {"regex": output.pattern}}
        assert isinstance(output, Grammar)
        return {"fake_output": {"grammar": output.text}}

    def command(self, spec: LaunchSpec) -> LaunchCommand:
        argv = [spec.python or "python", "-m", "fake_engine", "--model", spec.model, "--host", spec.host]
        flags = Flags(argv)
        flags.add("--port", spec.port)
        flags.add("--max-model-len", spec.max_model_len)
        # the other settings the caller set, each as a flag of the (made-up) engine
        mapped = {*CORE_LAUNCH_SETTINGS, "model", "host", "port", "python", "max_model_len", "extra_args"}
        for name, value in sorted(
            spec.model_dump(mode="json", exclude=mapped, exclude_defaults=True).items()
        ):
            flags.add(f"--{name.replace('_', '-')}", json.dumps(value))
        key = spec.key()
        argv += spec.extra_args
        env = {"FAKE_API_KEY": key} if key else {}
        return LaunchCommand(
            argv=argv, env=env, health_path=self.health_path(), secrets=(key,) if key else ()
        )


class _EntryPoint:
    def __init__(self, name: str, adapter: type[Adapter]) -> None:
        self.name, self.value, self._adapter = name, f"{__name__}:{adapter.__name__}", adapter

    def load(self) -> type[Adapter]:
        return self._adapter


@contextmanager
def registered(*adapters: type[Adapter]) -> Iterator[None]:
    """Make ``adapters`` findable by name (``get_adapter``, ``connect``, configs) inside the block."""
    table = {**unillm.adapter.registry._entry_points(), **{a.name: _EntryPoint(a.name, a) for a in adapters}}
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(unillm.adapter.registry, "_entry_points", lambda: table)
        unillm.adapter.registry.get_adapter.cache_clear()
        try:
            yield
        finally:
            unillm.adapter.registry.get_adapter.cache_clear()
