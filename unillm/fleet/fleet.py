"""A fleet: replicas of one model behind one object with the ``LLM`` API, routed client-side.

    fleet = unillm.connect("vllm", ["http://a:8000", "http://b:8000"], policy="prefix")
    async with fleet:
        r = await fleet.generate("You are a terse assistant. Q: 1+1?", max_tokens=8)
        async for d in fleet.stream("Hi", session="user-42"):   # same key -> same replica
            print(d.text, end="")
        print(fleet.stats())    # per replica: state, in flight, requests, errors, overloads

    fleet = unillm.Fleet([llm_a, llm_b], policy="least_load")    # from LLMs you built (owned)

Policies (see :mod:`unillm.fleet.picker`): ``round_robin``, ``least_load`` (requests in flight, streams
until closed, plus the engine's waiting queue from its metrics, scraped in the background at most
every ``metrics_interval`` seconds), ``prefix`` (consistent hashing with bounded load over the
first ``prefix_chars`` characters of the prompt or messages, so a shared prefix hits one engine's
prefix cache), ``session`` (``session="user-42"`` on a request; without a key, least load) and
``cache_aware`` (the replica holding the longest head of the prompt, unless it is too loaded:
:class:`~unillm.fleet.picker.CacheAware`; what each holds comes from its engine's KV-cache events
with ``kv_events=`` (:class:`~unillm.fleet.kv_events.KVEvents`: vLLM and SGLang publish them),
else from a bounded prefix tree per replica of what was sent to it).
A ``session=`` key pins its requests under every policy.

Failover: a request that fails before the engine answered (connection refused or reset, a
timeout before the headers, 429/503) is sent to another replica, each replica at most once per
request. A stream that has started is never retried: it ends in ``StreamInterrupted`` with its
partial text. Overload is not failure: a replica answering 429/503 gets nothing until
``max(Retry-After, own exponential backoff)`` has passed (Retry-After believed up to
``max_retry_after`` seconds, 300 by default; a health check it passes ends the cooldown); when
every replica cools down the caller gets ``Overloaded`` with the earliest ``retry_after``. An
unreachable replica is ejected and gets one trial request after a backoff (or comes back when
``health()`` sees it answer). The replicas' own retries are off (``RetryPolicy(attempts=1)``):
the fleet decides.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, TypeVar, cast

import anyio
import httpx
from pydantic import BaseModel, ConfigDict

from unillm.adapter.base import EngineInfo
from unillm.capabilities import Capabilities, Support, check
from unillm.client.calls import EmbedCall, Generates, TokenizeCall
from unillm.client.closing import AsyncClosing
from unillm.client.deadline import Deadline
from unillm.client.llm import LLM
from unillm.client.priority_gate import Reserve
from unillm.client.single_flight import SingleFlight
from unillm.client.stream import Stream
from unillm.client.transport import MAX_RETRY_AFTER, Pool, RetryPolicy, Timeouts
from unillm.errors import (
    EngineError,
    EngineTimeout,
    EngineUnavailable,
    FanOutFailed,
    InvalidOptions,
    NotFound,
    Overloaded,
    ReplicaMismatch,
    StreamInterrupted,
    UnillmError,
    UnsupportedFeature,
)
from unillm.fleet.picker import (
    Backoff,
    CacheAware,
    CacheState,
    Policy,
    Prompt,
    Replica,
    ReplicaPicker,
    ReplicaState,
)
from unillm.metrics import CombinedMetrics, EngineMetrics, Sample
from unillm.options import Options, Request, make_request
from unillm.results import Completion, Delta, Embeddings, LoraInfo, Tokens

if TYPE_CHECKING:
    from openai import AsyncOpenAI

    from unillm.client.blocking import BlockingLLM
    from unillm.fleet.kv_events import KVEvents

R = TypeVar("R")
NO_RETRY = RetryPolicy(attempts=1)
_LEVELS = {"no": 0, "emulated": 1, "native": 2}


class ReplicaStats(BaseModel):
    """Counters of one replica: how the fleet's traffic is balanced and how healthy it is."""

    model_config = ConfigDict(frozen=True)

    url: str
    state: ReplicaState
    in_flight: int
    requests: int
    errors: int
    overloads: int
    available_in_s: float | None
    waiting: float | None
    last_error: str | None


