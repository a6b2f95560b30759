"""Bring routes from other routers' configuration: vLLM Semantic Router and LiteLLM's auto-router.

    imported = from_vsr(yaml.safe_load(open("config.yaml")))
    imported.unmapped                      # what has no unillm equivalent: reported, never dropped silently
    router = SemanticRouter(imported.routes, embedder=..., llm=...)

Pure functions of the parsed files. vLLM Semantic Router's keyword and embedding signals and
its decisions (priorities, AND/OR/NOT rules, the first model reference with its LoRA) map; the
other signal kinds (domain classifiers, PII, jailbreak, language, ...) and plugins are listed
in ``unmapped``. LiteLLM's auto-router file (semantic-router's route layer JSON) maps each
route's utterances and score threshold; the route name becomes the route's ``model``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ValidationError

from unillm.errors import InvalidOptions
from unillm.semantic.routes import Condition, EmbeddingSignal, KeywordSignal, Route, RouteSet

_KEYWORD_MODES = {"OR": "any", "AND": "all", "NOR": "none"}


class Imported(BaseModel):
    """Routes taken from another router's config, and everything that did not map."""

    routes: RouteSet
    unmapped: list[str]

    def to_config(self) -> dict[str, Any]:
        """The routes as unillm's ``[router]`` config table (e.g. to write as TOML)."""
        data = self.routes.model_dump(mode="json", exclude_defaults=True)
        return {"router": data}


def from_vsr(config: Mapping[str, Any]) -> Imported:
    """Routes from a vLLM Semantic Router config (v0.3 ``routing:`` block or top-level signals).

    Args:
        config: The parsed YAML of a vLLM Semantic Router config.

    Returns:
        The routes, and what did not map.

    Raises:
        InvalidOptions: The config is not a mapping.
    """
    if not isinstance(config, Mapping):
        raise InvalidOptions("a vLLM Semantic Router config is a mapping (the parsed YAML)")
    block = config.get("routing", config)
    signals_in = block.get("signals") or {}
    keywords, unmapped = _vsr_keywords(signals_in.get("keywords") or [])
    embeddings, skipped = _vsr_embeddings(signals_in.get("embeddings") or [])
    unmapped += skipped + _vsr_unmapped(config, signals_in)
    signals: list[KeywordSignal | EmbeddingSignal] = [*keywords, *embeddings]
    routes, default, skipped = _vsr_routes(block.get("decisions") or [], {s.name for s in signals})
    return _imported(routes, signals, default, unmapped + skipped)


def _vsr_keywords(entries: list[Mapping[str, Any]]) -> tuple[list[KeywordSignal], list[str]]:
    """vLLM Semantic Router's keyword signals, and those whose operator has no unillm mode."""
    signals: list[KeywordSignal] = []
    unmapped: list[str] = []
    for raw in entries:
        mode = _KEYWORD_MODES.get(str(raw.get("operator", "OR")).upper())
        if mode is None:
            unmapped.append(f"keyword signal {raw.get('name')!r}: operator {raw.get('operator')!r}")
            continue
        signals.append(
            KeywordSignal(
                name=f"keyword:{raw['name']}",
                keywords=tuple(raw["keywords"]),
                mode=mode,
                case_sensitive=bool(raw.get("case_sensitive", False)),
            )
        )
    return signals, unmapped


def _vsr_embeddings(entries: list[Mapping[str, Any]]) -> tuple[list[EmbeddingSignal], list[str]]:
    """vLLM Semantic Router's embedding signals, and the aggregations replaced by max."""
    signals: list[EmbeddingSignal] = []
    unmapped: list[str] = []
    for raw in entries:
        aggregation = raw.get("aggregation_method", "max")
        if aggregation not in ("max", "mean"):
            unmapped.append(
                f"embedding signal {raw.get('name')!r}: aggregation {aggregation!r} "
                "(unillm has max and mean; used max)"
            )
            aggregation = "max"
        signals.append(
            EmbeddingSignal(
                name=f"embedding:{raw['name']}",
                candidates=tuple(raw["candidates"]),
                threshold=float(raw["threshold"]),
                aggregation=aggregation,
            )
        )
    return signals, unmapped


def _vsr_unmapped(config: Mapping[str, Any], signals_in: Mapping[str, Any]) -> list[str]:
    """The other signal kinds (classifiers) and the top-level sections unillm has no use for."""
    unmapped: list[str] = []
    for kind, entries in signals_in.items():
        if kind not in ("keywords", "embeddings") and entries:
            names = ", ".join(str(e.get("name")) for e in entries if isinstance(e, Mapping))
            unmapped.append(f"{kind} signals ({names}): needs vLLM Semantic Router's classifiers")
    for key in ("listeners", "providers", "global", "plugins", "semantic_cache", "prompt_guard"):
        if config.get(key):
            unmapped.append(f"top-level {key!r} (unillm routes in-process; configure targets instead)")
    return unmapped


