"""Which replica serves a request: routing policies and per-replica health, pure (no I/O, no clock).

:class:`~unillm.fleet.fleet.Fleet` owns one :class:`ReplicaPicker`; every call passes ``now`` (monotonic
seconds), so the logic is testable without sleeping::

    picker = ReplicaPicker(["http://a:8000", "http://b:8000"], policy="prefix")
    key = picker.key_for(request)                 # None unless the policy hashes something
    prompt = picker.prompt(request)               # None unless the policy is "cache_aware"
    i = picker.pick(key, exclude=(), now=now, prompt=prompt)   # None: no replica may take one now
    picker.begin(i, now, prompt)
    picker.answered(i) / picker.overloaded(i, retry_after, now) / picker.failed(i, why, now)
    picker.end(i, prompt)                         # when the answer (or the stream) is over

Policies: ``round_robin``; ``least_load`` (fewest requests in flight plus the engine's waiting
queue when known); ``prefix`` (consistent hashing with bounded load over the first
``prefix_chars`` characters of the prompt or of the serialized messages); ``session`` (the
request's ``session=`` key, hashed the same way; requests without one go to the least loaded
replica); ``cache_aware`` (the replica holding the longest head of the prompt, unless too little
matches or that replica is too loaded: see :class:`CacheAware`; what a replica holds comes from its
engine's KV-cache events when a :class:`CacheState` is given and usable, else from a
:class:`~unillm.fleet.prefix_tree.PrefixTree` of what was sent to it). A ``session=`` key pins
its requests under every policy: the policy decides only for requests without one.

Health: a replica answering 429/503 is *overloaded*, not broken: it cools down for
``max(Retry-After, own exponential backoff)``, Retry-After believed up to ``max_retry_after``
seconds; a health check it passes ends the cooldown (:meth:`ReplicaPicker.recovered`). A replica that
cannot be reached (refused, reset, timed out before answering) is *ejected* for an exponential
backoff, then *half-open*: one trial request may go there; its answer brings the replica back,
its failure ejects it again for longer.
"""

from __future__ import annotations

import math
import zlib
from bisect import bisect_left
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, get_args

from unillm.client.transport import MAX_RETRY_AFTER
from unillm.content import content_text
from unillm.errors import InvalidOptions
from unillm.fleet.prefix_tree import PrefixTree, chunks
from unillm.options import Request

Policy = Literal["round_robin", "least_load", "prefix", "session", "cache_aware"]
POLICIES: tuple[str, ...] = get_args(Policy)
ReplicaState = Literal["healthy", "cooling", "ejected", "half_open", "mismatched"]
_VIRTUAL_NODES = 64


@dataclass(frozen=True, slots=True)
class Backoff:
    """An exponential backoff: ``initial`` seconds, doubling on every repeat, capped at ``max``.

    Args:
        initial: Seconds of the first wait.
        max: The longest wait in seconds.
    """

    initial: float = 0.5
    max: float = 30.0

    def after(self, streak: int) -> float:
        """Seconds to wait after the ``streak``-th failure in a row (1-based).

        Args:
            streak: Failures in a row so far, counting from 1.
        """
        return min(self.max, self.initial * 2.0 ** max(0, streak - 1))


