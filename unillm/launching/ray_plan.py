"""Where a launch's engines go on a Ray cluster: the settings (:class:`Ray`) and the placement plan.

    plan = ray_plan("vllm", spec, replicas=2, cluster=Ray("10.0.0.1:6379"), run="ab12")
    plan.bundles   # [{"CPU": 1.0, "GPU": 1.0}, {"CPU": 1.0, "GPU": 1.0}]: one bundle per replica
    plan.strategy  # "SPREAD": replicas on different nodes where the cluster has them

Pure: no Ray import, no I/O. :mod:`unillm.launching.ray_cluster` carries the plan out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from unillm.adapter.launch_spec import LaunchSpec
from unillm.errors import InvalidOptions

Placement = Literal["SPREAD", "STRICT_SPREAD", "PACK", "STRICT_PACK"]
PLACEMENTS: tuple[Placement, ...] = ("SPREAD", "STRICT_SPREAD", "PACK", "STRICT_PACK")


@dataclass(frozen=True)
class Ray:
    """Run a launch's engines on a Ray cluster: ``unillm.launch(..., cluster=unillm.Ray("head:6379"))``.

    Each replica is one Ray actor holding one engine that unillm supervises on the actor's node
    (bound on that node's address); a placement group with one bundle per replica spreads them
    over the nodes. Every node needs unillm with the ``ray`` extra and the engine (``unillm setup
    vllm``), and the same Ray version as this process.

    Args:
        address: The cluster's address (``"host:6379"``, ``"ray://host:10001"``), or ``"auto"``
            for the cluster this machine belongs to.
        placement: How the replicas' bundles are placed: ``"SPREAD"`` (different nodes where
            possible), ``"STRICT_SPREAD"`` (different nodes or not at all), ``"PACK"``,
            ``"STRICT_PACK"``.
        cpus: CPUs reserved per replica; None: from the layout (one per device on CPU, else one).
        gpus: GPUs reserved per replica; None: from the layout (tensor x pipeline x data),
            none on a CPU launch or a cluster without GPUs.
        host: The address engines listen on; None: each node's address as Ray knows it.
        namespace: The Ray namespace of the actors unillm creates.
        placement_timeout: Seconds to wait for the cluster to place the replicas.

    Raises:
        InvalidOptions: An empty address, an unknown placement or a resource count below 0.
    """

    address: str = "auto"
    placement: Placement = "SPREAD"
    cpus: float | None = None
    gpus: float | None = None
    host: str | None = None
    namespace: str = "unillm"
    placement_timeout: float = 60.0

    def __post_init__(self) -> None:
        if not isinstance(self.address, str) or not self.address.strip():
            raise InvalidOptions("unillm.Ray(address=...) needs the cluster's address, e.g. 'head:6379'")
        if self.placement not in PLACEMENTS:
            raise InvalidOptions(
                f"unillm.Ray(placement={self.placement!r}): use one of {', '.join(PLACEMENTS)}"
            )
        for name in ("cpus", "gpus"):
            value = getattr(self, name)
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, int | float) or value < 0
            ):
                raise InvalidOptions(f"unillm.Ray({name}={value!r}): give a number of at least 0, or None")
        if self.placement_timeout <= 0:
            raise InvalidOptions("unillm.Ray(placement_timeout=...) must be above 0 seconds")


@dataclass(frozen=True)
class RayPlan:
    """What a launch asks of the cluster.

    Args:
        bundles: One resource bundle per replica (its actor and engine run in it); empty when
            the engine's own Ray executor places its workers.
        strategy: The placement group's strategy.
        names: Each replica actor's name (in the cluster's namespace).
        engine_executor: True when the engine spreads each replica's workers over the cluster
            itself (vLLM's ``--distributed-executor-backend ray``); the actor then reserves nothing.
    """

    bundles: tuple[dict[str, float], ...]
    strategy: Placement
    names: tuple[str, ...]
    engine_executor: bool


def replica_bundle(spec: LaunchSpec, cluster: Ray, *, cluster_gpus: bool = True) -> dict[str, float]:
    """The resources one replica reserves: its devices from the layout, unless ``cluster`` says.

    On CPU (a ``cpu=True`` launch, or a cluster without GPUs) each device of the layout is a CPU;
    elsewhere a replica takes one CPU and a GPU per device.

    Args:
        spec: The launch settings (``parallel`` and ``cpu``).
        cluster: The Ray settings (``cpus=``/``gpus=`` override the layout).
        cluster_gpus: Whether the cluster has any GPU.

    Returns:
        A Ray resource bundle, e.g. ``{"CPU": 1.0, "GPU": 2.0}``.
    """
    p = spec.parallel
    devices = float(p.tensor * p.pipeline * p.data)
    on_cpu = spec.cpu or not cluster_gpus
    cpus = cluster.cpus if cluster.cpus is not None else devices if on_cpu else 1.0
    gpus = cluster.gpus if cluster.gpus is not None else 0.0 if on_cpu else devices
    bundle = {"CPU": float(cpus)}
    if gpus:
        bundle["GPU"] = float(gpus)
    return bundle


def ray_plan(
    engine: str,
    spec: LaunchSpec,
    *,
    replicas: int,
    cluster: Ray,
    run: str,
    executor: bool,
    cluster_gpus: bool = True,
) -> RayPlan:
    """The placement of ``replicas`` engines of ``spec`` on the cluster.

    Args:
        engine: The adapter's name (part of the actors' names).
        spec: What every replica starts with.
        replicas: How many engines.
        cluster: The Ray settings.
        run: A short id of this launch, so two launches' actors never share a name.
        executor: Whether the engine runs each replica's workers through its own Ray executor
            (a layout over several devices on an engine that has one).
        cluster_gpus: Whether the cluster has any GPU (None of them: replicas run on CPUs).

    Returns:
        The plan: bundles, strategy, actor names.

    Raises:
        InvalidOptions: Fewer than one replica, or settings a Ray launch cannot honour.
    """
    if replicas < 1:
        raise InvalidOptions(f"replicas must be at least 1, got {replicas}")
    if spec.in_process or spec.nodes is not None or spec.pd is not None:
        raise InvalidOptions(
            "a Ray launch places separate engine servers on the cluster's nodes: in_process, "
            "nodes= and pd= do not apply (Ray spreads a layout over nodes itself: parallel=...)"
        )
    names = tuple(f"unillm-{engine}-{run}-{i}" for i in range(replicas))
    bundle = replica_bundle(spec, cluster, cluster_gpus=cluster_gpus)
    bundles = () if executor else (bundle,) * replicas
    return RayPlan(bundles=bundles, strategy=cluster.placement, names=names, engine_executor=executor)
