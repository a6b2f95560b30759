"""Pick the engine in configuration, not in code: TOML, YAML or a dict, with UNILLM_* overrides.

    # unillm.toml
    engine = "vllm"                     # the only line to change to swap backends
    base_url = "http://gpu-1:8000"      # connect to a running engine ... or start one:
    # base_url = ["http://gpu-1:8000", "http://gpu-2:8000"]   # a fleet of replicas
    # policy = "prefix"                 # its routing: round_robin, least_load, prefix, session, cache_aware
    # [launch]
    # model = "Qwen/Qwen2.5-0.5B-Instruct"
    # replicas = 2                      # a fleet of engines, routed by `policy`
    # disaggregation = {prefill = 1, decode = 1}   # or prefill/decode engines (with router = ...)
    # router = "vllm-router"            # a router process in front of them
    # [launch.vllm]                     # applies only when engine = "vllm" (also [launch.mlx] ...)
    # max_model_len = 4096
    # [launch.cluster]                  # place the replicas on a Ray cluster (unillm.Ray)
    # kind = "ray"
    # address = "10.0.0.1:6379"
    # [deploy.kubernetes]               # cluster-only settings of `unillm deploy kubernetes`
    # namespace = "llm"
    [defaults]
    max_tokens = 128

    async with unillm.from_config("unillm.toml") as llm:
        r = await llm.generate("Hi")
    llm = unillm.from_config("unillm.toml", engine="mlx", defaults={"max_tokens": 64})

Per-engine tables (``[launch.<engine>]``, ``[defaults.<engine>]``) are merged over the common
table when ``engine`` names them; the others are ignored. The ``[launch]`` placement keys
(``replicas``, ``disaggregation``, ``router``, ``[launch.cluster]``: :mod:`unillm.config.cluster`)
and ``policy`` are the same for a local launch, a Ray cluster and ``unillm deploy kubernetes``.
``uses = ["json_schema", "stream"]`` declares what the application relies on, for ``unillm
check`` (:func:`unillm.check_config`), which lists every refusal the configured engine would
raise, without starting anything.

Environment overrides: ``UNILLM_ENGINE``, ``UNILLM_BASE_URL`` (comma-separated for a fleet),
``UNILLM_POLICY``, ``UNILLM_MODEL``,
``UNILLM_API_KEY``, and ``UNILLM_<SECTION>__<KEY>`` for nested keys (values read as JSON when
they parse, e.g. ``UNILLM_DEFAULTS__MAX_TOKENS=64``; ``UNILLM_LAUNCH__*`` only tune a config
that has a ``[launch]`` table). Keyword overrides of ``from_config`` win over both.
"""

from __future__ import annotations

import copy
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    StrictFloat,
    StrictInt,
    ValidationError,
    field_validator,
)

from unillm.client.llm import LLM
from unillm.client.priority_gate import Reserve
from unillm.client.transport import HTTP_WIRES, Pool, RetryPolicy, Timeouts
from unillm.config.cluster import refuse_moved_deploy_keys
from unillm.config.files import check_depth, read_config_file
from unillm.errors import ConfigError, InvalidOptions, clip_message, validation_problems
from unillm.launching.supervisor import Launch
from unillm.options import make_request

if TYPE_CHECKING:
    from unillm.fleet.fleet import Fleet
    from unillm.launching.fleet_launch import FleetLaunch
    from unillm.launching.ray_cluster import RayLaunch
    from unillm.semantic.router import SemanticRouter

_PREFIX = "UNILLM_"


