"""Where a batch runs: a running engine (``--url``), a fleet (several), a config, or a launch.

    async with open_target(Target(engine="vllm", urls=["http://127.0.0.1:8000"])) as client:
        ...
    async with open_target(Target(engine="vllm", model="/m", in_process=True), items) as client:
        ...

A launched engine (``--model``) is started for the run and stopped afterwards, whatever
happens; ``in_process`` launches it without its HTTP server (the adapter's in-process mode,
e.g. vLLM's engine in a worker), after checking every request against that mode. One engine
keeps the SDK's default retry policy; a fleet fails over itself.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from unillm.batch.lines import BatchItem
from unillm.batch.precheck import refuse_in_process
from unillm.client.protocol import Client
from unillm.errors import InvalidOptions

if TYPE_CHECKING:
    from unillm.launching.supervisor import Launch


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
        in_process: Launch the engine without its HTTP server (``model`` or a launching
            ``config``); requests it cannot honour are refused before it starts.
    """

    engine: str | None = None
    urls: list[str] = field(default_factory=list)
    config: str | None = None
    model: str | None = None
    api_key: str | None = None
    policy: str | None = None
    launch: dict[str, Any] = field(default_factory=dict)
    in_process: bool = False

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
        if self.in_process and self.urls:
            raise InvalidOptions(
                "--in-process starts the engine here, without its server: give --model M (with "
                "--engine) or a --config that launches, not --url"
            )


def check_target(target: Target, items: Sequence[BatchItem] = ()) -> None:
    """Refuse, before anything starts or any file changes, a target that cannot run ``items``.

    A launched target is built (not started) and checked as :func:`open_target` would: an
    engine that cannot be launched here, or (in process) requests it cannot honour.

    Args:
        target: The target.
        items: The requests to run.

    Raises:
        InvalidOptions: As :func:`open_target` would, before it starts anything.
    """
    from unillm.launching.supervisor import Launch

    made = _launcher(target)
    if isinstance(made, Launch):
        _ready(made, items)


@contextlib.asynccontextmanager
async def open_target(target: Target, items: Sequence[BatchItem] = ()) -> AsyncIterator[Client]:
    """Connect to (or launch) the target and yield its client; stop what was launched on exit.

    Args:
        target: The checked target.
        items: The requests to run: an in-process launch checks them all before it starts
            (pass none when :func:`check_target` has checked them).

    Raises:
        InvalidOptions: A bad target, an engine that cannot be launched here, or requests an
            in-process engine cannot honour.
    """
    from unillm.api import connect
    from unillm.launching.supervisor import Launch

    made = _launcher(target)
    if made is not None:
        if isinstance(made, Launch):
            _ready(made, items)
        async with made as client:
            await _loaded(made, client)
            yield client
        return
    assert target.engine is not None
    if len(target.urls) == 1:
        async with _single(target.engine, target.urls[0], target.api_key) as llm:
            yield llm
        return
    extra: dict[str, Any] = {"policy": target.policy} if target.policy else {}
    async with connect(target.engine, target.urls, api_key=target.api_key, **extra) as client:
        yield client


def _launcher(target: Target) -> Any:
    """The checked target's config or launch, built but not started; None for ``urls``."""
    from unillm.api import launch
    from unillm.launching.supervisor import Launch

    target.check()
    mode: dict[str, Any] = {"in_process": True} if target.in_process else {}
    if target.config:
        from unillm.config.load import from_config

        made: Any = from_config(target.config)
        if not target.in_process:
            return made
        if not isinstance(made, Launch):
            raise InvalidOptions(
                f"--in-process needs a config that launches one engine ([launch]); "
                f"{target.config} connects to a server, or launches several"
            )
        return from_config(target.config, launch=mode)
    if target.model:
        assert target.engine is not None
        key: dict[str, Any] = {"api_key": target.api_key} if target.api_key else {}
        return launch(target.engine, model=target.model, **key, **{**target.launch, **mode})
    return None


def _single(engine: str, url: str, api_key: str | None) -> Any:
    """One engine, sent to through aiohttp when ``httpx-aiohttp`` is installed (less CPU per request
    on a machine the engine shares), with the SDK's default retry policy."""
    from unillm.bench.http import measuring_transport
    from unillm.client.llm import LLM

    return LLM(engine, url, api_key=api_key, http_transport=measuring_transport("auto"))


async def _loaded(made: Any, client: Client) -> None:
    """Load an in-process engine now (it loads on its first call), so the batch's time and its
    first requests' latencies do not include the model's load."""
    from unillm.launching.supervisor import Launch

    if isinstance(made, Launch) and made.spec.in_process:
        await client.info()


def _ready(run: Launch, items: Sequence[BatchItem]) -> None:
    """Refuse a launch that cannot start here, or (in process) requests it cannot run."""
    from unillm.bench.targets import check_launch

    if run.spec.in_process:
        refuse_in_process(run.adapter.bind(run.spec), run.spec, items)
    check_launch(run)
