"""Routes and signals: what a semantic router matches, declared as validated data (no I/O).

    Route(name="code", utterances=["How do I reverse a list in Python?"], keywords=["git"])
    Route(name="chat", utterances=["Hi there!"], lora="smalltalk")

A simple route matches when the prompt is close enough to one of its utterances (cosine
similarity >= ``threshold``) or contains one of its keywords. Routes imported from vLLM
Semantic Router keep its richer form: named signals combined by AND/OR/NOT conditions.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

DEFAULT_THRESHOLD = 0.4  # only for a signal whose threshold is neither given nor fitted yet


class KeywordSignal(BaseModel):
    """Fires when the text contains ``any`` / ``all`` / ``none`` of the keywords (whole words)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(min_length=1)
    keywords: tuple[str, ...] = Field(min_length=1)
    mode: Literal["any", "all", "none"] = "any"
    case_sensitive: bool = False


class EmbeddingSignal(BaseModel):
    """Fires when the text's similarity to the candidates reaches ``threshold``.

    ``max`` is the best candidate's cosine similarity, ``mean`` their mean; ``blend`` (what a
    route's utterances use) mixes the best candidate, their centroid and ``description`` on
    vectors centred on all routes' examples (see :class:`unillm.semantic.scoring.Scoring`).
    ``threshold=None`` is fitted from the examples (leave-one-out) when the router is built.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(min_length=1)
    candidates: tuple[str, ...] = Field(min_length=1)
    threshold: float | None = Field(DEFAULT_THRESHOLD, ge=-1, le=1)
    aggregation: Literal["max", "mean", "blend"] = "max"
    description: str = ""


class Condition(BaseModel):
    """A signal reference (``signal="code"``) or an ``and`` / ``or`` / ``not`` of conditions."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    signal: str | None = None
    op: Literal["and", "or", "not"] | None = None
    of: tuple[Condition, ...] = ()

    @model_validator(mode="after")
    def _shape(self) -> Condition:
        if (self.signal is None) == (self.op is None):
            raise ValueError("a condition is either signal=<name> or op='and'|'or'|'not' with of=[...]")
        if self.op is not None and not self.of:
            raise ValueError(f"condition op={self.op!r} needs at least one condition in of=[...]")
        if self.op == "not" and len(self.of) != 1:
            raise ValueError("condition op='not' takes exactly one condition")
        return self

    def signals(self) -> set[str]:
        """Every signal name this condition refers to."""
        if self.signal is not None:
            return {self.signal}
        return set().union(*(c.signals() for c in self.of))

    def holds(self, fired: set[str]) -> bool:
        """True when the condition holds for the set of fired signal names.

        Args:
            fired: The names of the signals that fired for a request.
        """
        if self.signal is not None:
            return self.signal in fired
        if self.op == "and":
            return all(c.holds(fired) for c in self.of)
        if self.op == "or":
            return any(c.holds(fired) for c in self.of)
        return not self.of[0].holds(fired)


class Route(BaseModel):
    """One destination and when to take it.

    ``utterances``/``keywords``/``threshold`` declare the simple form; ``when`` (with the router's
    named ``signals``) the general one. Without ``threshold`` the router fits one from the
    utterances (leave-one-out against the other routes'); ``description`` (else the name) is an
    extra signal of what the route is about. Where it goes: ``target`` names an entry of the router's
    targets (an LLM or Fleet; default: the router's main one), ``lora``/``model`` pick a LoRA
    adapter or another served model there. Higher ``priority`` wins when several routes match;
    equal priorities go to the best similarity.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(min_length=1)
    utterances: tuple[str, ...] = ()
    keywords: tuple[str, ...] = ()
    threshold: float | None = Field(None, ge=-1, le=1)
    priority: int = 0
    when: Condition | None = None
    target: str | None = None
    lora: str | None = None
    model: str | None = None
    description: str = ""

    @field_validator("utterances", "keywords")
    @classmethod
    def _no_blank(cls, values: tuple[str, ...]) -> tuple[str, ...]:
        if any(not v.strip() for v in values):
            raise ValueError("utterances and keywords must be non-blank strings")
        return values

    def own_signals(self) -> list[KeywordSignal | EmbeddingSignal]:
        """The signals the simple form declares (named after the route)."""
        out: list[KeywordSignal | EmbeddingSignal] = []
        if self.utterances:
            out.append(
                EmbeddingSignal(
                    name=f"{self.name}#utterances",
                    candidates=self.utterances,
                    threshold=self.threshold,
                    aggregation="blend",
                    description=self.description or self.name.replace("_", " ").replace("-", " "),
                )
            )
        if self.keywords:
            out.append(KeywordSignal(name=f"{self.name}#keywords", keywords=self.keywords))
        return out

    def condition(self) -> Condition | None:
        """When this route matches: ``when``, else any of its own signals (None: never)."""
        if self.when is not None:
            return self.when
        own = [Condition(signal=s.name) for s in self.own_signals()]
        if not own:
            return None
        return own[0] if len(own) == 1 else Condition(op="or", of=tuple(own))


class RouteSet(BaseModel):
    """Validated routes: unique names, known signals, a default that exists.

    ``default`` is taken when no route matches (None: the router's main target, unrouted).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    routes: tuple[Route, ...] = Field(min_length=1)
    signals: tuple[KeywordSignal | EmbeddingSignal, ...] = ()
    default: str | None = None

    @model_validator(mode="after")
    def _consistent(self) -> RouteSet:
        names = [r.name for r in self.routes]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"duplicate route name(s): {', '.join(dupes)}")
        signal_names = [s.name for s in self.all_signals()]
        dupes = sorted({n for n in signal_names if signal_names.count(n) > 1})
        if dupes:
            raise ValueError(f"duplicate signal name(s): {', '.join(dupes)}")
        known = set(signal_names)
        for route in self.routes:
            condition = route.condition()
            if condition is None and route.name != self.default:
                raise ValueError(
                    f"route {route.name!r} has no utterances, keywords or when= "
                    "condition, so it can never match (only the default route may)"
                )
            missing = sorted((condition.signals() if condition else set()) - known)
            if missing:
                raise ValueError(f"route {route.name!r} refers to unknown signal(s) {missing}")
        if self.default is not None and self.default not in names:
            raise ValueError(f"default route {self.default!r} is not one of the routes {names}")
        return self

    def all_signals(self) -> list[KeywordSignal | EmbeddingSignal]:
        """Declared signals plus those of every simple-form route."""
        return [*self.signals, *(s for r in self.routes for s in r.own_signals())]

    def embedding_signals(self) -> list[EmbeddingSignal]:
        """The signals that need embeddings."""
        return [s for s in self.all_signals() if isinstance(s, EmbeddingSignal)]

    def route(self, name: str) -> Route:
        """The route called ``name``.

        Args:
            name: The route's name (one of the set's).
        """
        return next(r for r in self.routes if r.name == name)


def route_set(data: Any) -> RouteSet:
    """A RouteSet from a mapping (e.g. a config table); pydantic errors become readable."""
    return RouteSet.model_validate(data)