class FleetStats(BaseModel):
    """Per-replica counters of a fleet: ``fleet.stats().replicas[0].requests``."""

    model_config = ConfigDict(frozen=True)

    policy: str
    replicas: list[ReplicaStats]

    def replica(self, url: str) -> ReplicaStats:
        """The counters of the replica at ``url``.

        Args:
            url: The replica's base URL, as printed (``llm.base_url``).

        Raises:
            InvalidOptions: No replica has that URL.
        """
        for r in self.replicas:
            if r.url == url.rstrip("/"):
                return r
        raise InvalidOptions(f"{url!r} is not a replica of this fleet ({[r.url for r in self.replicas]})")


@dataclass(eq=False)
class _Member:
    """One replica as the fleet keeps it."""

    llm: LLM  # what the fleet sends to (its own retries off: the fleet decides)
    given: LLM  # as passed to Fleet(...); closed with the fleet too
    route: Replica  # its routing state and counters, shared with the picker
    verified: bool = False  # its engine and model were checked against the fleet's
    no_queue: bool = False  # its metrics have no waiting-queue gauge: never scraped again


@dataclass(frozen=True)
class _Settings:
    """A fleet's constructor settings (besides its replicas), kept for :meth:`Fleet.clone`."""

    policy: Policy
    defaults: Options
    prefix_chars: int
    load_factor: float
    cooldown: Backoff
    ejection: Backoff
    metrics_interval: float
    max_retry_after: float
    cache_aware: CacheAware

    def arguments(self) -> dict[str, Any]:
        """The settings as ``Fleet(...)`` keyword arguments."""
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def picker(self, urls: list[str], cache_state: CacheState | None) -> ReplicaPicker:
        """The fleet's replica picker for ``urls``."""
        return ReplicaPicker(
            urls,
            self.policy,
            prefix_chars=self.prefix_chars,
            load_factor=self.load_factor,
            cooldown=self.cooldown,
            ejection=self.ejection,
            max_retry_after=self.max_retry_after,
            cache_aware=self.cache_aware,
            cache_state=cache_state,
        )


