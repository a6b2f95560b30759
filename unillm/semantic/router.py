"""A semantic router used like an ``LLM``: each prompt goes to the route that fits it.

    router = SemanticRouter(
        [Route(name="code", utterances=["How do I reverse a list in Python?"], target="coder"),
         Route(name="chat", utterances=["Hi, how are you?"], lora="smalltalk")],
        embedder=EngineEmbedder(unillm.connect("vllm", "http://127.0.0.1:8001")),
        llm=unillm.connect("vllm", "http://127.0.0.1:8000"),
        targets={"coder": unillm.connect("vllm", ["http://10.0.0.5:8000", "http://10.0.0.6:8000"])},
        default="chat",
    )
    r = await router.generate(messages=[{"role": "user", "content": "Fix my SQL join"}])
    r.route.route, r.route.score          # "code", 0.62

``generate``/``stream`` embed the routing text (the last user message, or the prompt), pick a
route and send the request to that route's target with its LoRA or model. Route embeddings
are computed once per embedder and cached. Each routed call carries the decision as
``unillm.route.*`` attributes, so OpenTelemetry spans (``unillm.instrument()``) show it.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import AsyncIterator, Mapping, Sequence
from types import TracebackType
from typing import Any, Literal

import anyio
from typing_extensions import Self

from unillm import observe
from unillm.client.stream import ClosingStream
from unillm.content import content_text
from unillm.errors import InvalidOptions, UnillmError, validation_problems
from unillm.results import Completion, Delta, RouteDecision
from unillm.semantic.decide import SignalIndex, decide, decision_plan, index_texts
from unillm.semantic.embedders import Embedder, EmbeddingError
from unillm.semantic.routes import Route, RouteSet
from unillm.semantic.scoring import NO_REJECTION, REJECTED_SHARE_WARNING, Scoring
from unillm.semantic.vectors import numpy_module

RoutingText = Literal["last_user", "user", "all"]
_VECTORS: dict[tuple[str, str], list[float]] = {}  # route examples, per embedder key and text
_WARNED: set[tuple[str, float]] = set()  # (signal, threshold) pairs already warned about


class SemanticRouter:
    """Routes each request to the target of the route whose examples it resembles most.

    ``llm`` is the main target (routes without ``target=``, and the default when no route
    matches and ``default`` is None); ``targets`` names the others (``LLM`` or ``Fleet``).
    Without any target the router only decides (``route()``, evaluation).
    ``on_embedder_error="default"`` sends requests to the default route with a warning when
    the embedder fails; ``"raise"`` (the default) raises :class:`EmbeddingError`.

    Args:
        routes: The routes (or a validated RouteSet) to choose between.
        embedder: What embeds the request text and the routes' examples.
        llm: The main target: routes without ``target=`` and the unrouted default; None: none.
        targets: The other targets (LLM or Fleet) by name, as routes' ``target=`` name them.
        default: The route taken when none matches; None sends those requests to ``llm``.
        text: What is embedded: "last_user" message, every "user" message, or "all" messages
            (a prompt is embedded as is).
        on_embedder_error: "raise" raises EmbeddingError when the embedder fails; "default" warns
            and takes the default route.
        scoring: How routes' examples are weighed (fitted by :meth:`calibrate`); None: the defaults.

    Raises:
        InvalidOptions: Invalid routes, or a route whose target is not in ``targets``.
    """

    def __init__(
        self,
        routes: RouteSet | Sequence[Route],
        *,
        embedder: Embedder,
        llm: Any = None,
        targets: Mapping[str, Any] | None = None,
        default: str | None = None,
        text: RoutingText = "last_user",
        on_embedder_error: Literal["default", "raise"] = "raise",
        scoring: Scoring | None = None,
    ) -> None:
        if isinstance(routes, RouteSet):
            self.routes = routes if default is None else routes.model_copy(update={"default": default})
        else:
            from pydantic import ValidationError

            try:
                self.routes = RouteSet(routes=tuple(routes), default=default)
            except ValidationError as e:
                raise InvalidOptions(f"invalid routes: {validation_problems(e, '(routes)')}") from None
        self.embedder, self.llm, self.text, self.on_embedder_error = embedder, llm, text, on_embedder_error
        self.targets = dict(targets or {})
        for route in self.routes.routes:
            if route.target is not None and route.target not in self.targets:
                raise InvalidOptions(
                    f"route {route.name!r} targets {route.target!r}, which is not "
                    f"one of the targets {sorted(self.targets)}"
                )
        self._launch: Any = None
        self._siblings: dict[tuple[str | None, str], Any] = {}
        self._lock = anyio.Lock()
        self._index: SignalIndex | None = None
        self.scoring = scoring or Scoring()
        self._pinned: dict[str, float] | None = None  # thresholds from calibrate()

    def __repr__(self) -> str:
        return (
            f"SemanticRouter(routes={[r.name for r in self.routes.routes]}, "
            f"default={self.routes.default!r}, embedder={self.embedder.key!r})"
        )

    # -- lifecycle -------------------------------------------------------------------------
    async def __aenter__(self) -> Self:
        from unillm.launching.supervisor import Launch

        if isinstance(self.llm, Launch):  # from a config with a [launch] table: start it now
            self._launch, self.llm = self.llm, await self.llm.__aenter__()
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the embedder and every target's connections (and stop a launched main engine)."""
        closing = [self.embedder, *self.targets.values(), *self._siblings.values()]
        if self.llm is not None and self._launch is None:
            closing.append(self.llm)
        for thing in closing:
            await thing.aclose()
        if self._launch is not None:
            await self._launch.__aexit__(None, None, None)

    # -- deciding --------------------------------------------------------------------------
    async def index(self) -> SignalIndex:
        """The route examples' embeddings, computed once per embedder (and shared by routers).

        Everything a decision reads is made here, once: the index's scoring plan and the
        route set's decision plan, so the first decision costs what the others do.
        """
        if self._index is None:
            async with self._lock:
                if self._index is None:
                    signals = self.routes.embedding_signals()
                    vectors = await embed_cached(self.embedder, index_texts(signals))
                    decision_plan(self.routes)
                    self._index = _build_index(signals, vectors, self.scoring, self._pinned)
                    if self._index.probe is not None:
                        warn_about_costly_rejection(self._index, calibrated=set(self._pinned or ()))
                    else:
                        warn_about_strict_thresholds(self._index, calibrated=set(self._pinned or ()))
        return self._index

    async def embed_texts(self, texts: Sequence[str]) -> list[list[float]]:
        """The texts' vectors by this router's embedder (cached: each text is embedded once).

        Args:
            texts: The texts to embed.
        """
        return await embed_cached(self.embedder, texts)

    async def thresholds(self) -> dict[str, float]:
        """Every embedding signal's threshold in use (given, or fitted from the examples)."""
        index = await self.index()
        return {s.name: index.threshold(s) for s, _, _ in index.spans}

    async def fitted_routes(self) -> list[Route]:
        """The routes with the thresholds in use written in (for a config file: nothing refits)."""
        thresholds = await self.thresholds()
        return [
            r.model_copy(update={"threshold": thresholds[f"{r.name}#utterances"]})
            if r.utterances and r.threshold is None
            else r
            for r in self.routes.routes
        ]

    async def calibrate(self, samples: Sequence[Any], *, out_of_scope_recall: float | None = None) -> Any:
        """Fit the scoring weights and the thresholds to labelled prompts; report before and after.

        Tries a grid of :class:`Scoring` weights and, for each, the threshold (shared by the
        routes declared without one) that routes the most samples right; samples labelled with
        the default route (or None without one) teach it what belongs to no route. The router
        keeps the best; :meth:`fitted_routes` and ``router.scoring`` are what to save.

            await router.calibrate(samples)                            # the best balanced accuracy
            await router.calibrate(samples, out_of_scope_recall=0.9)   # refuse 90% of out-of-scope

        Args:
            samples: Labelled samples (``unillm.semantic.evaluation.Sample``, e.g. from load_samples).
            out_of_scope_recall: Refuse at least this share (0-1) of the out-of-scope samples
                (held out where the head learns from them), routing the most in-scope ones right
                otherwise; None: the cut with the best balanced accuracy.

        Returns:
            A :class:`~unillm.semantic.calibration.Calibration`: accuracy before and after, the choices.

        Raises:
            InvalidOptions: No samples, a label that is not one of the routes, or a recall
                outside (0, 1] or without out-of-scope samples.
        """
        from unillm.semantic.calibration import calibrate, check_labels, check_recall

        check_labels(self, samples)
        check_recall(self, samples, out_of_scope_recall)
        texts = [routing_text(s.text, s.messages, self.text) for s in samples]
        queries = await embed_cached(self.embedder, texts)
        vectors = await embed_cached(self.embedder, index_texts(self.routes.embedding_signals()))
        return await calibrate(self, samples, texts, queries, vectors, recall=out_of_scope_recall)

    def rescore(self, scoring: Scoring, thresholds: Mapping[str, float] | None = None) -> None:
        """Use other scoring weights (and fitted thresholds) from now on; vectors are not re-embedded.

        Args:
            scoring: The new weights.
            thresholds: Thresholds for signals declared without one; None refits them.
        """
        self.scoring, self._index = scoring, None
        self._pinned = None if thresholds is None else dict(thresholds)

    async def route(
        self, prompt: str | None = None, *, messages: Sequence[Mapping[str, Any]] | None = None
    ) -> RouteDecision:
        """Decide the route for a prompt or chat, without generating anything.

        Args:
            prompt: A plain-text prompt; or pass ``messages``.
            messages: Chat messages; which of them are embedded is the router's ``text`` setting.

        Returns:
            Which route matched (or the default), with its scores.
        """
        (decision,) = await self._route_texts([routing_text(prompt, messages, self.text)])
        return decision

    async def route_many(
        self,
        prompts: Sequence[str | None],
        *,
        messages: Sequence[Sequence[Mapping[str, Any]] | None] | None = None,
    ) -> list[RouteDecision]:
        """Decide the routes of many prompts with one embedding call (what evaluation uses).

        Example::

            decisions = await router.route_many(["How do I join two tables?", "Hi there!"])

        Args:
            prompts: Plain-text prompts (None where that item is a chat in ``messages``).
            messages: Per item, its chat messages or None; omitted: every item is a prompt.

        Returns:
            One decision per item, in order; each one's ``seconds`` is its share of the embedding
            call plus its own scoring.
        """
        chats = list(messages) if messages is not None else [None] * len(prompts)
        if len(chats) != len(prompts):
            raise InvalidOptions(f"{len(prompts)} prompts but {len(chats)} messages entries")
        return await self._route_texts(
            [routing_text(p, m, self.text) for p, m in zip(prompts, chats, strict=True)]
        )

    async def _route_texts(self, texts: list[str]) -> list[RouteDecision]:
        started = time.perf_counter()
        try:
            index = await self.index()
            vectors = await self.embedder.embed(texts) if index.spans and texts else None
        except EmbeddingError:
            raise
        except UnillmError as e:
            if self.on_embedder_error == "raise":
                raise EmbeddingError(f"the embedder {self.embedder.key} failed: {e}") from e
            warnings.warn(
                f"unillm semantic router: the embedder failed ({e}); using the default "
                f"route {self.routes.default!r}",
                RuntimeWarning,
                stacklevel=3,
            )
            waited = (time.perf_counter() - started) / max(1, len(texts))
            return [
                RouteDecision(route=self.routes.default, reason="fallback", seconds=waited) for _ in texts
            ]
        if vectors is not None and len(vectors) != len(texts):
            raise EmbeddingError(
                f"the embedder {self.embedder.key} returned {len(vectors)} vectors for {len(texts)} texts"
            )
        share = (time.perf_counter() - started) / max(1, len(texts))
        decisions = []
        for i, text in enumerate(texts):
            begun = time.perf_counter()
            scores: dict[str, float] = {}
            if vectors is not None:
                if len(vectors[i]) != index.dimension:
                    raise EmbeddingError(
                        f"the embedder {self.embedder.key} returned a {len(vectors[i])}-dimensional vector "
                        f"but the routes were embedded with {index.dimension} dimensions; the embedder's "
                        "model changed: build a new router (or clear the route cache)"
                    )
                scores = index.scores(vectors[i])
            seconds = share + time.perf_counter() - begun
            decisions.append(decide(self.routes, text, scores, seconds=seconds, thresholds=index.thresholds))
        return decisions

    def target_of(self, decision: RouteDecision) -> tuple[Any, dict[str, Any]]:
        """The client and the option overrides (``lora``) that a decision sends a request to.

        Args:
            decision: A decision from :meth:`route`.

        Returns:
            The target client and the options (``lora``/``model``) the route adds.
        """
        route = self.routes.route(decision.route) if decision.route is not None else None
        client = self.llm if route is None or route.target is None else self.targets[route.target]
        if client is None:
            raise InvalidOptions(
                f"route {decision.route!r} has no target: pass llm=... to the "
                "router (its main target) or give the route a target="
            )
        if route is not None and route.model is not None:
            client = self._sibling(route.target, client, route.model)
        overrides = {"lora": route.lora} if route is not None and route.lora else {}
        return client, overrides

    def _sibling(self, target: str | None, client: Any, model: str) -> Any:
        key = (target, model)
        if key not in self._siblings:
            if not hasattr(client, "clone"):
                raise InvalidOptions(f"{client!r} cannot serve another model; route with target= instead")
            self._siblings[key] = client.clone(model=model)
        return self._siblings[key]

    # -- generation ------------------------------------------------------------------------
    async def generate(
        self,
        prompt: str | None = None,
        *,
        messages: Sequence[Mapping[str, Any]] | None = None,
        **options: Any,
    ) -> Completion[Any]:
        """Route, then generate on the route's target; ``.route`` on the result says where.

        Args:
            prompt: A plain-text prompt; or pass ``messages``.
            messages: Chat messages; which of them are embedded is the router's ``text`` setting.
            **options: Per-call options for the target (as for :meth:`LLM.generate`); they win over the
                route's overrides.

        Returns:
            The target's completion, with ``.route`` set.
        """
        decision = await self.route(prompt, messages=messages)
        client, overrides = self.target_of(decision)
        with observe.attributes(route_attributes(decision)):
            completion: Completion[Any] = await client.generate(
                prompt, messages=messages, **{**overrides, **options}
            )
        completion.route = decision
        return completion

    def stream(
        self,
        prompt: str | None = None,
        *,
        messages: Sequence[Mapping[str, Any]] | None = None,
        **options: Any,
    ) -> RoutedStream:
        """Route, then stream from the route's target; ``stream.route`` says where (once started).

        Args:
            prompt: A plain-text prompt; or pass ``messages``.
            messages: Chat messages; which of them are embedded is the router's ``text`` setting.
            **options: Per-call options for the target (as for :meth:`LLM.generate`); they win over the
                route's overrides.

        Returns:
            A stream that routes when it starts; ``.route`` says where.
        """
        return RoutedStream(self, prompt, messages, options)

    def blocking(self) -> Any:
        """A blocking twin (``generate``/``stream`` without ``await``)."""
        from unillm.client.blocking import BlockingLLM

        return BlockingLLM(self)  # type: ignore[arg-type]


