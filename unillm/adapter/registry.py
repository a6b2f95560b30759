"""Adapters found through the ``unillm.adapters`` entry points: by name, or given as objects."""

from __future__ import annotations

import re
from functools import cache
from typing import Any

from unillm.adapter.base import Adapter
from unillm.errors import InvalidOptions, UnknownEngine

ENTRY_POINT_GROUP = "unillm.adapters"
#: The core distribution's name (the import name is ``unillm``; ``unillm`` on the index is another project).
DISTRIBUTION = "unillm-sdk"


# A root extra that installs an adapter distribution: ``unillm-<engine>[...] @ ... ; extra == "<engine>"``.
_ENGINE_EXTRA = re.compile(r"^unillm-(?P<dist>[A-Za-z0-9._-]+).*extra\s*==\s*['\"](?P<extra>[^'\"]+)['\"]")


def _normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


@cache
def first_party_engines() -> tuple[str, ...]:
    """Engines whose adapter ships with unillm, each installed by the extra of the same name.

    Read from the installed ``unillm-sdk`` distribution's extras (each ``unillm-sdk[<engine>]`` that
    installs ``unillm-<engine>``), so no list of engines is kept by hand.

    Returns:
        The engine names, sorted (``"tensorrt_llm"``, not the extra's normalized spelling).
    """
    from importlib.metadata import PackageNotFoundError, requires

    try:
        requirements = requires(DISTRIBUTION) or []
    except PackageNotFoundError:  # pragma: no cover - running from a tree that is not installed
        return ()
    engines = set()
    for requirement in requirements:
        found = _ENGINE_EXTRA.match(requirement)
        if found and _normalized(found["dist"]) == _normalized(found["extra"]):
            engines.add(_normalized(found["extra"]).replace("-", "_"))
    return tuple(sorted(engines))


@cache
def _entry_points() -> dict[str, Any]:
    from importlib.metadata import entry_points

    return {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)}


def installed_engines() -> list[str]:
    """Names of every engine whose adapter is installed."""
    return sorted(_entry_points())


def adapter_for(engine: str | Adapter) -> Adapter:
    """The adapter for an engine name (e.g. "vllm") or an :class:`Adapter` instance, as is."""
    if isinstance(engine, Adapter):
        return engine
    if not isinstance(engine, str):
        raise InvalidOptions(
            f"engine must be an engine name such as 'vllm' (installed: "
            f"{', '.join(installed_engines()) or 'none'}) or an Adapter, got {engine!r}"
        )
    return get_adapter(engine)


@cache
def get_adapter(engine: str) -> Adapter:
    """The adapter registered for ``engine`` (e.g. "vllm")."""
    ep = _entry_points().get(engine.lower())
    if ep is None:
        raise UnknownEngine(_unknown_engine_message(engine))
    cls = ep.load()
    adapter = cls() if isinstance(cls, type) else cls
    if not isinstance(adapter, Adapter):
        raise UnknownEngine(f"entry point {ep.value!r} for {engine!r} is not a unillm Adapter")
    return adapter


def _unknown_engine_message(engine: str) -> str:
    from difflib import get_close_matches

    name = engine.lower()
    have = ", ".join(installed_engines()) or "none"
    message = f"no unillm adapter is installed for engine {engine!r} (installed: {have}). "
    first_party = first_party_engines()
    if _normalized(name).replace("-", "_") in first_party:
        return message + f"Install it: pip install 'unillm-sdk[{name}]'"
    known = sorted({*first_party, *installed_engines()})
    close = get_close_matches(name, known, 1)
    hint = f"Did you mean {close[0]!r}? " if close else ""
    return (
        message + f"{hint}unillm knows {', '.join(map(repr, known))} (pip install "
        "'unillm-sdk[<engine>]'); another engine needs a third-party adapter registered under "
        f"the entry-point group {ENTRY_POINT_GROUP!r}"
    )