class Fleet(AsyncClosing, Generates):
    """Replicas of one model behind the ``LLM`` API; each request goes to one replica.

    Build it with ``unillm.connect(engine, [url, ...], policy=...)`` or ``Fleet([llm, ...])``
    (the fleet owns those LLMs: ``aclose`` closes them). Discovery (model, engine, version of
    every replica) happens on first use; replicas serving different models raise
    :class:`~unillm.errors.ReplicaMismatch`.

    Args:
        replicas: The LLMs to route between (owned by the fleet from now on).
        policy: How a replica is picked: "round_robin", "least_load", "prefix", "session" or
            "cache_aware".
        defaults: Options applied to every request, overridden per call.
        prefix_chars: How many leading prompt characters the "prefix" policy hashes.
        load_factor: How far above the mean load (>= 1.0; 1.25 is 25%) the "prefix" policy lets
            one replica go before it spills to the next.
        cooldown: Backoff in seconds for a replica that answered 429/503.
        ejection: Backoff in seconds before an unreachable replica gets a trial request.
        metrics_interval: Seconds between scrapes of each engine's queue ("least_load").
        max_retry_after: The longest ``Retry-After`` (seconds) believed from a replica.
        cache_aware: The "cache_aware" policy's thresholds and prefix-tree bound.
        kv_events: The replicas' KV-cache events, in the replicas' order, for "cache_aware"
            (started; the fleet closes it). None: the prefix trees alone.

    Raises:
        InvalidOptions: An empty replica list or a setting out of range.
    """

    def __init__(
        self,
        replicas: Sequence[LLM],
        *,
        policy: Policy = "round_robin",
        defaults: Options | None = None,
        prefix_chars: int = 256,
        load_factor: float = 1.25,
        cooldown: Backoff = Backoff(0.5, 30.0),
        ejection: Backoff = Backoff(1.0, 30.0),
        metrics_interval: float = 1.0,
        max_retry_after: float = MAX_RETRY_AFTER,
        cache_aware: CacheAware = CacheAware(),
        kv_events: KVEvents | None = None,
    ) -> None:
        _check_fleet_settings(load_factor, metrics_interval, cooldown=cooldown, ejection=ejection)
        given = _checked_replicas(replicas)
        defaults = _shared_defaults(given) if defaults is None else defaults
        make_request("", None, None, defaults, stream=False)  # validate now
        self.engine: str = given[0].engine
        self.defaults: Options = dict(defaults)  # type: ignore[assignment]
        self.policy: Policy = policy
        self.metrics_interval = metrics_interval
        self._settings = _Settings(
            policy,
            self.defaults,
            prefix_chars,
            load_factor,
            cooldown,
            ejection,
            metrics_interval,
            max_retry_after,
            cache_aware,
        )
        self._picker = self._settings.picker([r.base_url for r in given], kv_events)
        if kv_events is not None and len(kv_events) != len(given):
            raise InvalidOptions(f"kv_events has {len(kv_events)} endpoints for {len(given)} replicas")
        self.kv_events = kv_events
        self._owns_events = True  # a clone shares its original's subscription
        self._members = [
            _Member(r if r.retry.attempts == 1 else r.clone(retry=NO_RETRY), r, route)
            for r, route in zip(given, self._picker.replicas, strict=True)
        ]
        self._info: EngineInfo | None = None
        self._caps: Capabilities | None = None
        self._mixed_versions = False
        self._discovery: SingleFlight[EngineInfo] = SingleFlight()
        self._wants_queue = policy in ("least_load", "session", "cache_aware")
        self._scraped_at = float("-inf")
        self._scrape: asyncio.Task[None] | None = None
        self.loras = FleetLoras(self)

    @classmethod
    def connect(
        cls,
        engine: str,
        base_urls: Sequence[str],
        *,
        policy: Policy = "round_robin",
        model: str | None = None,
        api_key: str | None = None,
        defaults: Options | None = None,
        timeouts: Timeouts = Timeouts(),
        prefix_chars: int = 256,
        pool: Pool = Pool(),
        reserve: Reserve | None = None,
    ) -> Fleet:
        """A fleet of running replicas: ``Fleet.connect("vllm", ["http://a:8000", "http://b:8000"])``.

        Args:
            engine: The adapter's name ("vllm", ...).
            base_urls: One URL per replica.
            policy: How a replica is picked: "round_robin", "least_load", "prefix", "session" or
                "cache_aware".
            model: The model to ask for; None uses what the replicas serve.
            api_key: Sent to every replica as a bearer token; never echoed.
            defaults: Options applied to every request, overridden per call.
            timeouts: Connect/read/pool limits in seconds, per replica.
            prefix_chars: How many leading prompt characters the "prefix" policy hashes.
            pool: Connection-pool sizes per replica.
            reserve: Engine slots kept free for urgent requests, on each replica
                (:class:`~unillm.Reserve`; its ``capacity`` is one replica's ``max_num_seqs``).

        Returns:
            A fleet of one LLM per URL (each with ``RetryPolicy(attempts=1)``).
        """
        if isinstance(base_urls, str) or not isinstance(base_urls, Sequence):
            raise InvalidOptions(f"a fleet takes a list of base URLs, got {base_urls!r}")
        if not base_urls:
            raise InvalidOptions("a fleet needs at least one replica URL, got an empty list")
        llms = [
            LLM(
                engine,
                url,
                model=model,
                api_key=api_key,
                defaults=defaults,
                timeouts=timeouts,
                retry=NO_RETRY,
                pool=pool,
                reserve=reserve,
            )
            for url in base_urls
        ]
        return cls(llms, policy=policy, defaults=defaults, prefix_chars=prefix_chars)

    @property
    def replicas(self) -> list[LLM]:
        """Every replica's LLM, in order (each with ``RetryPolicy(attempts=1)``: the fleet retries)."""
        return [m.llm for m in self._members]

    @property
    def base_urls(self) -> list[str]:
        """Every replica's URL, in order."""
        return [m.llm.base_url for m in self._members]

    def __repr__(self) -> str:
        model = self._info.model if self._info else None
        return (
            f"Fleet(engine={self.engine!r}, policy={self.policy!r}, model={model!r}, "
            f"replicas={self.base_urls!r})"
        )

    # -- lifecycle -------------------------------------------------------------------------
    async def aclose(self) -> None:
        """Stop the background metrics scrape, the KV-cache event subscription (unless a clone's)
        and close every replica's connections."""
        if self._scrape is not None:
            self._scrape.cancel()
            self._scrape = None
        if self.kv_events is not None and self._owns_events:
            await self.kv_events.aclose()
        for llm in {id(r): r for m in self._members for r in (m.llm, m.given)}.values():
            await llm.aclose()

    def clone(self) -> Fleet:
        """A new fleet over the same replicas with its own connection pools and counters."""
        twin = Fleet(
            [m.llm.clone() for m in self._members], **self._settings.arguments(), kv_events=self.kv_events
        )
        twin._owns_events = False
        twin._info, twin._caps, twin._mixed_versions = self._info, self._caps, self._mixed_versions
        for mine, theirs in zip(self._members, twin._members, strict=True):
            theirs.verified = mine.verified
        return twin

    def blocking(self) -> BlockingLLM:
        """A blocking twin for scripts; it also works inside a running loop (Jupyter)."""
        from unillm.client.blocking import BlockingLLM

        return BlockingLLM(self.clone())

    def stats(self) -> FleetStats:
        """Per-replica counters and state, read without any I/O."""
        now = time.monotonic()
        out = []
        for r in self._picker.replicas:
            state = r.state(now)
            until = r.ejected_until if state == "ejected" else r.cooling_until if state == "cooling" else None
            out.append(
                ReplicaStats(
                    url=r.url,
                    state=state,
                    in_flight=r.in_flight,
                    requests=r.requests,
                    errors=r.errors,
                    overloads=r.overloads,
                    available_in_s=None if until is None else max(0.0, until - now),
                    waiting=r.waiting,
                    last_error=r.last_error,
                )
            )
        return FleetStats(policy=self.policy, replicas=out)

    # -- discovery -------------------------------------------------------------------------
    async def info(self, *, refresh: bool = False, timeout: float | None = None) -> EngineInfo:
        """The model every replica serves, discovered from all of them at once and cached.

        Concurrent callers share one discovery (its result or its failure; a later call tries
        again); ``timeout`` bounds each wait for a replica's bytes, as on a call.

        Raises ReplicaMismatch when replicas serve different models or engines, and
        EngineUnavailable when none answers.

        Args:
            refresh: Ask the engine again instead of returning the cached answer.
            timeout: Seconds each wait for the engine's bytes may take; None uses the client's
                read timeout.

        Returns:
            The served model, engine version and limits.
        """
        if self._info is not None and not refresh:
            return self._info
        limits = [m.llm._discovery_limit(timeout) for m in self._members]
        limit = None if None in limits else max(cast(list[float], limits))
        try:
            return await self._discovery.run(lambda: self._discover(refresh, timeout), wait_limit=limit)
        except TimeoutError:
            raise EngineTimeout(
                f"the fleet's discovery (the model its replicas serve) did not finish within "
                f"{limit:g}s; raise timeout= or check the replicas' load"
            ) from None

    async def _discover(self, refresh: bool, timeout: float | None) -> EngineInfo:
        now = time.monotonic()
        asked = [i for i, r in enumerate(self._picker.replicas) if r.available(now)]
        if not asked:  # every replica is ejected since an earlier attempt: no new wait
            raise self._nothing_available(now)
        answers = await self._each(lambda r: r.info(refresh=refresh, timeout=timeout), asked)
        now = time.monotonic()
        found: dict[int, EngineInfo] = {}
        for i, answer in zip(asked, answers, strict=True):
            if isinstance(answer, EngineUnavailable):
                self._picker.failed(i, str(answer), now)
            elif isinstance(answer, UnillmError):
                raise answer
            else:
                found[i] = answer
        if not found:
            raise EngineUnavailable(
                "no replica of the fleet answered discovery: "
                + "; ".join(
                    f"{self._members[i].llm.base_url}: {a}" for i, a in zip(asked, answers, strict=True)
                )
            )
        served = {
            self._members[i].llm.base_url: f"{info.engine} serving {info.model!r}"
            for i, info in found.items()
        }
        if len(set(served.values())) > 1:
            raise ReplicaMismatch(
                "a fleet serves one model on one engine, but its replicas differ: "
                + ", ".join(f"{u}: {s}" for u, s in served.items())
                + ". Point the fleet only at replicas of the same model",
                replicas=served,
            )
        infos = list(found.values())
        versions = {info.version for info in infos}
        lengths = [info.max_model_len for info in infos if info.max_model_len is not None]
        first = infos[0]
        self._info = EngineInfo(
            first.engine,
            first.model,
            version=first.version if len(versions) == 1 else None,
            max_model_len=min(lengths) if lengths else None,
        )
        self._caps = _common([await self._members[i].llm.capabilities() for i in found])
        self._mixed_versions = len(versions) > 1
        for i in found:
            self._members[i].verified = True
        return self._info

    async def _verify(self, i: int, timeout: float | None = None) -> None:
        """Check a replica that was down at discovery before its first request."""
        assert self._info is not None and self._caps is not None
        replica = self._members[i].llm
        info = await replica.info(timeout=timeout)
        if (info.engine, info.model) != (self._info.engine, self._info.model):
            why = (
                f"{replica.base_url} serves {info.model!r} on {info.engine}, but the fleet serves "
                f"{self._info.model!r} on {self._info.engine}; it gets no requests"
            )
            self._picker.mismatched(i, why)
            raise ReplicaMismatch(why, replicas={replica.base_url: f"{info.engine} serving {info.model!r}"})
        if info.version != self._info.version:
            self._caps = _common([self._caps, await replica.capabilities()])
            self._mixed_versions = True
        self._members[i].verified = True

    async def capabilities(self) -> Capabilities:
        """What every replica can honour (the common subset when their versions differ)."""
        await self.info()
        assert self._caps is not None
        return self._caps

    async def health(self) -> bool:
        """True when at least one replica answers its health check; a replica that does is
        taken back into rotation (ending its ejection or cooldown), one that cannot be reached
        is ejected."""
        answers = await self._each(lambda r: r.health())
        now = time.monotonic()
        for i, answer in enumerate(answers):
            if answer is True:
                self._picker.recovered(i)
            elif isinstance(answer, EngineUnavailable):
                self._picker.failed(i, str(answer), now)
        return any(a is True for a in answers)

    async def metrics(self) -> CombinedMetrics:
        """Every replica's metrics, each sample labelled ``replica=<url>``.

            m = await fleet.metrics()
            m.value("vllm:num_requests_running")                              # the whole fleet
            m.value("vllm:num_requests_running", replica="http://a:8000")     # one replica
            m.normalized().waiting, m.per_replica()["http://a:8000"].ttft     # unillm's schema

        ``unillm_replica_up`` is 1 for each replica that answered, 0 for the others; the
        normalized views cover the replicas that answered.
        """
        answers = await self._each(lambda r: r.metrics())
        samples: list[Sample] = []
        for llm, answer in zip(self.replicas, answers, strict=True):
            up = isinstance(answer, EngineMetrics)
            samples.append(
                Sample(name="unillm_replica_up", labels={"replica": llm.base_url}, value=1.0 if up else 0.0)
            )
            if isinstance(answer, EngineMetrics):
                samples += [
                    Sample(name=s.name, labels={**s.labels, "replica": llm.base_url}, value=s.value)
                    for s in answer.samples
                ]
        if not any(isinstance(a, EngineMetrics) for a in answers):
            raise cast(UnillmError, answers[0])
        return CombinedMetrics(
            samples=samples,
            engine=self.replicas[0].engine,
            replicas={
                llm.base_url: a
                for llm, a in zip(self.replicas, answers, strict=True)
                if isinstance(a, EngineMetrics)
            },
        )

    def openai(self) -> AsyncOpenAI:
        """Refused: an OpenAI client talks to one URL, which would bypass the fleet."""
        raise UnsupportedFeature(
            self.engine,
            "openai() on a Fleet",
            why=(
                "an OpenAI client sends every request to one URL, bypassing the fleet's routing, "
                "failover and cooldowns"
            ),
            alternative=(
                "Use fleet.replicas[i].openai() for one replica, or put a router "
                "(vllm-router, smg) in front of the replicas and connect to it"
            ),
        )

    # -- generation (generate and stream: unillm.client.calls.Generates) ---------------------
    async def _complete(self, request: Request) -> Completion[Any]:
        if self._info is None or self._mixed_versions:
            await self._ready(request)
        picker = self._picker
        return await self._call(
            picker.key_for(request),
            lambda llm: llm._complete(request),
            request.timeout,
            picker.prompt(request),
        )

    async def _call(
        self,
        key: int | None,
        fn: Callable[[LLM], Awaitable[R]],
        timeout: float | None = None,
        prompt: Prompt | None = None,
    ) -> R:
        """``fn`` on the replica the policy picks, moving on while it fails before an answer."""
        tried: list[int] = []
        while True:
            i = self._pick(key, tried, prompt)
            self._picker.begin(i, time.monotonic(), prompt)
            try:
                if not self._members[i].verified:
                    await self._verify(i, timeout)
                result = await fn(self._members[i].llm)
            except BaseException as e:
                if not self._settle(i, e, started=False):
                    raise
                tried.append(i)
                continue
            else:
                self._picker.answered(i)
                return result
            finally:
                self._picker.end(i, prompt)

    def _open_stream(self, request: Request) -> Stream:
        return FleetStream(self, request)

    # -- embeddings and tokens ---------------------------------------------------------------
    async def _embed(self, call: EmbedCall) -> Embeddings:
        """Embed on one replica; fails over before any answer."""
        if self._info is None:
            await self.info(timeout=call.timeout)
        return await self._call(None, lambda llm: llm._embed(call))

    async def _tokenize(self, call: TokenizeCall) -> Tokens:
        """Tokenize on one replica; fails over before any answer."""
        if self._info is None:
            await self.info(timeout=call.timeout)
        return await self._call(None, lambda llm: llm._tokenize(call))

    # -- routing ---------------------------------------------------------------------------
    async def _ready(self, request: Request) -> None:
        if self._info is None:
            await self.info(timeout=request.timeout)
        if self._mixed_versions:
            assert self._caps is not None
            check(self._caps, request)

    def _pick(self, key: int | None, tried: list[int], prompt: Prompt | None = None) -> int:
        now = time.monotonic()
        i = self._picker.pick(key, tried, now, prompt)
        if i is None:
            raise self._nothing_available(now)
        if self._wants_queue and now - self._scraped_at >= self.metrics_interval:
            self._start_scrape(now)
        return i

    def _settle(self, i: int, error: BaseException, *, started: bool) -> bool:
        """Record how replica ``i`` failed; True when the request may go to another replica."""
        now = time.monotonic()
        if isinstance(error, ReplicaMismatch):
            return not started
        if isinstance(error, Overloaded):
            self._picker.overloaded(i, error.retry_after, now)
            return not started
        if isinstance(error, (EngineUnavailable, StreamInterrupted)):
            self._picker.failed(i, str(error), now)
            return not started
        if started or isinstance(error, EngineError):
            self._picker.answered(i)
        return False

    def _nothing_available(self, now: float) -> UnillmError:
        wait = self._picker.earliest_cooldown_end(now)
        probe = self._picker.earliest_probe(now)
        if wait is not None:  # the earliest moment any replica takes a request (or a trial)
            wait = min(wait, probe) if probe is not None else wait
            return Overloaded(
                f"every replica of the fleet is overloaded (429/503) or unreachable; the first "
                f"takes requests again in {wait:.2f}s: retry after e.retry_after seconds",
                engine=self.engine,
                retry_after=wait,
            )
        why = "; ".join(f"{r.url}: {r.last_error}" for r in self._picker.replicas)
        when = f" The next trial request goes out in {probe:.2f}s." if probe is not None else ""
        return EngineUnavailable(f"no replica of the fleet can take the request ({why}).{when}")

    def _start_scrape(self, now: float) -> None:
        """Refresh the engines' waiting queues in the background (asyncio only; never awaited).

        The scrape outlives the request that started it, and a fleet need not be entered (``connect``,
        launches and blocking twins use it as is), so no task group of the fleet's can hold it; one
        around ``async with fleet`` would also turn the body's exceptions into exception groups.
        """
        if self._scrape is not None:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # not asyncio (e.g. trio): least_load counts requests in flight only
            return
        self._scraped_at = now
        self._scrape = loop.create_task(self._scrape_queues())

    async def _scrape_queues(self) -> None:
        try:
            now = time.monotonic()
            wanted = [m for m in self._members if not m.no_queue and m.route.available(now)]
            async with anyio.create_task_group() as tg:
                for member in wanted:
                    tg.start_soon(self._scrape_queue, member)
        finally:
            self._scrape = None

    async def _scrape_queue(self, member: _Member) -> None:
        waiting: float | None = None
        with anyio.move_on_after(max(self.metrics_interval, 0.5)):
            try:
                waiting = (await member.llm.metrics()).normalized().waiting
                member.no_queue = waiting is None  # no queue gauge: stop asking
            except (UnsupportedFeature, NotFound, ValueError):  # no (usable) metrics endpoint
                member.no_queue = True
            except UnillmError:  # unreachable, overloaded or failing now: the next refresh tries again
                pass
        member.route.waiting = waiting

    async def _each(
        self,
        fn: Callable[[LLM], Awaitable[R]],
        which: Sequence[int] | None = None,
    ) -> list[R | UnillmError]:
        """``fn`` on every replica (or those in ``which``) concurrently; each result, or the
        UnillmError it raised, in order."""
        indices = range(len(self._members)) if which is None else which
        out: dict[int, R | UnillmError] = {}

        async def one(i: int) -> None:
            try:
                out[i] = await fn(self._members[i].llm)
            except UnillmError as e:
                out[i] = e

        async with anyio.create_task_group() as tg:
            for i in indices:
                tg.start_soon(one, i)
        return [out[i] for i in indices]


