"""Adapters found through the ``unillm.adapters`` entry points: by name, or given as objects."""

from __future__ import annotations

from functools import cache
from typing import Any

from unillm.adapter.base import Adapter
from unillm.errors import InvalidOptions, UnknownEngine

ENTRY_POINT_GROUP = "unillm.adapters"


# Engines whose adapter ships with unillm, each installed by the extra of the same name.
FIRST_PARTY_ENGINES = ("vllm", "sglang", "tgi", "mlx", "llamacpp", "ollama", "tensorrt_llm")


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
    if name in FIRST_PARTY_ENGINES:
        return message + f"Install it: pip install 'unillm[{name}]'"
    known = sorted({*FIRST_PARTY_ENGINES, *installed_engines()})
    close = get_close_matches(name, known, 1)
    hint = f"Did you mean {close[0]!r}? " if close else ""
    return (
        message + f"{hint}unillm knows {', '.join(map(repr, known))} (pip install "
        "'unillm[<engine>]'); another engine needs a third-party adapter registered under "
        f"the entry-point group {ENTRY_POINT_GROUP!r}"
    )