class RoutedStream(ClosingStream):
    """A stream whose route is decided when it starts; iterate it like ``LLM.stream``.

    Args:
        router: The router that decides the route when the stream starts.
        prompt: A plain-text prompt, or None with ``messages``.
        messages: Chat messages, or None with ``prompt``.
        options: Per-call options for the target.
    """

    def __init__(
        self,
        router: SemanticRouter,
        prompt: str | None,
        messages: Sequence[Mapping[str, Any]] | None,
        options: Mapping[str, Any],
    ) -> None:
        self._router, self._prompt, self._messages, self._options = router, prompt, messages, options
        self.route: RouteDecision | None = None
        self._inner: Any = None

    @property
    def text(self) -> str:
        """Text received so far for choice 0."""
        return self._inner.text if self._inner is not None else ""

    def __aiter__(self) -> AsyncIterator[Delta]:
        if self._iter is None:
            self._iter = self._run()
        return self._deltas(self._iter)

    async def _run(self) -> AsyncIterator[Delta]:
        self.route = await self._router.route(self._prompt, messages=self._messages)
        client, overrides = self._router.target_of(self.route)
        self._inner = client.stream(self._prompt, messages=self._messages, **{**overrides, **self._options})
        async with self._inner:
            deltas = self._inner.__aiter__()
            with observe.attributes(route_attributes(self.route)):  # seen when the call starts
                try:
                    first = await deltas.__anext__()
                except StopAsyncIteration:
                    return
            yield first
            async for delta in deltas:
                yield delta