class FleetStream(Stream):
    """A stream from one replica of a fleet; it moves to another only before the engine answers."""

    def __init__(self, fleet: Fleet, request: Request) -> None:
        super().__init__(fleet._members[0].llm, request)  # the replica is chosen when it starts
        self._fleet = fleet
        self.replica: str | None = None  # the URL serving it, once chosen

    def _observed(self, deltas: AsyncIterator[Delta]) -> AsyncIterator[Delta]:
        return deltas  # observers see each replica's Stream (one observation per attempt)

    async def _run(self) -> AsyncIterator[Delta]:
        fleet, request = self._fleet, self._request
        deadline = Deadline(request.deadline, fleet.engine, stream=True)
        with deadline.bound():
            await fleet._ready(request)
        key, prompt = fleet._picker.key_for(request), fleet._picker.prompt(request)
        tried: list[int] = []
        while True:
            i = fleet._pick(key, tried, prompt)
            member = fleet._members[i]
            inner = Stream(member.llm, request, deadline)
            inner._texts, inner._calls = self._texts, self._calls  # what was delivered accumulates here
            self.replica = member.llm.base_url
            fleet._picker.begin(i, time.monotonic(), prompt)
            try:
                if not member.verified:
                    with deadline.bound():
                        await fleet._verify(i, request.timeout)
                async for delta in inner._started_iter():  # closed below: no wrapper per chunk
                    if not self.started:  # the replica answers: healthy again if it was on trial
                        self.started = True
                        fleet._picker.answered(i)
                    yield delta
            except BaseException as e:
                if not fleet._settle(i, e, started=inner.started):
                    raise
                tried.append(i)
                continue
            else:
                fleet._picker.answered(i)
                return
            finally:
                await inner.aclose()
                fleet._picker.end(i, prompt)


