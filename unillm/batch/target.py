"""Where a batch runs: a running engine (``--url``), a fleet (several), a config, or a launch.

    async with open_target(Target(engine="vllm", urls=["http://127.0.0.1:8000"])) as client:
        ...

A launched engine (``--model``) is started for the run and stopped afterwards, whatever
happens. One engine keeps the SDK's default retry policy; a fleet fails over itself.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from unillm.client.protocol import Client
from unillm.errors import InvalidOptions


@dataclass
class Target:
    """What ``unillm batch`` sends to: exactly one of ``urls``, ``config`` or ``model``.

    Args:
        engine: The adapter's name (needed with ``urls`` and ``model``).
        urls: One engine's URL, or several for a fleet of replicas.
        config: A unillm config file (connect or launch as it says).
        model: Launch ``engine`` with this model for the run, stop it afterwards.
        api_key: Sent as a bearer token; never echoed.
        policy: The fleet's routing policy (several URLs only).
        launch: More launch settings (LaunchSpec fields) with ``model``.
    """

    engine: str | None = None
    urls: list[str] = field(default_factory=list)
    config: str | None = None
    model: str | None = None
    api_key: str | None = None
    policy: str | None = None
    launch: dict[str, Any] = field(default_factory=dict)

    def check(self) -> None:
        """Refuse a target that names none or several of url/config/model, or lacks the engine."""
        if sum([bool(self.urls), bool(self.config), bool(self.model)]) != 1:
            raise InvalidOptions(
                "give exactly one target: --url URL (repeat for a fleet), --config FILE, "
                "or --model M (with --engine) to launch an engine for the run"
            )
        if (self.urls or self.model) and not self.engine:
            raise InvalidOptions("name the engine with --engine (vllm, sglang, tgi, mlx, llamacpp)")
        if self.policy and len(self.urls) < 2:
            raise InvalidOptions("--policy routes between replicas: give two or more --url")


@contextlib.asynccontextmanager
async def open_target(target: Target) -> AsyncIterator[Client]:
    """Connect to (or launch) the target and yield its client; stop what was launched on exit.

    Args:
        target: The checked target.

    Raises:
        InvalidOptions: A bad target, or an engine that cannot be launched here.
    """
    from unillm.api import connect, launch

    target.check()
    if target.config:
        from unillm.config.load import from_config
        from unillm.launching.supervisor import Launch

        made: Any = from_config(target.config)
        if isinstance(made, Launch):
            _installed(made)
        async with made as client:
            yield client
        return
    assert target.engine is not None
    if target.model:
        key: dict[str, Any] = {"api_key": target.api_key} if target.api_key else {}
        run = launch(target.engine, model=target.model, **key, **target.launch)
        _installed(run)
        async with run as llm:
            yield llm
        return
    if len(target.urls) == 1:
        async with _single(target.engine, target.urls[0], target.api_key) as llm:
            yield llm
        return
    extra: dict[str, Any] = {"policy": target.policy} if target.policy else {}
    async with connect(target.engine, target.urls, api_key=target.api_key, **extra) as client:
        yield client


def _single(engine: str, url: str, api_key: str | None) -> Any:
    """One engine, sent to through aiohttp when ``httpx-aiohttp`` is installed (less CPU per request
    on a machine the engine shares), with the SDK's default retry policy."""
    from unillm.bench.http import measuring_transport
    from unillm.client.llm import LLM

    return LLM(engine, url, api_key=api_key, http_transport=measuring_transport("auto"))


def _installed(run: Any) -> None:
    from unillm.bench.targets import check_launch

    check_launch(run)