def route_attributes(decision: RouteDecision) -> dict[str, Any]:
    """The decision as attributes of the call it routes (OpenTelemetry spans record them)."""
    attributes: dict[str, Any] = {
        "unillm.route.reason": decision.reason,
        "unillm.route.decision_seconds": decision.seconds,
    }
    if decision.route is not None:
        attributes["unillm.route.name"] = decision.route
    if decision.score is not None:
        attributes["unillm.route.score"] = decision.score
    return attributes


def routing_text(
    prompt: str | None, messages: Sequence[Mapping[str, Any]] | None, which: RoutingText = "last_user"
) -> str:
    """The text a router embeds: the prompt, or the last / every user message (or all messages)."""
    if prompt is not None:
        if not isinstance(prompt, str) or not prompt.strip():
            raise InvalidOptions("the prompt to route must be a non-empty string")
        return prompt
    if not messages:
        raise InvalidOptions("pass a prompt or messages=[...] to route")
    picked = [m for m in messages if which == "all" or m.get("role") == "user"]
    if which == "last_user":
        picked = picked[-1:]
    text = "\n".join(content_text(m.get("content")) for m in picked).strip()
    if not text:
        raise InvalidOptions(f"no text to route: the messages have no {which.replace('_', ' ')} text")
    return text


async def embed_cached(embedder: Embedder, texts: Sequence[str]) -> list[list[float]]:
    """Embeddings of ``texts``, asking the embedder only for those it has not embedded before."""
    missing = sorted({t for t in texts if (embedder.key, t) not in _VECTORS})
    if missing:
        for text, vector in zip(missing, await embedder.embed(missing), strict=True):
            _VECTORS[(embedder.key, text)] = vector
    return [_VECTORS[(embedder.key, t)] for t in texts]