class FleetLoras:
    """LoRA adapters on every replica: ``await fleet.loras.load("sql", "/adapters/sql")``."""

    def __init__(self, fleet: Fleet) -> None:
        self._fleet = fleet

    async def load(self, name: str, path: str) -> None:
        """Load an adapter on every replica (raises FanOutFailed if only some of them did)."""
        await self._fan_out(lambda r: r.loras.load(name, path), f"loading adapter {name!r}")

    async def unload(self, name: str) -> None:
        """Unload an adapter from every replica."""
        await self._fan_out(lambda r: r.loras.unload(name), f"unloading adapter {name!r}")

    async def list(self) -> list[LoraInfo]:
        """Adapters served by every replica that answered (usable with ``lora=`` anywhere)."""
        answers = await self._fleet._each(lambda r: r.loras.list())
        lists = [a for a in answers if not isinstance(a, UnillmError)]
        if not lists:
            raise cast(UnillmError, answers[0])
        common = set.intersection(*({a.name for a in found} for found in lists))
        return [a for a in lists[0] if a.name in common]

    async def _fan_out(self, fn: Callable[[LLM], Awaitable[None]], what: str) -> None:
        fleet = self._fleet
        answers = await fleet._each(fn)
        failures = {
            fleet.replicas[i].base_url: a for i, a in enumerate(answers) if isinstance(a, UnillmError)
        }
        if not failures:
            return
        if len(failures) == len(answers):
            raise next(iter(failures.values()))
        succeeded = [u for u in fleet.base_urls if u not in failures]
        raise FanOutFailed(
            f"{what} failed on {len(failures)} of {len(answers)} replicas ("
            + "; ".join(f"{u}: {e}" for u, e in failures.items())
            + f") and worked on {', '.join(succeeded)}. Fix those replicas and repeat it there "
            "(fleet.replicas[i].loras), or undo it on the others",
            failures=failures,
            succeeded=succeeded,
        )


