"""What a benchmark measures: a running engine, a fleet, a config, or engines it launches itself.

    Url("vllm", "http://127.0.0.1:8000")
    Fleet("vllm", ["http://10.0.0.1:8000", "http://10.0.0.2:8000"])
    Config("unillm.toml")
    matrix(["vllm"], {"model": "/models/tiny"}, vary={"prefix_caching": [True, False]})

``await target.check()`` raises a typed error for bad input before anything starts (unknown
engine, impossible parallel layout on this machine, engine not installed, unreachable URL);
``async with target.open() as opened`` yields the client to measure and, for launched
engines, stops the engine afterwards. ``http=`` picks the HTTP client of the measurement for a
URL or a launched engine (:mod:`unillm.bench.http`: aiohttp under httpx by default when
installed); fleets and configs use the SDK's own client. The result names it (``client_http``).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import shutil
import subprocess
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import anyio

from unillm.bench.http import resolve
from unillm.bench.result import TargetInfo
from unillm.client.transport import RetryPolicy
from unillm.errors import EngineUnavailable, InvalidOptions, UnillmError

if TYPE_CHECKING:
    from unillm.client.llm import LLM
    from unillm.client.protocol import Client
    from unillm.launching.supervisor import Launch

#: Benchmarks never retry: a retried request would hide the failure and distort its timings.
NO_RETRY = RetryPolicy(attempts=1)


@dataclass
class Opened:
    """A target ready to measure: the client, the engines whose metrics count, a liveness check."""

    client: Client
    info: TargetInfo
    sources: dict[str, Client] = field(default_factory=dict)
    alive: Callable[[], str | None] | None = None
    #: Requests sent to each replica so far (fleets); diffed over each run.
    replica_requests: Callable[[], dict[str, int]] | None = None


class Target(ABC):
    """Something ``unillm bench`` can measure."""

    label: str

    @abstractmethod
    async def check(self) -> None:
        """Raise a typed error now if this target cannot be measured (nothing is started)."""

    @abstractmethod
    def open(self) -> contextlib.AbstractAsyncContextManager[Opened]:
        """Connect (or launch) and yield an :class:`Opened`; stop what was started on exit."""


class Url(Target):
    """An engine already running at ``url``: ``Url("vllm", "http://127.0.0.1:8000")``.

    Args:
        engine: The adapter's name ("vllm", ...).
        url: The engine's root URL.
        api_key: Sent as a bearer token; never echoed.
        model: The model to ask for; None uses the served one.
        label: The name in reports; None is ``"<engine> @ <url>"``.
        http: The measuring HTTP client: "auto" (aiohttp when ``httpx-aiohttp`` is installed),
            "aiohttp" or "httpx".
    """

    def __init__(
        self,
        engine: str,
        url: str,
        *,
        api_key: str | None = None,
        model: str | None = None,
        label: str | None = None,
        http: str = "auto",
    ) -> None:
        self.engine, self.url, self.api_key, self.model = engine, url, api_key, model
        self.label = label or f"{engine} @ {url}"
        self.http = resolve(http)

    def _client(self) -> LLM:
        return measuring_client(self.engine, self.url, self.http, model=self.model, api_key=self.api_key)

    async def check(self) -> None:
        async with self._client() as llm:
            await reachable(llm, self.engine, self.url)

    @contextlib.asynccontextmanager
    async def open(self) -> AsyncIterator[Opened]:
        async with self._client() as llm:
            info = await llm.info()
            yield Opened(
                llm,
                TargetInfo(
                    label=self.label,
                    engine=self.engine,
                    urls=[llm.base_url],
                    model=info.model,
                    engine_version=info.version,
                    client_http=self.http,
                ),
                sources={self.label: llm},
            )


def measuring_client(
    engine: Any, url: str, http: str, *, model: str | None = None, api_key: str | None = None
) -> LLM:
    """An LLM for measuring: no retries, and the HTTP client ``http`` (see unillm.bench.http)."""
    from unillm.bench.http import measuring_transport
    from unillm.client.llm import LLM

    return LLM(
        engine, url, model=model, api_key=api_key, retry=NO_RETRY, http_transport=measuring_transport(http)
    )


class Fleet(Target):
    """Replicas of one engine behind unillm's fleet client: ``Fleet("vllm", [url1, url2])``.

    Each replica's metrics are compared before and after, so the result shows each one's share.

    Args:
        engine: The adapter's name ("vllm", ...).
        urls: The replicas' URLs (at least two).
        api_key: Sent to every replica as a bearer token; never echoed.
        policy: The fleet's routing policy; None is the fleet's default.
        label: The name in reports; None says engine, size and policy.

    Raises:
        InvalidOptions: Fewer than two URLs.
    """

    def __init__(
        self,
        engine: str,
        urls: Sequence[str],
        *,
        api_key: str | None = None,
        policy: str | None = None,
        label: str | None = None,
    ) -> None:
        if len(urls) < 2:
            raise InvalidOptions("a fleet needs at least two URLs; measure one engine with Url(...)")
        self.engine, self.urls, self.api_key, self.policy = engine, list(urls), api_key, policy
        self.label = label or f"{engine} fleet x{len(urls)}" + (f" ({policy})" if policy else "")

    def _replicas(self) -> dict[str, LLM]:
        from unillm.client.llm import LLM

        return {u: LLM(self.engine, u, api_key=self.api_key, retry=NO_RETRY) for u in self.urls}

    async def check(self) -> None:
        _fleet_client(self.engine, self.urls, self.api_key, self.policy)
        for url, llm in self._replicas().items():
            async with llm:
                await reachable(llm, self.engine, url)

    @contextlib.asynccontextmanager
    async def open(self) -> AsyncIterator[Opened]:
        async with _fleet_client(self.engine, self.urls, self.api_key, self.policy) as client:
            opened = await _opened(client, self.label, self.engine)
            if self.policy:
                opened.info.settings = {"policy": self.policy}
            yield opened


def _fleet_client(engine: str, urls: list[str], api_key: str | None, policy: str | None) -> Any:
    from unillm.api import connect

    extra: dict[str, Any] = {"policy": policy} if policy else {}
    try:
        return connect(engine, urls, api_key=api_key, **extra)
    except InvalidOptions as e:
        raise InvalidOptions(
            f"this unillm cannot connect to a fleet of {len(urls)} URLs ({e}); "
            "it needs unillm.connect(engine, [urls]) (the fleet client)"
        ) from None


class Config(Target):
    """Whatever a unillm config describes (a URL to connect to, or a [launch] table).

    Args:
        path: The unillm config file.
        label: The name in reports; None is the path.
    """

    def __init__(self, path: str, *, label: str | None = None) -> None:
        self.path = path
        self.label = label or path

    async def check(self) -> None:
        from unillm.client.llm import LLM
        from unillm.config.load import load_config

        config = load_config(self.path)
        urls = [config.base_url] if isinstance(config.base_url, str) else config.base_url or []
        key = config.api_key.get_secret_value() if config.api_key else None
        for url in urls:
            async with LLM(config.engine, url, api_key=key, retry=NO_RETRY) as llm:
                await reachable(llm, config.engine, url)
        if not urls:
            from unillm.config.load import from_config
            from unillm.launching.supervisor import Launch

            made = from_config(self.path)
            run = getattr(made, "llm", made)  # a semantic router's main target
            if isinstance(run, Launch):
                check_launch(run)

    @contextlib.asynccontextmanager
    async def open(self) -> AsyncIterator[Opened]:
        from unillm.config.load import from_config, load_config
        from unillm.launching.supervisor import Launch

        made: Any = from_config(self.path)
        if isinstance(made, Launch):
            async with _launched(made, self.label, {}) as opened:
                yield opened
            return
        engine = load_config(self.path).engine
        async with made as client:
            yield await _opened(client, self.label, engine)


async def _opened(client: Any, label: str, engine: str) -> Opened:
    """An Opened for a connected LLM, Fleet, or any other Client (e.g. a semantic router)."""
    replicas = getattr(client, "replicas", None)  # a Fleet's LLMs
    sources: dict[str, Client]
    if replicas is not None:
        sources = {r.base_url: r for r in replicas}
    elif hasattr(client, "base_url"):
        sources = {label: client}
    else:
        sources = {}
    info = await client.info() if hasattr(client, "info") else None
    stats = getattr(client, "stats", None)
    counts = (lambda: {r.url: r.requests for r in stats().replicas}) if replicas and stats else None
    return Opened(
        client,
        TargetInfo(
            label=label,
            engine=engine,
            urls=list(sources) if replicas else ([client.base_url] if sources else []),
            model=info.model if info else None,
            engine_version=info.version if info else None,
        ),
        sources=sources,
        replica_requests=counts,
    )


class Launched(Target):
    """An engine unillm starts for the measurement and stops afterwards (one matrix cell).

    Launched("vllm", {"model": "/models/tiny", "prefix_caching": False})

    Args:
        engine: The adapter's name ("vllm", ...).
        settings: Launch settings (LaunchSpec fields, plus ``tensor``/``speculative`` shorthands).
        label: The name in reports; None derives one from the settings.
        show: The settings the label and report show; None: all of ``settings``.
        http: The measuring HTTP client: "auto" (aiohttp when ``httpx-aiohttp`` is installed),
            "aiohttp" or "httpx".
    """

    def __init__(
        self,
        engine: str,
        settings: Mapping[str, Any],
        *,
        label: str | None = None,
        show: Mapping[str, Any] | None = None,
        http: str = "auto",
    ) -> None:
        self.engine, self.settings, self.http = engine, dict(settings), resolve(http)
        self.show = dict(show if show is not None else settings)
        self.label = label or " ".join(
            [engine, *(f"{k}={_short(v)}" for k, v in self.show.items() if k != "model")]
        )
        self._launch: Launch | None = None

    def launch(self) -> Launch:
        """The Launch (built once, so its port and command stay the same from check to open)."""
        if self._launch is None:
            from unillm.api import launch
            from unillm.launching.supervisor import print_progress

            self._launch = launch(
                self.engine, progress=print_progress, retry=NO_RETRY, **_spec_settings(self.settings)
            )
        return self._launch

    async def check(self) -> None:
        check_launch(self.launch())

    @contextlib.asynccontextmanager
    async def open(self) -> AsyncIterator[Opened]:
        async with _launched(self.launch(), self.label, self.show, self.http) as opened:
            yield opened


@contextlib.asynccontextmanager
async def _launched(
    run: Launch, label: str, shown: Mapping[str, Any], http: str = "httpx"
) -> AsyncIterator[Opened]:
    async with run as launched, contextlib.AsyncExitStack() as stack:
        llm = launched
        if http != "httpx" and not run.spec.in_process:  # measure through the chosen client
            llm = await stack.enter_async_context(
                measuring_client(
                    launched.adapter, run.base_url, http, model=run.spec.served_name, api_key=run.spec.key()
                )
            )
        else:
            http = "in-process" if run.spec.in_process else "httpx"
        info = await llm.info()

        def alive() -> str | None:
            code = run.returncode
            if code is None:
                return None
            tail = " | ".join(run.log_tail[-3:])
            return f"{run.adapter.name} exited with code {code} during the run (last log lines: {tail})"

        urls = [] if run.spec.in_process else [run.base_url]
        yield Opened(
            llm,
            TargetInfo(
                label=label,
                engine=run.adapter.name,
                urls=urls,
                model=info.model,
                engine_version=info.version,
                command=run.command().render(),
                settings=_jsonable(shown),
                client_http=http,
            ),
            sources={label: llm},
            alive=alive,
        )


def matrix(
    engines: Sequence[str],
    base: Mapping[str, Any],
    vary: Mapping[str, Sequence[Any]] | None = None,
    per_engine: Mapping[str, Mapping[str, Any]] | None = None,
    http: str = "auto",
) -> list[Launched]:
    """Every engine x every combination of the varied launch settings, as launch targets.

        matrix(["vllm", "sglang"], {"model": "/models/tiny"},
               vary={"tensor": [1, 2], "speculative": [None, "ngram:4"], "prefix_caching": [True, False]})

    Keys are LaunchSpec fields, plus ``tensor``/``pipeline``/``data``/``expert`` (parallel
    sizes) and ``speculative`` as ``"METHOD:TOKENS"`` or None. ``per_engine`` adds settings for
    one engine only (e.g. its interpreter or environment).

    Args:
        engines: The engines to launch.
        base: Settings every cell starts from.
        vary: Each setting to vary and its values; every combination is one cell.
        per_engine: Settings for one engine only, by engine name.
        http: The measuring HTTP client: "auto" (aiohttp when ``httpx-aiohttp`` is installed),
            "aiohttp" or "httpx".

    Returns:
        One Launched target per engine and combination.
    """
    axes = dict(vary or {})
    for key, values in axes.items():
        if not values:
            raise InvalidOptions(f"matrix axis {key!r} has no values")
    out = []
    for engine in engines:
        for combo in itertools.product(*axes.values()) if axes else [()]:
            varied = dict(zip(axes, combo, strict=True))
            settings = {**base, **(per_engine or {}).get(engine, {}), **varied}
            out.append(Launched(engine, settings, show=varied, http=http))
    return out


def check_launch(run: Launch) -> None:
    """Refuse a launch that cannot work here: engine not installed, or too few devices."""
    spec = run.spec
    if not spec.in_process and spec.python is None and not spec.prefix:
        raise InvalidOptions(
            f"{run.adapter.name} is not installed where unillm can find it: run "
            f"`unillm setup {run.adapter.name}` or pass python=<its interpreter>"
        )
    if spec.prefix:
        return  # a container or remote prefix: its devices are not this machine's
    p = spec.parallel
    needed = p.tensor * p.pipeline * p.data
    gpus, cpus = gpu_count(), cpu_count()
    have, what = (gpus, f"{gpus} GPU(s)") if gpus else (cpus, f"{cpus} CPU core(s) and no GPU")
    if needed > have:
        raise InvalidOptions(
            f"{run.adapter.name}: the layout tensor={p.tensor} x pipeline={p.pipeline} x data={p.data} "
            f"needs {needed} devices, but this machine has {what}. Use a smaller layout here"
        )


def gpu_count() -> int:
    """GPUs visible to engines here (``CUDA_VISIBLE_DEVICES`` when set, else ``nvidia-smi -L``)."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return len([d for d in visible.split(",") if d.strip() and d.strip() != "-1"])
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return 0
    try:
        listing = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return 0
    return sum(line.startswith("GPU ") for line in listing.stdout.splitlines())