class Config(BaseModel):
    """A validated unillm configuration."""

    model_config = ConfigDict(extra="forbid")

    engine: str = Field(min_length=1)
    base_url: str | list[str] | None = None
    policy: str | None = None
    model: str | None = Field(None, min_length=1)  # an empty UNILLM_MODEL is a mistake, not "unset"
    api_key: SecretStr | None = None
    defaults: dict[str, Any] = {}
    launch: dict[str, Any] | None = Field(None, repr=False)
    timeouts: dict[str, StrictFloat] = {}  # strict: `attempts = true` is not 1
    retry: dict[str, StrictFloat] = {}
    pool: dict[str, Any] = {}  # numbers (checked below), but `http`: the wire's name
    reserve: dict[str, StrictInt] | None = None  # unillm.Reserve's fields: slots, above, capacity
    uses: list[str] = Field([], description="features the app relies on (for unillm check)")
    engine_version: str | None = Field(None, description="the version unillm check assumes")
    router: dict[str, Any] | None = Field(None, repr=False)
    deploy: dict[str, Any] | None = Field(None, description="unillm deploy's settings (unillm.deploy)")

    @field_validator("pool")
    @classmethod
    def _pool_values(cls, pool: dict[str, Any]) -> dict[str, Any]:
        """Numbers (strict: ``max_connections = true`` is not 1), but ``http``: the wire's name,
        as ``Pool(http=...)`` takes it."""
        for key, value in pool.items():
            if key == "http":
                if not isinstance(value, str) or value not in HTTP_WIRES:
                    wires = ", ".join(map(repr, HTTP_WIRES))
                    raise ValueError(
                        f"http is the HTTP library ({wires}), not {clip_message(repr(value), 100)}"
                    )
            elif isinstance(value, bool) or not isinstance(value, int | float):
                raise ValueError(f"{key} is a number, not {clip_message(repr(value), 100)}")
        return pool


def load_config(
    source: str | Path | Mapping[str, Any], env: Mapping[str, str] | None = None, **overrides: Any
) -> Config:
    """Read and validate a config file (``.toml``, ``.yaml``/``.yml``) or mapping.

    config = unillm.load_config("unillm.toml", engine="mlx")   # keyword overrides win

    Args:
        source: A YAML/TOML file path, or the config as a mapping.
        env: Environment whose ``UNILLM_*`` variables override config keys
            (``UNILLM_LAUNCH__PORT=8001``); None is ``os.environ``.
        **overrides: Settings that replace the file's.

    Returns:
        The validated config, not yet connected or launched.

    Raises:
        ConfigError: The file cannot be read or does not validate (each problem named).
    """
    from unillm.capabilities import feature_by_name

    data = config_data(source, env, **overrides)
    try:
        config = Config.model_validate(data)
    except ValidationError as e:
        problems = validation_problems(e, "(top)")
        raise ConfigError(f"invalid unillm config: {problems}") from None
    if (config.base_url is None) == (config.launch is None):
        raise ConfigError(
            "the config needs exactly one of base_url = '...' (connect to a running "
            "engine) or a [launch] table (start one)"
        )
    if config.policy is not None and not isinstance(config.base_url, list) and not _launches_replicas(config):
        more = (
            "set [launch] replicas = 2 (or disaggregation = {prefill = 1, decode = 1})"
            if config.launch is not None
            else "give base_url a list of URLs (base_url = ['http://a:8000', 'http://b:8000'])"
        )
        raise ConfigError(f"policy routes between replicas: {more}")
    try:
        make_request("", None, None, config.defaults, stream=False)
        for name in config.uses:
            feature_by_name(name)
    except InvalidOptions as e:
        raise ConfigError(f"invalid [defaults] or uses: {e}") from None
    try:  # a key of an earlier [deploy] would be dropped silently by a local launch
        refuse_moved_deploy_keys(config.deploy or {})
    except InvalidOptions as e:
        raise ConfigError(str(e)) from None
    return config


def config_data(
    source: str | Path | Mapping[str, Any], env: Mapping[str, str] | None = None, **overrides: Any
) -> dict[str, Any]:
    """The raw config for its engine: the file, then ``UNILLM_*`` variables, then ``overrides``,
    with the engine's ``[launch.<engine>]`` / ``[defaults.<engine>]`` merged over the common tables."""
    if not isinstance(source, (str, Path, Mapping)):
        raise ConfigError(
            f"a config is a file path (.toml, .yaml, .yml) or a mapping, got {type(source).__name__}"
        )
    if isinstance(source, Mapping):
        check_depth(source, "the config")
        data = copy.deepcopy(dict(source))
    else:
        data = read_config_file(Path(source))
    _apply_env(data, os.environ if env is None else env)
    unknown = sorted(set(overrides) - set(Config.model_fields))
    if unknown:
        raise ConfigError(f"unknown config override(s) {unknown}; the keys are {sorted(Config.model_fields)}")
    check_depth(overrides, "the overrides")
    overrides = copy.deepcopy(overrides)
    engine = overrides.get("engine", data.get("engine"))
    data = _for_engine(data, engine)
    _merge_into(data, _for_engine(overrides, engine))  # overrides win over the engine's tables
    return data


