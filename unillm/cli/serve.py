"""Serve a launch until Ctrl-C or SIGTERM, saying where it serves and where its key is."""

from __future__ import annotations

import signal
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from unillm.launching.fleet_launch import FleetLaunch
    from unillm.launching.ray_cluster import RayLaunch
    from unillm.launching.supervisor import Launch


def serve(run: Launch | FleetLaunch | RayLaunch) -> int:
    """Start ``run`` and serve until Ctrl-C or SIGTERM (the same clean teardown)."""
    import anyio

    def stop_on_sigterm(signum: int, frame: object) -> None:
        raise KeyboardInterrupt  # same clean teardown as Ctrl-C

    signal.signal(signal.SIGTERM, stop_on_sigterm)

    async def serving() -> None:
        async with run as llm:
            info = await llm.info()
            print(
                f"[unillm] {llm.engine} {info.version or ''} serving {info.model!r} at "
                f"{_where(run)} ({_key_note(run)}). Ctrl-C stops it.",
                file=sys.stderr,
            )
            await anyio.sleep_forever()

    anyio.run(serving)
    return 0


def _where(run: Launch | FleetLaunch | RayLaunch) -> str:
    from unillm.launching.ray_cluster import RayLaunch
    from unillm.launching.supervisor import Launch

    if isinstance(run, RayLaunch):
        nodes = ", ".join(f"{r.url} (node {r.node_ip}, log there: {r.log_path})" for r in run.ready)
        return f"Ray replicas {nodes}"
    logs = [run.log_path] if isinstance(run, Launch) else [x.log_path for x in run.launches]
    return f"{run.base_url}; log{'s' if len(logs) > 1 else ''}: {', '.join(map(str, logs))}"


def _key_note(run: Launch | FleetLaunch | RayLaunch) -> str:
    """Where a generated API key can be read (never printed): a 0600 file beside the log."""
    import tempfile
    from pathlib import Path

    from unillm.launching.ray_cluster import RayLaunch
    from unillm.launching.supervisor import Launch

    key = run.spec.key()
    if key is None:
        return "no API key"
    if isinstance(run, RayLaunch):  # the engines' logs are on their nodes
        log = Path(tempfile.gettempdir()) / f"{run.actor_names[0].rsplit('-', 1)[0]}.log"
    else:
        log = run.log_path if isinstance(run, Launch) else run.launches[-1].log_path
    path = log.with_suffix(".key")
    path.touch(mode=0o600)
    path.chmod(0o600)
    path.write_text(key + "\n")
    return f"API key in {path}"
