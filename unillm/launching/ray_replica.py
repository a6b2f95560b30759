"""The body of one replica's Ray actor: an engine supervised by unillm on the actor's node.

:mod:`unillm.launching.ray_cluster` wraps :class:`ReplicaHost` with ``ray.remote`` and places
one per replica; the actor starts the engine with the local :class:`~unillm.launching.supervisor.Launch`
(its readiness, log and teardown), bound on the node's address, and answers with its URL. The
engine's processes die with the actor (a watchdog, :mod:`unillm.launching.ray_watchdog`, stops
them once the actor is gone, also after a SIGKILL). This module imports
no Ray at import time: the node runs it inside a Ray worker, which has Ray already.
"""

from __future__ import annotations

import os
import pickle
import tempfile
from dataclasses import dataclass
from pathlib import Path

from unillm.adapter.launch_spec import LaunchSpec
from unillm.errors import LaunchError, UnillmError
from unillm.launching.ray_watchdog import start_detached
from unillm.launching.supervisor import Launch


@dataclass(frozen=True)
class ReplicaReady:
    """A replica that answers: where, on which node, and the settings it resolved there.

    Args:
        url: The engine's base URL (the node's address and a port free there).
        node_id: The Ray node the actor runs on.
        node_ip: That node's address.
        pid: The engine's process id on the node.
        log_path: The engine's log file on the node.
        spec: The launch settings as resolved on the node (port, interpreter, CPU recipe).
        takes_images: Whether the model reads images (None: unknown), read on the node.
    """

    url: str
    node_id: str
    node_ip: str
    pid: int | None
    log_path: str
    spec: LaunchSpec
    takes_images: bool | None


@dataclass(frozen=True)
class ReplicaFailed:
    """A replica whose engine did not start: the error the supervisor raised, to raise again.

    Args:
        error: The supervisor's error (a LaunchError when the engine exited or never answered).
        node_ip: The node it failed on.
    """

    error: UnillmError
    node_ip: str


class ReplicaHost:
    """One engine on the actor's node. Created by Ray as an actor, never directly.

    Args:
        engine: The adapter's name.
        spec: What to start; ``host`` None-like values are replaced by the node's address.
        host: The address to bind; None: the node's address as Ray knows it.
    """

    def __init__(self, engine: str, spec: LaunchSpec, host: str | None) -> None:
        import ray

        self.node_id = ray.get_runtime_context().get_node_id()
        self.node_ip: str = host or ray.util.get_node_ip_address()  # type: ignore[no-untyped-call]
        self.engine, self.spec = engine, spec.model_copy(update={"host": self.node_ip})
        self.launch: Launch | None = None
        # the engine dies with this actor, workers included (see unillm.launching.ray_watchdog)
        start_detached(os.getpid())

    async def start(self) -> ReplicaReady | ReplicaFailed:
        """Start the engine and wait until it answers (the supervisor's readiness).

        Returns:
            Where it answers, or the error that stopped it (the engine already stopped).
        """
        try:
            spec = self.spec
            if spec.ray_address is not None:  # the engine's workers join this actor's cluster
                spec = spec.model_copy(update={"ray_address": _gcs_address()})
            self.launch = Launch(
                self.engine,
                spec,
                progress=None,
                log_path=Path(tempfile.gettempdir())
                / f"unillm-{self.engine}-ray-{self.node_ip}-{id(self)}.log",
            )
            llm = await self.launch.__aenter__()
        except UnillmError as e:
            return ReplicaFailed(error=portable(e), node_ip=self.node_ip)
        ready = ReplicaReady(
            url=self.launch.base_url,
            node_id=self.node_id,
            node_ip=self.node_ip,
            pid=self.launch.pid,
            log_path=str(self.launch.log_path),
            spec=self.launch.spec,
            takes_images=llm.takes_images,
        )
        await llm.aclose()  # the driver talks to the engine; the actor only supervises it
        return ready

    async def trouble(self) -> str | None:
        """What is known to be wrong with the engine (its exit, a dead worker), or None."""
        return self.launch.trouble() if self.launch is not None else None

    async def stop(self) -> None:
        """Stop the engine (SIGTERM, then SIGKILL, to its process group)."""
        if self.launch is not None:
            await self.launch.__aexit__(None, None, None)
            self.launch = None


def portable(error: UnillmError) -> UnillmError:
    """``error`` if it survives pickling (Ray ships it to the driver), else a LaunchError with its text.

    Args:
        error: An error raised on the node.

    Returns:
        An error the driver can raise as is.
    """
    try:
        pickle.loads(pickle.dumps(error))
    except Exception:
        return LaunchError(str(error), command="(on the Ray node)", log_tail=[])
    return error


def _gcs_address() -> str:
    import ray

    return str(ray.get_runtime_context().gcs_address)