def _common(caps: Sequence[Capabilities]) -> Capabilities:
    """The features every one of ``caps`` supports (the weakest level of each)."""
    if len(caps) == 1 or all(c == caps[0] for c in caps[1:]):
        return caps[0]
    features: dict[Any, Support] = {}
    for feature in {f for c in caps for f in c.features}:
        features[feature] = min((c.support(feature) for c in caps), key=lambda s: _LEVELS[s.level])
    versions = sorted({c.version or "?" for c in caps})
    return Capabilities(engine=caps[0].engine, version=" / ".join(versions), features=features)


def _check_fleet_settings(load_factor: float, metrics_interval: float, **backoffs: Backoff) -> None:
    """Refuse a Fleet's tuning arguments of the wrong kind, before anything is built."""

    def number(value: object) -> bool:
        return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)

    if not number(load_factor) or load_factor < 1:
        raise InvalidOptions(
            f"load_factor must be a number >= 1.0 (1.25 allows 25% above the mean), got {load_factor!r}"
        )
    if not number(metrics_interval) or metrics_interval < 0:
        raise InvalidOptions(
            "metrics_interval must be a number of seconds >= 0 (0: read the queues before every "
            f"pick), got {metrics_interval!r}"
        )
    for name, backoff in backoffs.items():
        if not isinstance(backoff, Backoff):
            raise InvalidOptions(f"{name} must be a unillm.Backoff(initial, max), got {backoff!r}")
        if not (number(backoff.initial) and number(backoff.max) and 0 < backoff.initial <= backoff.max):
            raise InvalidOptions(
                f"{name}={backoff!r}: initial and max must be positive seconds, initial <= max "
                "(e.g. Backoff(0.5, 30.0))"
            )