def warn_about_strict_thresholds(index: SignalIndex, calibrated: set[str] | None = None) -> None:
    """Warn (once per signal and threshold) when a threshold rejects most of its own examples.

    Args:
        index: The index whose signals' thresholds are checked.
        calibrated: Signals whose threshold calibration chose on labelled prompts (not checked).
    """
    own, _ = index.leave_one_out()
    for signal, _, _ in index.spans:
        scores, threshold = own.get(signal.name), index.threshold(signal)
        if scores is None or (signal.name, threshold) in _WARNED or signal.name in (calibrated or ()):
            continue
        rejected = float((scores < threshold).mean())
        if rejected > REJECTED_SHARE_WARNING:
            _WARNED.add((signal.name, threshold))
            advice = (
                "its examples are further from each other than from other routes': add examples "
                "or run router.calibrate(samples)"
                if signal.threshold is None
                else "leave threshold unset to fit it, or run router.calibrate(samples)"
            )
            warnings.warn(
                f"unillm semantic router: {signal.name!r} has threshold {threshold:.2f}, which rejects "
                f"{rejected:.0%} of its own examples (each scored against the others), so its prompts "
                f"will mostly take the default route; {advice}",
                RuntimeWarning,
                stacklevel=3,
            )


def warn_about_costly_rejection(index: SignalIndex, calibrated: set[str] | None = None) -> None:
    """Warn (once per setting) when the probe's out-of-scope cut costs more than it can gain.

    On the examples, cross-validated, count the in-scope ones the thresholds reject (each should
    have gone to its route); the examples hold no out-of-scope prompt for the cut to win back
    (calibration, which sees some, chooses its own cut and is not checked).

    Args:
        index: An index with a probe.
        calibrated: Signals whose threshold calibration chose on labelled prompts (not checked).
    """
    np = numpy_module()
    names = [index.spans[i][0].name for i in index.heads]
    cuts = np.asarray([index.threshold(index.spans[i][0]) for i in index.heads])
    key = ("probe:" + ",".join(names), float(cuts.max(initial=-1.0)))
    if (cuts <= NO_REJECTION).all() or key in _WARNED or set(names) <= (calibrated or set()):
        return
    held, labels = index.held_out()
    rejected = int((held[np.arange(len(labels)), labels] < cuts[labels]).sum())
    if rejected == 0:
        return
    _WARNED.add(key)
    warnings.warn(
        f"unillm semantic router: the routes' thresholds reject {rejected} of {len(labels)} of their own "
        "examples (each scored by a head that did not learn from it) and no out-of-scope example shows "
        "what they would catch: unset the thresholds (no rejection), or run router.calibrate(samples) "
        "with out-of-scope samples (labelled with the default route) to fit a cut that pays",
        RuntimeWarning,
        stacklevel=3,
    )


def _build_index(
    signals: Sequence[Any],
    vectors: Sequence[Sequence[float]],
    scoring: Scoring,
    thresholds: Mapping[str, float] | None,
) -> SignalIndex:
    try:
        return SignalIndex.build(signals, vectors, scoring, thresholds)
    except ValueError as e:
        raise EmbeddingError(f"the embedder returned unusable vectors for the route examples: {e}") from None
