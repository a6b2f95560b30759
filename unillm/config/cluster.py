"""The ``[launch]`` keys that say where, how many and in what roles, not what: the placement.

    [launch]
    model = "Qwen/Qwen2.5-0.5B-Instruct"
    replicas = 2                   # engines serving the model, routed by the top-level `policy`
    # disaggregation = {prefill = 1, decode = 1, transfer = "nixl"}   # prefill/decode instead
    # router = "vllm-router"       # a router process in front (a local launch; needs it for PD)
    [launch.cluster]               # place them on a Ray cluster (unillm.Ray)
    kind = "ray"
    address = "10.0.0.1:6379"
    placement = "STRICT_SPREAD"

The same keys for every target: a local launch (:func:`unillm.from_config`), a Ray cluster
(``[launch.cluster]``) and ``unillm deploy kubernetes`` (which ignores ``[launch.cluster]`` and
``router``: the cluster's scheduler routes there). Pure: nothing connects to the cluster.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from pydantic import ValidationError

from unillm.adapter.launch_spec import Disaggregation
from unillm.errors import InvalidOptions, validation_problems
from unillm.launching.ray_plan import Ray
from unillm.launching.routers import get_router

__all__ = [
    "CLUSTER_KINDS",
    "MOVED_DEPLOY_KEYS",
    "PLACEMENT_KEYS",
    "Placement",
    "cluster_from_table",
    "refuse_moved_deploy_keys",
    "split_launch",
]

#: ``[launch]`` keys that are not LaunchSpec fields.
PLACEMENT_KEYS = ("replicas", "disaggregation", "router", "cluster")
CLUSTER_KINDS = ("ray",)
_PD_EXAMPLE = 'disaggregation = {prefill = 1, decode = 1, transfer = "nixl"}'
#: ``[deploy]`` keys of earlier versions, and where each lives now (with an example).
MOVED_DEPLOY_KEYS = {
    "replicas": ("[launch]", "replicas = 2"),
    "disaggregation": ("[launch]", _PD_EXAMPLE),
    "policy": ("the config's top level (before any table)", 'policy = "prefix"'),
}


@dataclass(frozen=True)
class Placement:
    """What ``[launch]`` says besides the engine's settings: how many engines, in what roles, where.

    Attributes:
        replicas: Engines serving the model (``[launch] replicas``, 1 when absent).
        disaggregation: Prefill/decode engine counts instead of ``replicas``; None: no roles.
        router: The router process a local launch starts in front; None: routed client-side.
        cluster: The Ray cluster to place the engines on (``[launch.cluster]``); None: this machine.
    """

    replicas: int = 1
    disaggregation: Disaggregation | None = None
    router: str | None = None
    cluster: Ray | None = None

    @property
    def single(self) -> bool:
        """Whether this is one engine on this machine (no fleet, router or cluster)."""
        return self == Placement()

    def check_launch(self) -> None:
        """Refuse what :func:`unillm.launch` cannot start from this placement, naming the keys.

        Raises:
            InvalidOptions: ``disaggregation`` or ``router`` with ``[launch.cluster]``, which a Ray
                launch (replicas in actors, routed client-side) cannot do, or ``disaggregation``
                on this machine without the ``router`` that pairs prefill and decode engines.
        """
        if self.cluster is None and self.disaggregation is not None and self.router is None:
            raise InvalidOptions(
                "[launch] disaggregation needs a router to pair each request's prefill and decode "
                'engines: add router = "vllm-router" (or "smg") to [launch]'
            )
        if self.cluster is not None:
            for key, value in (("disaggregation", self.disaggregation), ("router", self.router)):
                if value is not None:
                    raise InvalidOptions(
                        f"[launch] {key} with [launch.cluster]: a Ray launch places replicas routed "
                        f"client-side, with no prefill/decode roles or router process; remove {key}, or "
                        "remove [launch.cluster] to launch on this machine"
                    )


def split_launch(launch: Mapping[str, Any]) -> tuple[dict[str, Any], Placement]:
    """Separate ``[launch]`` into the engine's settings and the placement.

    Args:
        launch: The ``[launch]`` table (for one engine: per-engine tables merged already).

    Returns:
        The LaunchSpec settings, and the replicas, prefill/decode roles, router and cluster.

    Raises:
        InvalidOptions: A bad value of a placement key (the message names it), or ``replicas``
            and ``disaggregation`` together.
    """
    settings = {k: v for k, v in launch.items() if k not in PLACEMENT_KEYS}
    replicas = launch.get("replicas", 1)
    if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 1:
        raise InvalidOptions(f"[launch] replicas = {replicas!r}: give a whole number of at least 1")
    pd = _disaggregation(launch["disaggregation"]) if "disaggregation" in launch else None
    if pd is not None and replicas != 1:
        raise InvalidOptions(
            f"[launch] has replicas = {replicas} and disaggregation: give one of them; the prefill and "
            "decode counts are the engines"
        )
    router = _router(launch["router"]) if "router" in launch else None
    table = launch.get("cluster")
    cluster = None if table is None else cluster_from_table(table)
    return settings, Placement(replicas, pd, router, cluster)


def _disaggregation(table: Any) -> Disaggregation:
    if not isinstance(table, Mapping):
        raise InvalidOptions(f"[launch] disaggregation = {table!r}: give a table, {_PD_EXAMPLE}")
    try:
        return Disaggregation.model_validate(dict(table))
    except ValidationError as e:  # Disaggregation's own message names each field
        problems = validation_problems(e).removeprefix("invalid Disaggregation: ")
        raise InvalidOptions(f"[launch] disaggregation: {problems} (e.g. {_PD_EXAMPLE})") from None


def _router(name: Any) -> str:
    if not isinstance(name, str):
        raise InvalidOptions(f'[launch] router = {name!r}: give a router\'s name, router = "vllm-router"')
    try:
        return get_router(name).name
    except InvalidOptions as e:
        raise InvalidOptions(f"[launch] router: {e}") from None


def cluster_from_table(table: Any) -> Ray:
    """A :class:`~unillm.Ray` from ``[launch.cluster]`` (``kind = "ray"`` and Ray's settings).

    Args:
        table: The ``[launch.cluster]`` table.

    Returns:
        The cluster settings.

    Raises:
        InvalidOptions: Not a table, an unknown kind or key, or a value Ray refuses.
    """
    if not isinstance(table, Mapping):
        raise InvalidOptions('[launch.cluster] must be a table: kind = "ray", address = "head:6379"')
    kind = table.get("kind")
    if kind not in CLUSTER_KINDS:
        raise InvalidOptions(
            f"[launch.cluster] kind = {kind!r}: the kinds are {', '.join(map(repr, CLUSTER_KINDS))}"
        )
    known = {f.name for f in fields(Ray)}
    unknown = sorted(set(table) - known - {"kind"})
    if unknown:
        raise InvalidOptions(
            f"[launch.cluster] has unknown keys {', '.join(unknown)}; Ray's keys: {', '.join(sorted(known))}"
        )
    return Ray(**{k: v for k, v in table.items() if k != "kind"})


def refuse_moved_deploy_keys(deploy: Mapping[str, Any]) -> None:
    """Refuse ``[deploy] replicas / policy / disaggregation``, saying where each key lives now.

    A deployment reads them where a local or Ray launch does, so one file serves every target.

    Args:
        deploy: The ``[deploy]`` table.

    Raises:
        InvalidOptions: The first moved key found, with its new place and an example.
    """
    for key, (where, example) in MOVED_DEPLOY_KEYS.items():
        if key in deploy:
            raise InvalidOptions(
                f"[deploy] {key}: {key} goes in {where} ({example}): the same key a local or Ray "
                "launch reads, so one config serves every target; [deploy] holds only "
                "[deploy.kubernetes]"
            )