def _vsr_routes(
    decisions: list[Mapping[str, Any]], known: set[str]
) -> tuple[list[Route], str | None, list[str]]:
    """The decisions as routes, highest priority first; the match-all one's name; what did not map."""
    routes: list[Route] = []
    default: str | None = None
    unmapped: list[str] = []
    for raw in sorted(decisions, key=lambda d: -int(d.get("priority", 0))):
        name = str(raw.get("name"))
        try:
            when = _condition(raw.get("rules") or {}, known)
        except _Unmappable as e:
            unmapped.append(f"decision {name!r}: {e} (route left out)")
            continue
        route, notes = _vsr_route(raw, name, when)
        unmapped += notes
        if when is None:
            if default is None:
                default = name
            else:
                unmapped.append(f"decision {name!r}: a second match-all decision (only one default)")
                continue
        routes.append(route)
    return routes, default, unmapped


def _vsr_route(raw: Mapping[str, Any], name: str, when: Condition | None) -> tuple[Route, list[str]]:
    """One decision as a route to its first model reference, and the parts of it that did not map."""
    refs = raw.get("modelRefs") or raw.get("model_refs") or []
    ref = refs[0] if refs else {}
    unmapped: list[str] = []
    if len(refs) > 1:
        unmapped.append(
            f"decision {name!r}: {len(refs) - 1} more modelRefs (unillm routes to one "
            "target per route; put the others in a Fleet)"
        )
    unmapped += [f"decision {name!r}: {extra}" for extra in ("algorithm", "plugins") if raw.get(extra)]
    if ref.get("use_reasoning"):
        unmapped.append(f"decision {name!r}: use_reasoning (set the reasoning option per request)")
    route = Route(
        name=name,
        description=str(raw.get("description", "")),
        priority=int(raw.get("priority", 0)),
        when=when,
        model=ref.get("model"),
        lora=ref.get("lora_name"),
    )
    return route, unmapped


def from_litellm(route_file: Mapping[str, Any], default_model: str | None = None) -> Imported:
    """Routes from LiteLLM's auto-router file (``auto_router_config_path``; a route layer JSON).

    ``default_model`` is LiteLLM's ``auto_router_default_model``: it becomes a default route.

    Args:
        route_file: The parsed JSON of LiteLLM's auto-router file.
        default_model: LiteLLM's ``auto_router_default_model``; it becomes the default route.

    Returns:
        The routes, and what did not map.

    Raises:
        InvalidOptions: The file has no ``routes`` list.
    """
    if not isinstance(route_file, Mapping) or not isinstance(route_file.get("routes"), list):
        raise InvalidOptions("a LiteLLM auto-router file is a JSON object with a 'routes' list")
    unmapped = []
    if route_file.get("encoder_name") or route_file.get("encoder_type"):
        unmapped.append(
            f"encoder {route_file.get('encoder_type')}/{route_file.get('encoder_name')} "
            "(choose the embedder in [router.embedder])"
        )
    routes = []
    for raw in route_file["routes"]:
        name = str(raw.get("name"))
        for extra in ("function_schemas", "llm", "metadata"):
            if raw.get(extra):
                unmapped.append(f"route {name!r}: {extra}")
        threshold = raw.get("score_threshold")
        routes.append(
            Route(
                name=name,
                utterances=tuple(raw.get("utterances") or ()),
                model=name,
                description=str(raw.get("description") or ""),
                **({"threshold": float(threshold)} if threshold is not None else {}),
            )
        )
    if default_model is not None and default_model not in {r.name for r in routes}:
        routes.append(Route(name=default_model, model=default_model))
    return _imported(routes, [], default_model, unmapped)


class _Unmappable(Exception):
    pass


def _condition(rules: Mapping[str, Any], known: set[str]) -> Condition | None:
    if "type" in rules and "operator" not in rules:  # a bare leaf
        return _leaf(rules, known)
    conditions = rules.get("conditions") or []
    if not conditions:
        return None  # match-all
    op = str(rules.get("operator", "AND")).lower()
    if op not in ("and", "or", "not"):
        raise _Unmappable(f"operator {rules.get('operator')!r}")
    children = tuple(_leaf(c, known) if "type" in c else _condition(c, known) for c in conditions)
    if any(c is None for c in children):
        raise _Unmappable("an empty nested condition")
    return Condition(op=op, of=tuple(c for c in children if c is not None))


def _leaf(node: Mapping[str, Any], known: set[str]) -> Condition:
    kind = {"keywords": "keyword", "embeddings": "embedding"}.get(node["type"], node["type"])
    name = f"{kind}:{node.get('name')}"
    if name not in known:
        raise _Unmappable(
            f"condition on {node['type']} signal {node.get('name')!r}, which unillm cannot evaluate"
        )
    return Condition(signal=name)


def _imported(
    routes: list[Route],
    signals: list[KeywordSignal | EmbeddingSignal],
    default: str | None,
    unmapped: list[str],
) -> Imported:
    if not routes:
        raise InvalidOptions(
            "nothing to import: no route mapped" + (f" ({'; '.join(unmapped)})" if unmapped else "")
        )
    try:
        return Imported(
            routes=RouteSet(routes=tuple(routes), signals=tuple(signals), default=default), unmapped=unmapped
        )
    except ValidationError as e:
        raise InvalidOptions(f"the imported routes are inconsistent: {e}") from None