def from_config(
    source: str | Path | Mapping[str, Any],
    env: Mapping[str, str] | None = None,
    **overrides: Any,
) -> LLM | Fleet | Launch | FleetLaunch | RayLaunch | SemanticRouter:
    """An LLM (``base_url``), a Fleet (a list of base URLs) or a Launch (``[launch]``).

    ``[launch] replicas = N`` (or ``disaggregation = {prefill = P, decode = D}`` with ``router``)
    gives a FleetLaunch, ``[launch.cluster]`` (``kind = "ray"``) a RayLaunch
    (:mod:`unillm.config.cluster`).

        async with unillm.from_config("unillm.toml") as llm: ...
        llm = unillm.from_config("unillm.toml", engine="mlx", launch={"in_process": True})

    ``overrides`` are config keys; tables are merged into the file's (they win over the file
    and over ``UNILLM_*`` variables). ``async with`` the result gives the client. With a
    ``[router]`` table the result is a :class:`~unillm.semantic.SemanticRouter` whose main
    target is that client.

    Args:
        source: A YAML/TOML file path, or the config as a mapping.
        env: Environment whose ``UNILLM_*`` variables override config keys
            (``UNILLM_LAUNCH__PORT=8001``); None is ``os.environ``.
        **overrides: Settings that replace the file's (e.g. ``model="..."``).

    Returns:
        What the config describes: an LLM, a Fleet, a launch or a SemanticRouter.

    Raises:
        ConfigError: The file cannot be read or does not validate (each problem named).
    """
    config = load_config(source, env, **overrides)
    main = _main(config)
    if config.router is None:
        return main
    from unillm.config.semantic import build_router

    return build_router(config.router, llm=main, env=os.environ if env is None else env)


def _main(config: Config) -> LLM | Fleet | Launch | FleetLaunch | RayLaunch:
    key = config.api_key.get_secret_value() if config.api_key else None
    common = _client_settings(config)
    timeouts, pool, reserve = common["timeouts"], common["pool"], common["reserve"]
    if isinstance(config.base_url, list):
        from unillm.fleet.fleet import Fleet

        if config.retry:
            raise ConfigError("[retry] is for one engine; a fleet fails over between its replicas")
        try:
            return Fleet.connect(
                config.engine,
                config.base_url,
                model=config.model,
                api_key=key,
                defaults=config.defaults,  # type: ignore[arg-type]
                timeouts=timeouts,
                pool=pool,
                reserve=reserve,
                policy=config.policy or "round_robin",  # type: ignore[arg-type]
            )
        except InvalidOptions as e:
            raise ConfigError(f"invalid fleet config: {e}") from None
    if config.base_url is not None:
        return LLM(config.engine, config.base_url, model=config.model, api_key=key, **common)
    from unillm.adapter.launch_spec import build_spec
    from unillm.api import launch
    from unillm.config.cluster import split_launch

    try:
        settings, placement = split_launch(config.launch or {})
        placement.check_launch()
    except InvalidOptions as e:
        raise ConfigError(f"invalid [launch]: {e}") from None
    if config.model and "model" not in settings:
        settings["model"] = config.model
    if key and "api_key" not in settings:
        settings["api_key"] = key
    try:
        spec = build_spec(None, settings)
    except InvalidOptions as e:
        raise ConfigError(f"invalid [launch]: {e}") from None
    if not placement.single:
        policy: Any = config.policy or "round_robin"
        return launch(
            config.engine,
            spec,
            replicas=placement.replicas,
            disaggregation=placement.disaggregation,
            router=placement.router,
            cluster=placement.cluster,
            policy=policy,
            **common,
        )
    started: Launch = launch(config.engine, spec, **common)
    return started