@dataclass(frozen=True, slots=True)
class CacheAware:
    """Settings of the ``cache_aware`` policy (the names of vllm-router's and smg's in brackets).

    A request goes to the replica whose prefix tree matches the longest head of its prompt when
    that match is at least ``match_threshold`` of the prompt, unless that replica's load (requests
    in flight plus the engine's waiting queue) exceeds the least loaded one's by more than
    ``balance_abs`` requests *and* by more than ``balance_rel`` times: then the longest match among
    the replicas within those bounds takes it (the least loaded is always one of them; the
    routers go straight to the least loaded). A prompt no replica has seen enough of goes to the
    least loaded. The routers' defaults are 0.3, 64 and 1.5; a client-side fleet sees only its own
    requests, so its absolute threshold is 2: a shared system prompt spreads to a second replica
    once the first carries 3 more requests, and from then on new conversations match both equally
    and go to the less loaded.

    Args:
        match_threshold: The least matched share of the prompt (0-1) that routes by cache
            (``--cache-threshold``).
        balance_abs: Requests above the least loaded replica's load a matched replica may carry
            (``--balance-abs-threshold``).
        balance_rel: How many times the least loaded replica's load it may carry, >= 1
            (``--balance-rel-threshold``).
        max_chunks: The most prompt chunks kept per replica, least recently used evicted first
            (about 300 bytes each; ``--max-tree-size`` counts characters).
    """

    match_threshold: float = 0.3
    balance_abs: float = 2.0
    balance_rel: float = 1.5
    max_chunks: int = 65536

    def check(self) -> None:
        """Refuse settings out of range.

        Raises:
            InvalidOptions: A threshold out of range or a non-positive ``max_chunks``.
        """
        if not 0.0 <= self.match_threshold <= 1.0:
            raise InvalidOptions(f"match_threshold is a share, 0 to 1; got {self.match_threshold!r}")
        if not 0.0 <= self.balance_abs < math.inf:
            raise InvalidOptions(f"balance_abs is a count of requests >= 0; got {self.balance_abs!r}")
        if not 1.0 <= self.balance_rel < math.inf:
            raise InvalidOptions(f"balance_rel is a finite ratio >= 1.0; got {self.balance_rel!r}")
        PrefixTree(self.max_chunks)  # raises on a bad bound


class CacheState(Protocol):
    """What the engines report they cache (:class:`unillm.fleet.kv_events.KVEvents`)."""

    def tokens(self, request: Request) -> list[int] | None:
        """The request's prompt as the engines' token ids (None: unknown here)."""

    def held(self, i: int, tokens: Sequence[int], lora: str | None) -> int | None:
        """Tokens of the head replica ``i`` caches (None: its reports are not usable)."""

    def sent(self, i: int, tokens: Sequence[int], lora: str | None) -> int | None:
        """The prompt goes to replica ``i``; what :meth:`done` gets back (None: nothing to undo)."""

    def done(self, i: int, tokens: Sequence[int], lora: str | None, size: int) -> None:
        """The prompt :meth:`sent` returned ``size`` for is over on replica ``i``."""


@dataclass(slots=True)
class Prompt:
    """A request's prompt as ``cache_aware`` matches it: chunks for the prefix trees, token ids
    for the engines' reports (None without them), and the replicas it is in flight on."""

    chunks: list[str]
    tokens: list[int] | None = None
    lora: str | None = None
    sent: dict[int, int] = field(default_factory=dict)  # replica -> what CacheState.sent gave


@dataclass(slots=True)
class Replica:
    """Routing state and counters of one replica."""

    url: str
    in_flight: int = 0
    requests: int = 0
    errors: int = 0
    overloads: int = 0
    waiting: float | None = None
    cooling_until: float = 0.0
    overload_streak: int = 0
    ejected_until: float | None = None
    eject_streak: int = 0
    trial: bool = False
    mismatch: str | None = None
    last_error: str | None = None

    def state(self, now: float) -> ReplicaState:
        """What the replica is doing right now."""
        if self.mismatch is not None:
            return "mismatched"
        if self.ejected_until is not None:
            return "half_open" if self.ejected_until <= now else "ejected"
        return "cooling" if self.cooling_until > now else "healthy"

    def available(self, now: float) -> bool:
        """True when a request may go to this replica now."""
        if self.mismatch is not None:
            return False
        if self.ejected_until is not None:
            return self.ejected_until <= now and not self.trial
        return self.cooling_until <= now