def cpu_count() -> int:
    """CPU cores this process may use."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


async def reachable(llm: LLM, engine: str, url: str) -> None:
    """Raise EngineUnavailable (saying what to do) unless the engine answers at ``url``."""
    try:
        with anyio.fail_after(15):
            await llm.info()
    except TimeoutError:
        raise EngineUnavailable(
            f"{engine} at {url} did not answer within 15 s; is it running and is the URL right?"
        ) from None
    except EngineUnavailable as e:
        raise EngineUnavailable(f"{e}. Start the engine (or `unillm launch ...`), or check the URL") from None
    except UnillmError:
        raise


def _spec_settings(settings: Mapping[str, Any]) -> dict[str, Any]:
    """LaunchSpec fields from matrix settings (parallel sizes and speculative shorthands)."""
    from unillm.adapter.launch_spec import Parallel, Speculative

    out = dict(settings)
    sizes = {k: out.pop(k) for k in ("tensor", "pipeline", "data", "expert") if k in out}
    if sizes:
        current = out.get("parallel") or Parallel()
        base = current.model_dump() if isinstance(current, Parallel) else dict(current)
        out["parallel"] = Parallel(**{**base, **sizes})
    spec = out.get("speculative")
    if isinstance(spec, str):
        if spec.lower() in ("", "none", "off"):
            out["speculative"] = None
        else:
            method, _, tokens = spec.partition(":")
            try:
                out["speculative"] = Speculative(method=method, num_tokens=int(tokens or 4))
            except (ValueError, TypeError) as e:
                raise InvalidOptions(f"speculative={spec!r}: {e} (use METHOD:TOKENS, e.g. ngram:4)") from None
    return out


def _short(value: Any) -> str:
    return "off" if value is None or value is False else "on" if value is True else str(value)


def _jsonable(values: Mapping[str, Any]) -> dict[str, Any]:
    return {k: json.loads(json.dumps(v, default=str)) for k, v in values.items()}
