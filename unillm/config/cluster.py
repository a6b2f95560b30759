"""The ``[launch]`` keys that say where and how many, not what: ``replicas`` and ``[launch.cluster]``.

    [launch]
    model = "Qwen/Qwen2.5-0.5B-Instruct"
    replicas = 2
    [launch.cluster]          # place them on a Ray cluster (unillm.Ray)
    kind = "ray"
    address = "10.0.0.1:6379"
    placement = "STRICT_SPREAD"

Pure: the table is read and checked here; nothing connects to the cluster.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields
from typing import Any

from unillm.errors import InvalidOptions
from unillm.launching.ray_plan import Ray

#: ``[launch]`` keys that are not LaunchSpec fields.
PLACEMENT_KEYS = ("replicas", "cluster")
CLUSTER_KINDS = ("ray",)


def split_launch(launch: Mapping[str, Any]) -> tuple[dict[str, Any], int, Ray | None]:
    """Separate ``[launch]`` into the engine's settings, the replica count and the cluster.

    Args:
        launch: The ``[launch]`` table (for one engine: per-engine tables merged already).

    Returns:
        The LaunchSpec settings, ``replicas`` (1 when absent) and the cluster (None: this machine).

    Raises:
        InvalidOptions: A replica count that is not a positive whole number, or a bad cluster table.
    """
    settings = {k: v for k, v in launch.items() if k not in PLACEMENT_KEYS}
    replicas = launch.get("replicas", 1)
    if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 1:
        raise InvalidOptions(f"[launch] replicas = {replicas!r}: give a whole number of at least 1")
    table = launch.get("cluster")
    return settings, replicas, None if table is None else cluster_from_table(table)


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