def _image_ends(part: Mapping[str, Any]) -> str:
    """An image part for hashing: its URL's two ends (a data URL can be megabytes; its ends tell
    images apart)."""
    inner = part.get(str(part.get("type")))
    url = inner.get("url") if isinstance(inner, Mapping) else None
    ends = f"{url[:64]}{url[-64:]}" if isinstance(url, str) else part.get("type")
    return f"\1{ends}\1"


def _serialized(request: Request, limit: int | None) -> str:
    """The request's prompt, or its messages as text (role, NUL, content, NUL each), cut to
    ``limit`` characters (None: whole)."""
    if request.prompt is not None:
        return request.prompt[:limit]
    assert request.messages is not None
    text, n = [], 0
    for m in request.messages:
        part = f"{m.get('role')}\0{content_text(m.get('content'), _image_ends)}\0"
        text.append(part)
        n += len(part)
        if limit is not None and n >= limit:
            break
    return "".join(text)[:limit]


def _hash(text: str) -> int:
    """A 64-bit position on the ring, the same in every process (unlike ``hash()``), and cheap:
    CRC-32 spread over 64 bits by a Fibonacci multiply."""
    h = (zlib.crc32(text.encode()) * 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF
    return h ^ (h >> 29)


class ReplicaPicker:
    """Picks replicas by policy and tracks their health. See the module docstring."""

    def __init__(
        self,
        urls: Sequence[str],
        policy: str = "round_robin",
        *,
        prefix_chars: int = 256,
        load_factor: float = 1.25,
        cooldown: Backoff = Backoff(0.5, 30.0),
        ejection: Backoff = Backoff(1.0, 30.0),
        max_retry_after: float = MAX_RETRY_AFTER,
        cache_aware: CacheAware = CacheAware(),
        cache_state: CacheState | None = None,
    ) -> None:
        if policy not in POLICIES:
            raise InvalidOptions(f"unknown routing policy {policy!r}; use one of {', '.join(POLICIES)}")
        if not isinstance(prefix_chars, int) or isinstance(prefix_chars, bool) or prefix_chars < 1:
            raise InvalidOptions(f"prefix_chars must be a positive integer, got {prefix_chars!r}")
        if not load_factor >= 1.0:
            raise InvalidOptions(
                f"load_factor must be >= 1.0 (1.25 allows 25% above the mean), got {load_factor!r}"
            )
        if (
            not isinstance(max_retry_after, (int, float))
            or isinstance(max_retry_after, bool)
            or not 0 <= max_retry_after < math.inf
        ):
            raise InvalidOptions(
                f"max_retry_after is the longest Retry-After (seconds) a replica is believed: "
                f"a finite number >= 0, got {max_retry_after!r}"
            )
        self.policy = policy
        self.prefix_chars, self.load_factor = prefix_chars, load_factor
        self.max_retry_after = float(max_retry_after)
        self.cooldown, self.ejection = cooldown, ejection
        self.replicas = [Replica(url) for url in urls]
        cache_aware.check()
        self.cache_aware = cache_aware
        self.trees = [PrefixTree(cache_aware.max_chunks) for _ in urls] if policy == "cache_aware" else []
        if cache_state is not None and policy != "cache_aware":
            raise InvalidOptions(
                f"the engines' cache reports (kv_events) serve the cache_aware policy, not {policy!r}"
            )
        self.cache_state = cache_state
        self._next = 0
        ring = sorted((_hash(f"{url}#{v}"), i) for i, url in enumerate(urls) for v in range(_VIRTUAL_NODES))
        self._ring_points = [p for p, _ in ring]
        self._ring_owners = [i for _, i in ring]

    # -- choosing ---------------------------------------------------------------------------
    def key_for(self, request: Request) -> int | None:
        """The affinity hash of ``request``: its session key, else its prefix under ``prefix``."""
        if request.session is not None:
            return _hash("session\0" + request.session)
        if self.policy != "prefix":
            return None
        return _hash(_serialized(request, self.prefix_chars))

    def prompt(self, request: Request) -> Prompt | None:
        """``request``'s prompt as ``cache_aware`` matches it (for :meth:`pick` and :meth:`begin`):
        the chunks of its prompt or serialized messages and, with the engines' reports, its token
        ids; None under other policies."""
        if not self.trees:
            return None
        tokens = self.cache_state.tokens(request) if self.cache_state is not None else None
        return Prompt(chunks(_serialized(request, None)), tokens, request.lora)

    def pick(
        self, key: int | None, exclude: Collection[int], now: float, prompt: Prompt | None = None
    ) -> int | None:
        """The replica for the next request, or None when none may take one now.

        Args:
            key: The affinity hash (:meth:`key_for`); it wins over the policy.
            exclude: Replicas already tried for this request.
            now: Monotonic seconds.
            prompt: The prompt (:meth:`prompt`), for ``cache_aware``.
        """
        replicas = self.replicas
        candidates = [i for i, r in enumerate(replicas) if i not in exclude and r.available(now)]
        if not candidates:
            return None
        if len(candidates) == 1:
            self._next = candidates[0] + 1
            return candidates[0]
        if key is not None:
            return self._ring_pick(key, candidates)
        if prompt is not None and self.trees:
            return self._cache_pick(prompt, candidates)
        if self.policy == "round_robin":
            return self._rotate(candidates)
        return self._least_loaded(candidates)

    def _rotate(self, candidates: list[int]) -> int:
        start, n = self._next, len(self.replicas)
        chosen, distance = candidates[0], n
        for i in candidates:
            d = (i - start) % n
            if d < distance:
                chosen, distance = i, d
        self._next = chosen + 1
        return chosen

    def _load(self, i: int) -> float:
        r = self.replicas[i]
        return r.in_flight + (r.waiting or 0.0)

    def _least_loaded(self, candidates: list[int]) -> int:
        start, n = self._next, len(self.replicas)
        chosen = min(candidates, key=lambda i: (self._load(i), (i - start) % n))
        self._next = chosen + 1
        return chosen

    def _cache_pick(self, prompt: Prompt, candidates: list[int]) -> int:
        """The longest match (ties: less load, then rotation) among the replicas not too loaded,
        unless even the longest is too short."""
        settings, start, n = self.cache_aware, self._next, len(self.replicas)
        matched = {i: self._held_share(i, prompt) for i in candidates}
        best = max(matched.values())
        if best <= 0 or best < settings.match_threshold:
            return self._least_loaded(candidates)
        low = min(self._load(i) for i in candidates)
        fits = [  # the least loaded always fits
            i
            for i in candidates
            if self._load(i) - low <= settings.balance_abs or self._load(i) <= settings.balance_rel * low
        ]
        best = min(fits, key=lambda i: (-matched[i], self._load(i), (i - start) % n))
        self._next = best + 1
        return best

    def _held_share(self, i: int, prompt: Prompt) -> float:
        """The share of the prompt replica ``i`` holds: from its engine's reports when usable,
        else from its prefix tree."""
        if prompt.tokens and self.cache_state is not None:
            held = self.cache_state.held(i, prompt.tokens, prompt.lora)
            if held is not None:
                return held / len(prompt.tokens)
        total = sum(len(c) for c in prompt.chunks)
        return self.trees[i].match(prompt.chunks) / total if total else 0.0

    def _ring_pick(self, key: int, candidates: list[int]) -> int:
        """Consistent hashing with bounded load: the first replica clockwise under its cap."""
        replicas = self.replicas
        total = 0
        for i in candidates:
            total += replicas[i].in_flight
        cap = math.ceil(self.load_factor * (total + 1) / len(candidates))
        owners = self._ring_owners
        size, start = len(owners), bisect_left(self._ring_points, key)
        seen: list[int] = []
        for step in range(size):
            i = owners[(start + step) % size]
            if i in seen or i not in candidates:
                continue
            if replicas[i].in_flight < cap:
                return i
            seen.append(i)
            if len(seen) == len(candidates):
                break
        return self._least_loaded(candidates)

    # -- outcomes ---------------------------------------------------------------------------
    def begin(self, i: int, now: float, prompt: Prompt | None = None) -> None:
        """A request goes to replica ``i`` (a half-open replica's one trial).

        Args:
            i: The replica.
            now: Monotonic seconds.
            prompt: The prompt (``cache_aware``): its chunks recorded in the replica's tree.
        """
        if prompt is not None and self.trees:
            self.trees[i].insert(prompt.chunks)
            if self.cache_state is not None and prompt.tokens:
                size = self.cache_state.sent(i, prompt.tokens, prompt.lora)
                if size is not None:
                    prompt.sent[i] = size
        r = self.replicas[i]
        r.in_flight += 1
        r.requests += 1
        if r.ejected_until is not None:
            r.trial = True

    def end(self, i: int, prompt: Prompt | None = None) -> None:
        """The request on replica ``i`` is over (answer read, stream closed, or given up).

        Args:
            i: The replica.
            prompt: The prompt :meth:`begin` was given.
        """
        if prompt is not None and i in prompt.sent and self.cache_state is not None and prompt.tokens:
            self.cache_state.done(i, prompt.tokens, prompt.lora, prompt.sent.pop(i))
        r = self.replicas[i]
        r.in_flight -= 1
        r.trial = False

    def answered(self, i: int) -> None:
        """Replica ``i`` answered (even with an error of the request's own): it is healthy."""
        r = self.replicas[i]
        r.ejected_until, r.eject_streak, r.overload_streak = None, 0, 0

    def recovered(self, i: int) -> None:
        """Replica ``i`` passed a health check: healthy again, its ejection or cooldown over."""
        self.answered(i)
        self.replicas[i].cooling_until = 0.0

    def overloaded(self, i: int, retry_after: float | None, now: float) -> None:
        """Replica ``i`` answered 429/503: no request until max(Retry-After, own backoff),
        Retry-After counted up to ``max_retry_after`` (a non-finite or negative one as absent)."""
        r = self.replicas[i]
        r.overloads += 1
        r.overload_streak += 1
        r.ejected_until, r.eject_streak = None, 0
        said = retry_after if retry_after is not None and 0 <= retry_after < math.inf else 0.0
        wait = max(min(said, self.max_retry_after), self.cooldown.after(r.overload_streak))
        r.cooling_until = max(r.cooling_until, now + wait)

    def failed(self, i: int, why: str, now: float) -> None:
        """Replica ``i`` could not be reached or broke: eject it for an exponential backoff."""
        r = self.replicas[i]
        r.errors += 1
        r.eject_streak += 1
        r.last_error = why
        r.ejected_until = now + self.ejection.after(r.eject_streak)

    def mismatched(self, i: int, why: str) -> None:
        """Replica ``i`` serves another model or engine: never route to it."""
        r = self.replicas[i]
        r.mismatch = r.last_error = why

    # -- when nothing is available ----------------------------------------------------------
    def earliest_cooldown_end(self, now: float) -> float | None:
        """Seconds until the first cooling replica may take requests again (None: none cools)."""
        ends = [
            r.cooling_until - now
            for r in self.replicas
            if r.mismatch is None and r.ejected_until is None and r.cooling_until > now
        ]
        return min(ends) if ends else None

    def earliest_probe(self, now: float) -> float | None:
        """Seconds until the first ejected replica gets its trial request (None: none ejected)."""
        ends = [
            max(0.0, r.ejected_until - now)
            for r in self.replicas
            if r.mismatch is None and r.ejected_until is not None
        ]
        return min(ends) if ends else None


__all__ = [
    "POLICIES",
    "Backoff",
    "CacheAware",
    "CacheState",
    "Policy",
    "Prompt",
    "Replica",
    "ReplicaPicker",
    "ReplicaState",
]