def _client_settings(config: Config) -> dict[str, Any]:
    """The client's settings: defaults, and the ``[timeouts]``, ``[retry]``, ``[pool]`` and
    ``[reserve]`` tables built into their types.

    Raises:
        ConfigError: A table with an unknown field or a value its type refuses.
    """
    try:
        timeouts, retry = Timeouts(**config.timeouts), RetryPolicy(**config.retry)  # type: ignore[arg-type]
        pool = Pool(**config.pool)
        reserve = Reserve(**config.reserve) if config.reserve is not None else None
    except (TypeError, InvalidOptions) as e:
        raise ConfigError(f"invalid [timeouts], [retry], [pool] or [reserve]: {e}") from None
    return {
        "defaults": config.defaults,
        "timeouts": timeouts,
        "retry": retry,
        "pool": pool,
        "reserve": reserve,
    }


def _launches_replicas(config: Config) -> bool:
    """Whether the config starts several engines (``[launch] replicas = N`` or ``disaggregation``),
    which ``policy`` routes."""
    launch = config.launch or {}
    replicas = launch.get("replicas", 1)
    return (isinstance(replicas, int) and replicas > 1) or "disaggregation" in launch


def _apply_env(data: dict[str, Any], env: Mapping[str, str]) -> None:
    for name, raw in env.items():
        path = name[len(_PREFIX) :].lower().split("__")
        if not name.startswith(_PREFIX) or path[0] not in Config.model_fields:
            continue  # e.g. UNILLM_CACHE belongs to something else
        if path[0] == "launch" and len(path) > 1 and "launch" not in data:
            continue  # tunes a [launch] table; a config that connects (base_url) has none
        try:
            value: Any = json.loads(raw)
        except json.JSONDecodeError:
            value = raw
        except RecursionError:  # nested past the parser: no config value is
            raise ConfigError(f"{name}: JSON lists or objects nest too deeply to read") from None
        check_depth(value, name)
        if path[0] in ("model", "api_key", "engine", "policy"):
            value = raw
        elif path[0] == "base_url":
            value = [u.strip() for u in raw.split(",") if u.strip()] if "," in raw else raw
        target = data
        for part in path[:-1]:
            target = target.setdefault(part, {})
            if not isinstance(target, dict):
                raise ConfigError(f"{name}: {part} is not a table in the config")
        target[path[-1]] = value


def _merge_into(target: dict[str, Any], source: Mapping[str, Any]) -> None:
    """Merge ``source`` into ``target``, tables recursively (``source`` wins)."""
    for key, value in source.items():
        if isinstance(value, Mapping) and isinstance(target.get(key), dict):
            _merge_into(target[key], value)
        else:
            target[key] = value


def _for_engine(data: dict[str, Any], engine: Any) -> dict[str, Any]:
    """Merge ``engine``'s ``[launch.<engine>]`` and ``[defaults.<engine>]`` over the common tables."""
    from difflib import get_close_matches

    from unillm.adapter.launch_spec import LaunchSpec
    from unillm.adapter.registry import installed_engines
    from unillm.config.cluster import PLACEMENT_KEYS
    from unillm.options import Options

    installed = installed_engines()
    for section, fields in (("launch", LaunchSpec.model_fields), ("defaults", Options.__annotations__)):
        table = data.get(section)
        if not isinstance(table, dict):
            continue
        placement = PLACEMENT_KEYS if section == "launch" else ()  # [launch.cluster] is no engine's
        per_engine = {
            k: v
            for k, v in table.items()
            if k not in fields and k not in placement and isinstance(v, Mapping)
        }
        for name in per_engine:
            if name not in installed:
                close = get_close_matches(name, [*installed, *fields], 1, 0.6)
                hint = f"did you mean {close[0]!r}? " if close else ""
                raise ConfigError(
                    f"[{section}] has a table {name!r} that is neither a {section} setting nor an "
                    f"installed engine ({', '.join(installed)}): {hint}Per-engine tables are named "
                    f"for an engine ([{section}.vllm]); install its adapter or remove the table"
                )
        merged = {k: v for k, v in table.items() if k not in per_engine}
        chosen = per_engine.get(engine) if isinstance(engine, str) else None
        _merge_into(merged, copy.deepcopy(dict(chosen or {})))
        if section == "launch" and not merged:
            del data[section]  # only other engines' tables: this engine connects instead
        else:
            data[section] = merged
    return data
