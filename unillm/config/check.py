"""Check a config against its engine before running anything: every refusal, listed at once.

    report = unillm.check_config("unillm.toml")              # or: unillm check unillm.toml
    report = unillm.check_config("unillm.toml", engine="mlx")  # would the swap work?
    for p in report.problems:
        print(p.setting, p.message)

Checked without connecting or starting anything, against the adapter's declared capabilities at
the configured ``engine_version`` (default: the newest the adapter knows; for a ``[launch]`` the
version its mode reports, e.g. MLX in-process): every ``[defaults]`` option, every feature in
``uses`` (``uses = ["json_schema", "stream", "lora_runtime"]``; names are the members of
:class:`~unillm.capabilities.Feature`), and every ``[launch]`` setting (validated, mapped to
capabilities, and rendered into the engine's command). Refusals that depend on what a running
server reports (e.g. SGLang's deterministic mode for ``seed``) only show once connected.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from unillm.adapter.base import Adapter, EngineInfo
from unillm.adapter.launch_spec import LaunchSpec
from unillm.adapter.registry import get_adapter
from unillm.capabilities import Capabilities, Feature, feature_by_name, features_of
from unillm.errors import ConfigError, InvalidOptions, UnillmError, validation_problems
from unillm.options import Choice, Grammar, JsonSchema, Regex, Request, make_request

if TYPE_CHECKING:
    from unillm.config.load import Config

__all__ = ["ConfigCheck", "ConfigProblem", "check_config"]

_SAMPLE_OUTPUT = {
    Feature.JSON_SCHEMA: JsonSchema({"type": "object", "properties": {"a": {"type": "integer"}}}),
    Feature.REGEX: Regex("[a-z]+"),
    Feature.CHOICE: Choice(["yes", "no"]),
    Feature.GRAMMAR: Grammar('root ::= "yes" | "no"'),
    Feature.GRAMMAR_LARK: Grammar('start: "yes" | "no"', syntax="lark"),
}
_SAMPLE_OPTION: dict[Feature, dict[str, Any]] = {
    Feature.N: {"n": 2},
    Feature.LOGPROBS: {"logprobs": True},
    Feature.LORA: {"lora": "adapter"},
    Feature.TOP_K: {"top_k": 5},
    Feature.MIN_P: {"min_p": 0.1},
    Feature.SEED: {"seed": 1},
    Feature.STOP: {"stop": ["\n"]},
    Feature.REPETITION_PENALTY: {"repetition_penalty": 1.1},
    Feature.PRESENCE_PENALTY: {"presence_penalty": 0.5},
    Feature.FREQUENCY_PENALTY: {"frequency_penalty": 0.5},
    Feature.PRIORITY: {"priority": 1},
}
_SPECULATIVE = {
    "ngram": Feature.SPEC_NGRAM,
    "draft": Feature.SPEC_DRAFT,
    "eagle": Feature.SPEC_EAGLE,
    "eagle3": Feature.SPEC_EAGLE,
    "mtp": Feature.SPEC_MTP,
}
_CHAT = [{"role": "user", "content": "Hi"}]


class ConfigProblem(BaseModel):
    """One refusal: where in the config (``defaults.top_k``, ``uses.regex``, ``launch.dtype``) and why."""

    setting: str
    error: str
    message: str


class ConfigCheck(BaseModel):
    """Every refusal the configured engine would raise; ``ok`` when there is none."""

    engine: str
    version: str | None = None
    problems: list[ConfigProblem] = []

    @property
    def ok(self) -> bool:
        """True when nothing in the config would be refused."""
        return not self.problems

    def render(self) -> str:
        """A human-readable report, one problem per line."""
        who = (
            f"{self.engine} {self.version}"
            if self.version
            else "the config (its engine is unknown: it could not be read)"
            if self.engine == "?"
            else f"{self.engine} (newest known)"
        )
        if self.ok:
            return f"ok: {who} honours every default, use and launch setting in this config"
        lines = [f"{len(self.problems)} problem(s) for {who}:"]
        lines += [f"  {p.setting}: {p.error}: {p.message}" for p in self.problems]
        return "\n".join(lines)


def check_config(
    source: str | Path | Mapping[str, Any],
    env: Mapping[str, str] | None = None,
    *,
    version: str | None = None,
    **overrides: Any,
) -> ConfigCheck:
    """Every refusal the configured engine would raise for this config, at once; starts nothing.

        report = unillm.check_config("unillm.toml", engine="mlx")
        print(report.render())          # or report.problems, report.ok

    ``overrides`` are config keys (as for :func:`unillm.from_config`); ``version`` is the engine
    version to check against (default: the config's ``engine_version``, else the newest known).

    Args:
        source: A YAML/TOML file path, or the config as a mapping.
        env: Environment whose ``UNILLM_*`` variables override config keys
            (``UNILLM_LAUNCH__PORT=8001``); None is ``os.environ``.
        version: The engine version to check against; None is the config's ``engine_version``,
            else the newest known.
        **overrides: Settings that replace the file's.

    Returns:
        Every problem found, without starting or contacting anything.
    """
    from unillm.config.load import Config, config_data

    engine = str(overrides.get("engine") or "?")
    try:
        data = config_data(source, env, **overrides)
    except ConfigError as e:
        return ConfigCheck(engine=engine, problems=[_problem("config", e)])
    engine = str(data.get("engine", engine))
    problems = _Problems()
    defaults = data.pop("defaults", {})
    launch = data.pop("launch", None)
    uses = data.pop("uses", [])
    try:
        config = Config.model_validate(data)
    except ValueError as e:
        return ConfigCheck(engine=engine, problems=[_problem("config", _readable(e))])
    if (config.base_url is None) == (launch is None):
        problems.add(
            "config", ConfigError("the config needs exactly one of base_url = '...' or a [launch] table")
        )
    try:
        adapter = get_adapter(config.engine)
    except UnillmError as e:
        return ConfigCheck(engine=engine, problems=[*problems.items, _problem("engine", e)])
    spec = _launch_spec(launch, config, problems)
    version = version or config.engine_version or (adapter.expected_version(spec) if spec else None)
    _check_sections(adapter, version, config, spec, defaults, uses, problems)
    return ConfigCheck(engine=adapter.name, version=version, problems=problems.items)


def _check_sections(
    adapter: Adapter,
    version: str | None,
    config: Config,
    spec: LaunchSpec | None,
    defaults: Any,
    uses: Any,
    problems: _Problems,
) -> None:
    """Check every section of a config that parsed against ``adapter`` at ``version``."""
    caps = adapter.capabilities(version)
    info = EngineInfo(
        engine=adapter.name, model=config.model or (spec.model if spec else "model"), version=version
    )
    routes = _routes(uses)
    if isinstance(defaults, Mapping):
        _check_defaults(adapter, caps, info, defaults, routes, problems)
    else:
        problems.add("defaults", InvalidOptions("[defaults] must be a table of options"))
    _check_uses(adapter, caps, info, uses, routes, problems)
    _check_client_limits(config, problems)
    _check_deploy(config.deploy or {}, problems)
    if spec is not None:
        _check_launch(adapter, caps, spec, problems)


def _check_client_limits(config: Config, problems: _Problems) -> None:
    """``[timeouts]``, ``[retry]``, ``[pool]`` and ``[reserve]``: the values from_config would refuse."""
    from unillm.client.priority_gate import Reserve
    from unillm.client.transport import Pool, RetryPolicy, Timeouts

    tables: tuple[tuple[str, Callable[..., object], Mapping[str, Any]], ...] = (
        ("timeouts", Timeouts, config.timeouts),
        ("retry", RetryPolicy, config.retry),
        ("pool", Pool, config.pool),
        ("reserve", Reserve, config.reserve or {}),
    )
    for setting, build, values in tables:
        try:
            build(**values)
        except TypeError as e:
            problems.add(setting, InvalidOptions(f"[{setting}]: {e}"))
        except (UnillmError, ValueError) as e:
            problems.add(setting, e)


def _check_deploy(deploy: Mapping[str, Any], problems: _Problems) -> None:
    """``[deploy]``: the keys that live in ``[launch]`` or at the top now, each named."""
    from unillm.config.cluster import MOVED_DEPLOY_KEYS, refuse_moved_deploy_keys

    for key in [k for k in MOVED_DEPLOY_KEYS if k in deploy]:
        problems.run(f"deploy.{key}", partial(refuse_moved_deploy_keys, {key: deploy[key]}))


class _Problems:
    def __init__(self) -> None:
        self.items: list[ConfigProblem] = []

    def add(self, setting: str, error: Exception) -> None:
        if all(p.message != str(error) for p in self.items):
            self.items.append(_problem(setting, error))

    def run(self, setting: str, action: Callable[[], object]) -> bool:
        """Run ``action``; record a refusal it raises. True when it passed."""
        try:
            action()
        except (UnillmError, ValueError) as e:
            self.add(setting, e)
            return False
        return True


def _require(caps: Capabilities, feature: Feature, problems: _Problems, setting: str) -> bool:
    try:
        caps.require(feature)
    except UnillmError as e:
        problems.add(setting, e)
        return False
    return True


def _readable(error: Exception) -> Exception:
    """A pydantic ValidationError as one short InvalidOptions line."""
    from pydantic import ValidationError

    if isinstance(error, ValidationError):
        return InvalidOptions(validation_problems(error))
    return error


def _problem(setting: str, error: Exception) -> ConfigProblem:
    return ConfigProblem(setting=setting, error=type(error).__name__, message=str(error))


def _routes(uses: Any) -> list[tuple[str | None, list[dict[str, str]] | None]]:
    """The (prompt, messages) shapes the app sends: both unless ``uses`` names one."""
    names = {str(u).lower() for u in uses} if isinstance(uses, list) else set()
    routes: list[tuple[str | None, list[dict[str, str]] | None]] = []
    if "completion" in names or "chat" not in names:
        routes.append(("Hi", None))
    if "chat" in names or "completion" not in names:
        routes.append((None, _CHAT))
    return routes


def _build_all(
    adapter: Adapter,
    caps: Capabilities,
    info: EngineInfo,
    problems: _Problems,
    setting: str,
    routes: list[tuple[str | None, list[dict[str, str]] | None]],
    options: Mapping[str, Any],
    output: Any = None,
    stream: bool = False,
) -> None:
    """Every refusal of a request with ``options`` on each route: capabilities, then the adapter."""
    for prompt, messages in routes:
        try:
            request = make_request(prompt, messages, output, options, stream=stream)
        except (UnillmError, ValueError) as e:
            problems.add(setting, e)
            return
        refused = False
        for feature in features_of(request):
            refused = not _require(caps, feature, problems, setting) or refused
        if not refused:
            _try_build(adapter, request, info, problems, setting)


def _try_build(
    adapter: Adapter, request: Request, info: EngineInfo, problems: _Problems, setting: str
) -> None:
    try:
        adapter.build(request, info)
    except UnillmError as e:
        problems.add(setting, e)
    except Exception:  # needs facts only a running engine reports: checked at connect time
        pass


def _check_defaults(
    adapter: Adapter,
    caps: Capabilities,
    info: EngineInfo,
    defaults: Mapping[str, Any],
    routes: list[tuple[str | None, list[dict[str, str]] | None]],
    problems: _Problems,
) -> None:
    for key, value in defaults.items():
        _build_all(adapter, caps, info, problems, f"defaults.{key}", routes, {key: value})
    _build_all(adapter, caps, info, problems, "defaults", routes, defaults)  # combinations


def _check_uses(
    adapter: Adapter,
    caps: Capabilities,
    info: EngineInfo,
    uses: Any,
    routes: list[tuple[str | None, list[dict[str, str]] | None]],
    problems: _Problems,
) -> None:
    if not isinstance(uses, list):
        problems.add("uses", InvalidOptions("uses must be a list of feature names"))
        return
    for name in uses:
        setting = f"uses.{name}"
        try:
            feature = feature_by_name(name)
        except InvalidOptions as e:
            problems.add(setting, e)
            continue
        if not _require(caps, feature, problems, setting):
            continue
        if feature in _SAMPLE_OUTPUT:
            _build_all(adapter, caps, info, problems, setting, routes, {}, output=_SAMPLE_OUTPUT[feature])
        elif feature in _SAMPLE_OPTION:
            _build_all(adapter, caps, info, problems, setting, routes, dict(_SAMPLE_OPTION[feature]))
        elif feature is Feature.STREAM:
            _build_all(adapter, caps, info, problems, setting, routes, {}, stream=True)
        elif feature is Feature.LORA_RUNTIME:
            problems.run(setting, lambda: adapter.load_lora("adapter", "/adapters/a"))


def _launch_spec(launch: Any, config: Any, problems: _Problems) -> LaunchSpec | None:
    if launch is None:
        return None
    if not isinstance(launch, Mapping):
        problems.add("launch", InvalidOptions("[launch] must be a table of launch settings"))
        return None
    from unillm.config.cluster import PLACEMENT_KEYS

    _check_placement(launch, problems)
    settings = {k: v for k, v in launch.items() if k not in PLACEMENT_KEYS}
    if config.model and "model" not in settings:
        settings["model"] = config.model
    model = settings.get("model") or "model"
    good: dict[str, Any] = {"model": model}
    for key, value in settings.items():  # each setting alone, so every bad one is listed
        if key == "model":
            continue
        try:
            LaunchSpec(model=model, **{key: value})
        except (UnillmError, ValueError) as e:
            problems.add(f"launch.{key}", _readable(e))
        else:
            good[key] = value
    if "model" not in settings:
        problems.add("launch.model", InvalidOptions("[launch] needs model = '<path or hub id>'"))
    try:
        return LaunchSpec(**good)
    except Exception as e:
        problems.add("launch", e)
        return None


def _check_placement(launch: Mapping[str, Any], problems: _Problems) -> None:
    """``replicas``, ``disaggregation``, ``router``, ``[launch.cluster]``: each alone, then together."""
    from unillm.config.cluster import PLACEMENT_KEYS, split_launch

    placement = {k: v for k, v in launch.items() if k in PLACEMENT_KEYS}
    passed = [problems.run(f"launch.{k}", partial(split_launch, {k: v})) for k, v in placement.items()]
    if all(passed):
        problems.run("launch", lambda: split_launch(placement)[1].check_launch())


def _check_launch(adapter: Adapter, caps: Capabilities, spec: LaunchSpec, problems: _Problems) -> None:
    p = spec.parallel
    for on, feature, field in (
        (p.tensor > 1, Feature.TENSOR_PARALLEL, "parallel.tensor"),
        (p.pipeline > 1, Feature.PIPELINE_PARALLEL, "parallel.pipeline"),
        (p.data > 1, Feature.DATA_PARALLEL, "parallel.data"),
        (p.expert, Feature.EXPERT_PARALLEL, "parallel.expert"),
        (spec.runtime_lora, Feature.LORA_RUNTIME, "runtime_lora"),
    ):
        if on:
            problems.run(f"launch.{field}", lambda f=feature: caps.require(f))  # type: ignore[misc]
    if spec.speculative is not None and spec.speculative.method in _SPECULATIVE:
        feature = _SPECULATIVE[spec.speculative.method]
        problems.run("launch.speculative", lambda: caps.require(_SPECULATIVE[spec.speculative.method]))  # type: ignore[union-attr]
    if spec.cpu:
        from unillm.launching.cpu import cpu_workdir, merge_recipe

        recipe_spec = spec

        def recipe() -> None:
            nonlocal recipe_spec
            recipe_spec = merge_recipe(spec, adapter.cpu_recipe(spec, cpu_workdir(adapter.name)))

        if not problems.run("launch.cpu", recipe):
            spec = spec.model_copy(update={"cpu": False})
        else:
            spec = recipe_spec
    if spec.in_process and type(adapter).in_process is Adapter.in_process:
        problems.run("launch.in_process", lambda: adapter.in_process(spec))  # refuses, pure
        return
    _check_command(adapter, spec, problems)  # adapters validate in-process specs there too


def _check_command(adapter: Adapter, spec: LaunchSpec, problems: _Problems) -> None:
    """Render the command; for each refusal, find the setting behind it, drop it, render again."""
    fields = sorted(spec.model_fields_set - {"model"})
    data = {k: getattr(spec, k) for k in fields}
    while True:
        error = _command_error(adapter, spec.model, data)
        if error is None:
            return
        culprit = next(
            (
                k
                for k in data
                if _command_error(adapter, spec.model, {x: v for x, v in data.items() if x != k}) != error
            ),
            None,
        )
        assert isinstance(error, _Same)
        setting = f"launch.{culprit}" if culprit else "launch"
        if not any(p.setting.startswith(setting) for p in problems.items):  # not already listed
            problems.add(setting, error.error)
        if culprit is None:
            return
        del data[culprit]


def _command_error(adapter: Adapter, model: str, data: Mapping[str, Any]) -> Exception | None:
    try:
        adapter.command(LaunchSpec(model=model, **data))
    except (UnillmError, ValueError) as e:
        return _Same(e)
    except Exception:
        return None
    return None


class _Same(Exception):
    """An error compared by type and message (to tell whether dropping a setting changed it)."""

    def __init__(self, error: Exception) -> None:
        super().__init__(str(error))
        self.error = error

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Same) and (type(self.error), str(self.error)) == (
            type(other.error),
            str(other.error),
        )

    def __hash__(self) -> int:
        return hash(str(self))
