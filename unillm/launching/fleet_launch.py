"""Start several engines at once, optionally behind a router, and stop them all afterwards.

    async with unillm.launch("vllm", model="/models/qwen", replicas=2) as fleet:
        r = await fleet.generate("Hi", max_tokens=8)          # client-side routing

    async with unillm.launch("vllm", model="/models/qwen", replicas=2, router="smg",
                             policy="prefix") as llm:
        r = await llm.generate("Hi", max_tokens=8)             # through the router

    async with unillm.launch("vllm", model="/models/qwen", router="vllm-router",
                             disaggregation=unillm.Disaggregation(prefill=1, decode=1)) as llm:
        ...                                                    # prefill/decode workers (GPU)

Each engine is one :class:`~unillm.launching.supervisor.Launch` (own port and log, the same readiness,
progress and teardown); they start concurrently. A router is supervised the same way, with its
command from :mod:`unillm.launching.routers`, and is ready when its health check answers and one tiny
request went through it. Teardown stops the router and every engine, also when one failed to
start.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import anyio
import anyio.abc
import sniffio

from unillm.adapter.base import Adapter
from unillm.adapter.launch_spec import Disaggregation, LaunchCommand, LaunchSpec, PDRole, TransferBackend
from unillm.adapter.registry import get_adapter
from unillm.client.priority_gate import Reserve
from unillm.errors import InvalidOptions, LaunchError, UnsupportedFeature
from unillm.fleet.picker import Policy
from unillm.fleet.prompt_tokens import PromptTokens
from unillm.launching.lifecycle import Stoppable
from unillm.launching.model_facts import chat_template
from unillm.launching.ports import free_port
from unillm.launching.routers import PrefillWorker, RouterSpec, RouterTool, get_router
from unillm.launching.supervisor import (
    ClientSettings,
    Launch,
    ProgressHook,
    check_cpus,
    new_api_key,
    print_progress,
)

if TYPE_CHECKING:
    from unillm.client.llm import LLM
    from unillm.fleet.fleet import Fleet
    from unillm.fleet.kv_events import KVEvents


class FleetLaunch(Stoppable):
    """Engines (replicas, or prefill and decode workers) and maybe a router, started together.

    Create it with ``unillm.launch(engine, ..., replicas=N | disaggregation=..., router=...)``.
    ``async with`` gives a :class:`~unillm.fleet.fleet.Fleet` (no router) or an ``LLM`` pointed at
    the router. ``commands()`` shows every command without starting anything.
    ``replica_env`` adds environment per engine, in order, e.g. each replica its own GPUs:
    ``[{"CUDA_VISIBLE_DEVICES": "0"}, {"CUDA_VISIBLE_DEVICES": "1"}]``; ``replica_cpus`` gives
    each its own CPU cores (``LaunchSpec.cpus``). With the CPU recipe (``cpu=True``) and neither
    ``cpus`` nor ``replica_cpus`` set, the cores are split among the engines
    (:func:`split_cpus`): CPU engines sharing every core spin their thread pools against each
    other (two vLLM-CPU replicas on two cores decoded ~8x slower than on one core each).

    Args:
        engine: The adapter's name ("vllm", ...) or an adapter instance.
        spec: What every engine starts with (model, parallelism, ...).
        replicas: How many engines to start.
        router: A router process in front ("vllm-router" or "smg"); None routes client-side.
        policy: How the fleet (or the router) picks an engine per request.
        disaggregation: Prefill/decode engine counts to start behind the router.
        router_python: The interpreter that has the router; None: its managed env (``unillm setup``).
        replica_env: Extra environment per engine, one mapping per replica, in order.
        replica_cpus: The cores of each engine, one list per replica, in order.
        progress: Called with each launch step; None is silent.
        client: How the connected client talks to the engines; its reserve counts per engine
            (behind a router: its capacity defaults to every decoding engine's ``max_num_seqs``).
        log_dir: The folder for one log per process; None: the temp folder.

    Raises:
        InvalidOptions: Settings that do not fit together (e.g. a router without replicas).
    """

    def __init__(
        self,
        engine: str | Adapter,
        spec: LaunchSpec,
        *,
        replicas: int = 1,
        router: str | None = None,
        policy: Policy = "round_robin",
        disaggregation: Disaggregation | None = None,
        router_python: str | None = None,
        replica_env: Sequence[Mapping[str, str]] = (),
        replica_cpus: Sequence[Sequence[int]] = (),
        progress: ProgressHook | None = print_progress,
        log_dir: Path | None = None,
        client: ClientSettings = ClientSettings(),
    ) -> None:
        self.adapter = get_adapter(engine) if isinstance(engine, str) else engine
        _check_layout(spec, replicas, router, disaggregation)
        self.policy: Policy = policy
        self.disaggregation = disaggregation
        self.tool: RouterTool | None = get_router(router) if router is not None else None
        if self.tool is not None:
            self.tool.policy(policy)  # refuse a policy the router lacks before anything starts
        self.log_dir = log_dir or Path(tempfile.gettempdir())
        self._client = client  # its reserve: each engine's, or (with a router) the router's
        self._progress = progress
        if spec.api_key == "auto":  # one key for every engine (and the router in front)
            spec = spec.model_copy(update={"api_key": new_api_key()})
        self.spec = spec
        engine_port = None if self.tool is not None else spec.port
        count = replicas if disaggregation is None else disaggregation.prefill + disaggregation.decode
        ports = _distinct_ports(count, spec.host, first=engine_port)
        self.roles: list[PDRole | None] = _roles(disaggregation, spec.host, count, self.adapter.name)
        if replica_env and len(replica_env) != count:
            raise InvalidOptions(
                f"replica_env has {len(replica_env)} entries for {count} engines: give one mapping per engine"
            )
        envs = [{**spec.env, **extra} for extra in replica_env] or [spec.env] * count
        cores = _replica_cores(spec, count, replica_cpus)
        self.kv_endpoints, self.kv_events_note, self._prompt_tokens = self._kv_events_plan(spec, ports)
        self.kv_replay_endpoints = [e.removesuffix(".sock") + "-replay.sock" for e in self.kv_endpoints]
        engine_args = self._engine_args(spec, count)
        self.engines: list[Launch] = [
            Launch(
                self.adapter,
                spec.model_copy(
                    update={"port": port, "pd": role, "env": env, "cpus": cpus, "extra_args": args}
                ),
                progress=progress,
                client=replace(client, reserve=None) if router is not None else client,
                log_path=self.log_dir / f"unillm-{self.adapter.name}-{port}.log",
            )
            for port, role, env, cpus, args in zip(ports, self.roles, envs, cores, engine_args, strict=True)
        ]
        self.router: Launch | None = self._router_launch(router_python) if self.tool else None
        self._fleet: Fleet | None = None

    def _engine_args(self, spec: LaunchSpec, count: int) -> list[list[str]]:
        """Each engine's ``extra_args``: the spec's, then its KV-cache events flags when planned."""
        pairs = zip(self.kv_endpoints, self.kv_replay_endpoints, strict=True)
        flags = [self.adapter.kv_events_args(e, r) or [] for e, r in pairs] or [[]] * count
        return [[*spec.extra_args, *f] for f in flags]

    def _kv_events_plan(
        self, spec: LaunchSpec, ports: Sequence[int]
    ) -> tuple[list[str], str | None, PromptTokens | None]:
        """Each engine's KV-cache events endpoint when a client-side ``cache_aware`` fleet can read
        them (else none), why not when it cannot (None: not asked, or in use) and the tokenizer
        that matches them to prompts."""
        if self.policy != "cache_aware" or self.tool is not None:
            return [], None, None
        if any(a.startswith("--kv-events-config") for a in spec.extra_args):
            return [], "the engines' own --kv-events-config is kept: routing by the prefix tree", None
        endpoints = [f"ipc://{tempfile.gettempdir()}/unillm-kv-{os.getpid()}-{port}.sock" for port in ports]
        if self.adapter.kv_events_args(endpoints[0], endpoints[0]) is None:
            return (
                [],
                f"{self.adapter.name} publishes no KV-cache events unillm reads: routing by the prefix tree",
                None,
            )
        try:
            tokens = PromptTokens.from_folder(spec.model, chat_template(spec.model))
            import msgpack  # noqa: F401
            import zmq  # noqa: F401
        except (InvalidOptions, ImportError) as e:
            why = str(e) if isinstance(e, InvalidOptions) else "pip install 'unillm-sdk[kv-events]'"
            return [], f"KV-cache events not used ({why}): routing by the prefix tree", None
        return endpoints, None, tokens

    # -- rendering (no side effects) --------------------------------------------------------
    def commands(self) -> list[tuple[str, LaunchCommand]]:
        """Every command that will run, labelled (``.render()`` masks secrets)."""
        out = [(self._label(i), launch.command()) for i, launch in enumerate(self.engines)]
        if self.router is not None:
            out.append((self.router.name, self.router.command()))
        return out

    @property
    def launches(self) -> list[Launch]:
        """Every supervised process: the engines, then the router."""
        return [*self.engines, *([self.router] if self.router is not None else [])]

    @property
    def base_url(self) -> str:
        """Where clients connect: the router, else the first engine."""
        return (self.router or self.engines[0]).base_url

    def _label(self, i: int) -> str:
        role = self.roles[i]
        if role is None:
            return f"{self.adapter.name} replica {i}"
        same = [r for r in self.roles[:i] if r is not None and r.role == role.role]
        return f"{self.adapter.name} {role.role} {len(same)}"

    def _router_launch(self, router_python: str | None) -> Launch:
        assert self.tool is not None
        urls = [e.base_url for e in self.engines]
        prefill, decode = [], []
        for url, role in zip(urls, self.roles, strict=True):
            if role is not None and role.role == "prefill":
                prefill.append(PrefillWorker(url, _bootstrap_port(self.adapter.name, role)))
            elif role is not None:
                decode.append(url)
        return router_launch(
            self.adapter,
            self.tool.name,
            () if self.disaggregation else urls,
            policy=self.policy,
            prefill=prefill,
            decode=decode,
            transfer=self.disaggregation.transfer if self.disaggregation else None,
            spec=self.spec.model_copy(update={"port": self.spec.port or free_port(self.spec.host)}),
            router_python=router_python,
            progress=self._progress,
            log_dir=self.log_dir,
            client=replace(self._client, reserve=self._router_reserve(len(decode) or len(urls))),
        )

    def _router_reserve(self, decoders: int) -> Reserve | None:
        """The reserve of the client pointed at the router: the decoding engines' slots together."""
        per_engine = self.spec.max_num_seqs
        reserve = self._client.reserve
        if reserve is None or not isinstance(reserve, Reserve) or per_engine is None:
            return reserve
        return reserve.for_engine(per_engine * decoders)

    # -- lifecycle --------------------------------------------------------------------------
    async def __aenter__(self) -> Fleet | LLM:
        if self.disaggregation is not None:
            _require_gpu(self.adapter.name)
        if self.tool is not None and self.router is not None and self.router.spec.python is None:
            raise LaunchError(
                f"{self.tool.name} is not installed: run `unillm setup {self.tool.name}`",
                command=self.router.command().render(),
                log_tail=[],
            )
        try:
            llms = await self._start_engines()
            if self.router is not None:
                return await self.router.__aenter__()
            from unillm.fleet.fleet import Fleet

            self._fleet = Fleet(llms, policy=self.policy, kv_events=await self._kv_events())
            return self._fleet
        except BaseException:
            await self._stop()
            raise

    async def _kv_events(self) -> KVEvents | None:
        """The engines' KV-cache events, subscribed (None when the plan has no endpoints)."""
        if not self.kv_endpoints or self._prompt_tokens is None:
            return None
        if sniffio.current_async_library() != "asyncio":
            self.kv_events_note = "KV-cache events are read on asyncio only: routing by the prefix tree"
            return None
        from unillm.fleet.kv_events import KVEvents

        events = KVEvents(self.kv_endpoints, self._prompt_tokens, self.kv_replay_endpoints)
        await events.start()
        return events

    async def _start_engines(self) -> list[LLM]:
        llms: list[LLM | None] = [None] * len(self.engines)
        errors: list[Exception] = []

        async def start(i: int, tg: anyio.abc.TaskGroup) -> None:
            try:
                llms[i] = await self.engines[i].__aenter__()
            except Exception as e:  # the first failure stops the others' start
                errors.append(e)
                tg.cancel_scope.cancel()

        async with anyio.create_task_group() as tg:
            for i in range(len(self.engines)):
                tg.start_soon(start, i, tg)
        if errors:
            raise errors[0]
        return [llm for llm in llms if llm is not None]

    async def _stop(self) -> None:
        with anyio.CancelScope(shield=True):
            if self._fleet is not None:
                await self._fleet.aclose()
            if self.router is not None:
                await self.router.__aexit__(None, None, None)
            async with anyio.create_task_group() as tg:
                for launch in self.engines:
                    tg.start_soon(launch.__aexit__, None, None, None)


def router_launch(
    engine: str | Adapter,
    router: str,
    workers: Sequence[str] = (),
    *,
    spec: LaunchSpec,
    policy: Policy = "round_robin",
    prefill: Sequence[PrefillWorker] = (),
    decode: Sequence[str] = (),
    transfer: TransferBackend | None = None,
    router_python: str | None = None,
    progress: ProgressHook | None = print_progress,
    log_dir: Path | None = None,
    client: ClientSettings = ClientSettings(),
) -> Launch:
    """A router in front of engines that already run; ``async with`` gives an LLM pointed at it.

        run = router_launch("vllm", "smg", ["http://a:8000", "http://b:8000"], policy="prefix",
                            spec=LaunchSpec(model="m", api_key=SecretStr(key), port=30000))
        async with run as llm: ...

    ``spec`` gives the model (and served name) the engines serve, the key they require, and the
    router's host, port (None: a free one) and ready timeout. Supervised like an engine: ready
    once its health check answers and one tiny request went through it.
    """
    adapter = get_adapter(engine) if isinstance(engine, str) else engine
    tool = get_router(router)
    python = router_python or _router_python(tool.name)
    port = spec.port or free_port(spec.host)
    rspec = RouterSpec(
        workers=tuple(workers),
        policy=policy,
        host=spec.host,
        port=port,
        api_key=spec.key(),
        python=python,
        metrics_port=free_port(spec.host),
        prefill=tuple(prefill),
        decode=tuple(decode),
        transfer=transfer,
        engine=adapter.name,
    )
    log_dir = log_dir or Path(tempfile.gettempdir())
    return Launch(
        adapter,
        _router_process_spec(spec, port, python),
        command=tool.command(rspec),
        name=tool.name,
        progress=progress,
        log_path=log_dir / f"unillm-{tool.name}-{port}.log",
        client=client,
    )


def _router_process_spec(spec: LaunchSpec, port: int, python: str | None) -> LaunchSpec:
    """What supervising the router needs of ``spec``: the model it serves, its address, the key."""
    return LaunchSpec(
        model=spec.model,
        served_name=spec.served_name,
        host=spec.host,
        port=port,
        api_key=spec.api_key,
        python=python,
        ready_timeout=spec.ready_timeout,
    )


def split_cpus(count: int) -> list[list[int]] | None:
    """This process's cores split evenly among ``count`` engines (None: fewer cores than engines,
    or a platform that cannot pin).

        unillm.launch("vllm", **settings, replicas=2, replica_cpus=split_cpus(2) or ())

    Args:
        count: How many engines share the cores.

    Returns:
        One list of cores per engine, in order (the first engines get one more when uneven).
    """
    if not hasattr(os, "sched_getaffinity"):
        return None
    usable = sorted(os.sched_getaffinity(0))
    if count < 1 or len(usable) < count:
        return None
    share, extra = divmod(len(usable), count)
    bounds = [i * share + min(i, extra) for i in range(count + 1)]
    return [usable[bounds[i] : bounds[i + 1]] for i in range(count)]


def _replica_cores(
    spec: LaunchSpec, count: int, replica_cpus: Sequence[Sequence[int]]
) -> list[list[int] | None]:
    """Each engine's ``cpus``: given per replica, else the spec's, else split on the CPU recipe."""
    if replica_cpus:
        if len(replica_cpus) != count:
            raise InvalidOptions(
                f"replica_cpus has {len(replica_cpus)} entries for {count} engines: give one list per engine"
            )
        for cores in replica_cpus:
            check_cpus(cores)  # before anything starts
        return [list(c) for c in replica_cpus]
    if spec.cpus is None and spec.cpu and count > 1:
        split = split_cpus(count)
        if split is not None:
            return list(split)
    return [spec.cpus] * count


def _check_layout(
    spec: LaunchSpec, replicas: int, router: str | None, disaggregation: Disaggregation | None
) -> None:
    """Refuse a fleet layout that does not fit together.

    Raises:
        InvalidOptions: No replicas, replicas with disaggregation, disaggregation without a
            router, or a one-engine setting (in_process, nodes=, pd=).
    """
    if replicas < 1:
        raise InvalidOptions(f"replicas must be at least 1, got {replicas}")
    if disaggregation is not None and replicas != 1:
        raise InvalidOptions(
            "give either replicas=N or disaggregation=Disaggregation(prefill=P, "
            "decode=D), not both: the prefill and decode counts are the engines"
        )
    if disaggregation is not None and router is None:
        raise InvalidOptions(
            "prefill/decode disaggregation needs a router to pair each request's "
            "prefill and decode: pass router='vllm-router' or router='smg'"
        )
    if spec.in_process or spec.nodes is not None or spec.pd is not None:
        raise InvalidOptions(
            "a fleet launches separate engine servers: in_process, nodes= and pd= "
            "apply to one engine (use disaggregation= for prefill/decode roles)"
        )


def _distinct_ports(count: int, host: str, *, first: int | None) -> list[int]:
    """``count`` ports: ``first, first+1, ...`` when given, else distinct free ones."""
    if first is not None:
        return [first + i for i in range(count)]
    ports: list[int] = []
    while len(ports) < count:
        port = free_port(host)
        if port not in ports:
            ports.append(port)
    return ports


def _roles(pd: Disaggregation | None, host: str, count: int, engine: str) -> list[PDRole | None]:
    """Each engine's PD role with its own KV-transfer port (none without disaggregation).

    Every prefill engine runs a bootstrap / side-channel server on its port; decode engines
    need one only for vLLM's NIXL (each worker has a side channel).
    """
    if pd is None:
        return [None] * count
    ports = _distinct_ports(count, host, first=None)
    decode_port = engine == "vllm" and pd.transfer == "nixl"
    roles = [PDRole(role="prefill", transfer=pd.transfer, port=port) for port in ports[: pd.prefill]]
    return [
        *roles,
        *(
            PDRole(role="decode", transfer=pd.transfer, port=port if decode_port else None)
            for port in ports[pd.prefill :]
        ),
    ]


def _bootstrap_port(engine: str, role: PDRole) -> int | None:
    """The bootstrap port a router passes with a prefill worker (NIXL on vLLM has none)."""
    if engine == "vllm" and role.transfer == "nixl":
        return None
    return role.port


def _router_python(name: str) -> str | None:
    from unillm.launching.envs import managed_python

    found = managed_python(name)
    return str(found) if found is not None else None


def _require_gpu(engine: str) -> None:
    from unillm.launching.envs import has_gpu

    if not has_gpu():
        raise UnsupportedFeature(
            engine,
            "prefill/decode disaggregation",
            why="its KV-cache transfer (NIXL, Mooncake) "
            "moves GPU memory and no NVIDIA driver is visible here",
            alternative="Run it on GPU machines; `unillm launch ... --dry-run` shows the commands",
        )