def _checked_replicas(replicas: Sequence[LLM]) -> list[LLM]:
    """The replicas of a new fleet: at least one, all LLMs of one engine, no URL twice."""
    given = list(replicas) if isinstance(replicas, Sequence) else []
    if not given:
        raise InvalidOptions(
            "a Fleet needs at least one replica: unillm.connect(engine, "
            "['http://a:8000', 'http://b:8000']) or Fleet([llm_a, llm_b])"
        )
    if not all(isinstance(r, LLM) for r in given):
        raise InvalidOptions("Fleet([...]) takes unillm.LLM objects (from unillm.connect)")
    engines = {r.base_url: r.engine for r in given}
    if len(set(engines.values())) > 1:
        raise ReplicaMismatch(
            "a fleet serves one model on one engine, but its replicas use different engines: "
            + ", ".join(f"{u} ({e})" for u, e in engines.items()),
            replicas=engines,
        )
    _refuse_duplicates([r.base_url for r in given])
    return given


def _shared_defaults(replicas: list[LLM]) -> Options:
    """The defaults every replica has (a fleet without its own ``defaults=`` takes theirs)."""
    defaults = replicas[0].defaults
    if any(r.defaults != defaults for r in replicas):
        raise InvalidOptions("the replicas have different defaults; pass Fleet(..., defaults=...)")
    return defaults


def _refuse_duplicates(urls: list[str]) -> None:
    seen: dict[str, str] = {}
    for url in urls:
        u = httpx.URL(url)
        port = u.port or {"http": 80, "https": 443}.get(u.scheme, 0)
        key = f"{u.scheme}://{u.host}:{port}{u.path.rstrip('/')}"
        if key in seen:
            raise InvalidOptions(
                f"duplicate replica URL: {seen[key]!r} and {url!r} are the same "
                "engine; list each replica once"
            )
        seen[key] = url


__all__ = ["Fleet", "FleetLoras", "FleetStats", "FleetStream", "ReplicaStats"]
