"""The replicas' KV-cache events, live: one ZMQ subscription per replica feeding a :class:`BlockIndex`.

    events = KVEvents(["ipc:///tmp/kv-0.sock", "ipc:///tmp/kv-1.sock"], PromptTokens.from_folder(...),
                      replay=["ipc:///tmp/kv-0-replay.sock", "ipc:///tmp/kv-1-replay.sock"])
    await events.start()       # subscribe; replay what each engine published before
    fleet = unillm.Fleet(llms, policy="cache_aware", kv_events=events)   # the fleet closes it
    events.status()            # per replica: usable, batches, blocks held, sequence gaps

Each engine runs with ``--kv-events-config '{"enable_kv_cache_events": true, "publisher": "zmq",
"endpoint": "ipc:///tmp/kv-0.sock", "replay_endpoint": "ipc:///tmp/kv-0-replay.sock"}'``
(``unillm.launch(..., policy="cache_aware")`` adds it; SGLang takes the same). The engine sends
``(topic, 8-byte big-endian sequence number, msgpack KVEventBatch)``. An engine caches blocks
before anyone subscribes (a launch's warm-up request, other clients), and a block already cached
is never reported again, so on start each subscription asks the engine's replay endpoint for every
batch it still buffers (vLLM and SGLang keep the last 10,000), then applies the live ones after
them. A lost message (the publisher's high-water mark) is counted in ``gaps``: the index may then
hold a block the engine evicted, as an approximate tree would. A sequence that begins anew is an
engine restarted behind the endpoint: its index is emptied (``restarts``). A batch that does not decode marks
the replica's index unusable: the policy uses its prefix tree for that replica from then on, and a
warning is logged once. Needs ``pyzmq`` and ``msgpack`` (``pip install 'unillm-sdk[kv-events]'``);
asyncio only.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from unillm.errors import InvalidOptions
from unillm.fleet.kv_index import BlockIndex, InFlight, MalformedEvents
from unillm.options import Request

if TYPE_CHECKING:
    from unillm.fleet.prompt_tokens import PromptTokens

log = logging.getLogger("unillm.fleet")
#: Seconds the replay at the start waits for each message before going on without it.
REPLAY_WAIT = 2.0
END_SEQ = (-1).to_bytes(8, "big", signed=True)  # the replay's end marker


@dataclass
class ReplicaEvents:
    """What one replica's subscription has seen."""

    endpoint: str
    index: BlockIndex
    in_flight: InFlight = field(default_factory=InFlight)  # sent, not yet answered
    batches: int = 0
    replayed: int = 0  # of the batches, those asked for at the start
    gaps: int = 0
    next_seq: int | None = None
    replay_overlap: bool = False  # live messages may repeat replayed ones (until a newer one)
    restarts: int = 0  # the engine's sequence began anew: its cache did too
    broken: str | None = None  # why the index is no longer used

    @property
    def usable(self) -> bool:
        """True while the index is trusted."""
        return self.broken is None


class KVEvents:
    """Live KV-cache state of a fleet's replicas, for the ``cache_aware`` policy.

    Args:
        endpoints: Each replica's ZMQ endpoint (the engine's ``--kv-events-config`` endpoint), in
            the fleet's order.
        tokens: Turns a request into the token ids the engines see.
        replay: Each replica's replay endpoint (``replay_endpoint``), in the same order; empty:
            what was published before :meth:`start` is not asked for.

    Raises:
        InvalidOptions: ``pyzmq`` or ``msgpack`` is missing, or an endpoint is empty; at
            :meth:`start`, not on asyncio.
    """

    def __init__(self, endpoints: Sequence[str], tokens: PromptTokens, replay: Sequence[str] = ()) -> None:
        try:
            import msgpack  # noqa: F401
            import zmq  # noqa: F401
        except ImportError:
            raise InvalidOptions(
                "KV-cache events need pyzmq and msgpack: pip install 'unillm-sdk[kv-events]'"
            ) from None
        if not endpoints or not all(isinstance(e, str) and e for e in endpoints):
            raise InvalidOptions(
                f"KV-cache events need one ZMQ endpoint per replica, got {list(endpoints)!r}"
            )
        if replay and len(replay) != len(endpoints):
            raise InvalidOptions(
                f"{len(replay)} replay endpoints for {len(endpoints)} replicas: give one each"
            )
        self.replicas = [ReplicaEvents(e, BlockIndex()) for e in endpoints]
        self._replay: list[str | None] = [*replay] or [None] * len(endpoints)
        self._tokens = tokens
        self._context: Any = None
        self._tasks: list[asyncio.Task[None]] = []

    def __len__(self) -> int:
        return len(self.replicas)

    async def start(self) -> None:
        """Subscribe to every replica's events and, with replay endpoints, apply what each engine
        published before (returns once the replays are in: the index is current). Idempotent."""
        if self._context is not None:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # trio: pyzmq's sockets await on asyncio only
            raise InvalidOptions(
                "KV-cache events are read on asyncio only (run the fleet under asyncio)"
            ) from None
        import zmq
        import zmq.asyncio

        self._context = zmq.asyncio.Context()
        sockets = []
        for replica in self.replicas:  # connected first: live messages queue during the replays
            socket = self._context.socket(zmq.SUB)
            socket.setsockopt(zmq.SUBSCRIBE, b"")
            socket.connect(replica.endpoint)
            sockets.append(socket)
        asked = [self._ask_replay(r, e) for r, e in zip(self.replicas, self._replay, strict=True) if e]
        try:
            await asyncio.gather(*asked)
        except BaseException:  # cancelled mid-replay: nothing half-started stays behind
            self._context.destroy(linger=0)
            self._context = None
            raise
        self._tasks = [
            loop.create_task(self._listen(r, s)) for r, s in zip(self.replicas, sockets, strict=True)
        ]

    async def aclose(self) -> None:
        """Stop listening and close the sockets."""
        for task in self._tasks:
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []
        if self._context is not None:
            self._context.destroy(linger=0)
            self._context = None

    async def _listen(self, replica: ReplicaEvents, socket: Any) -> None:
        while replica.usable:
            receive(replica, await socket.recv_multipart())

    async def _ask_replay(self, replica: ReplicaEvents, endpoint: str) -> None:
        """Apply every batch the engine still buffers (from sequence 0), until its end marker or
        :data:`REPLAY_WAIT` seconds without a message."""
        import zmq

        dealer = self._context.socket(zmq.DEALER)
        dealer.connect(endpoint)
        try:
            await dealer.send_multipart([b"", (0).to_bytes(8, "big")])
            while replica.usable:
                frames = await asyncio.wait_for(dealer.recv_multipart(), REPLAY_WAIT)
                if len(frames) >= 3 and frames[2] == END_SEQ:
                    return
                receive(replica, frames[1:])
                replica.replayed += 1
                replica.replay_overlap = True
        except asyncio.TimeoutError:
            log.warning(
                "no replay of KV-cache events from %s in %ss: earlier blocks unknown", endpoint, REPLAY_WAIT
            )
        finally:
            dealer.close(0)

    # -- what the picker asks (unillm.fleet.picker.CacheState) ------------------------------
    def tokens(self, request: Request) -> list[int] | None:
        """The request's prompt as token ids, or None when it cannot be known here."""
        return self._tokens(request)

    def held(self, i: int, tokens: Sequence[int], lora: str | None) -> int | None:
        """Tokens of the prompt's head replica ``i`` caches or is computing for a prompt in
        flight; None when its events are not usable."""
        replica = self.replicas[i]
        size = replica.index.block_size
        if not replica.usable:
            return None
        if size is None:  # no block reported yet: nothing cached
            return 0
        return max(replica.index.match(tokens, lora), replica.in_flight.match(tokens, lora, size))

    def sent(self, i: int, tokens: Sequence[int], lora: str | None) -> int | None:
        """A prompt goes to replica ``i``: counted in flight until :meth:`done`. Returns the block
        size it was counted with (None: not counted, the engine's block size is not known yet)."""
        size = self.replicas[i].index.block_size
        if size is not None:
            self.replicas[i].in_flight.add(tokens, lora, size)
        return size

    def done(self, i: int, tokens: Sequence[int], lora: str | None, size: int) -> None:
        """The prompt :meth:`sent` counted on replica ``i`` is answered or given up."""
        self.replicas[i].in_flight.remove(tokens, lora, size)

    def status(self) -> list[dict[str, Any]]:
        """Per replica: endpoint, usable, batches (replayed ones too), blocks held, sequence gaps,
        restarts seen, why not usable."""
        return [
            {
                "endpoint": r.endpoint,
                "usable": r.usable,
                "batches": r.batches,
                "replayed": r.replayed,
                "blocks": len(r.index),
                "gaps": r.gaps,
                "restarts": r.restarts,
                "broken": r.broken,
            }
            for r in self.replicas
        ]


def receive(replica: ReplicaEvents, frames: Sequence[bytes]) -> None:
    """Apply one published message to the replica's index (or mark the index unusable).

    Args:
        replica: The subscription it arrived on.
        frames: ``(topic, sequence, payload)`` as vLLM sends them.
    """
    import msgpack

    try:
        if len(frames) != 3 or len(frames[1]) != 8:
            raise MalformedEvents(f"expected (topic, 8-byte sequence, payload), got {len(frames)} frames")
        seq = int.from_bytes(frames[1], "big")
        if replica.next_seq is not None and seq < replica.next_seq:
            if replica.replay_overlap:
                return  # replayed already
            replica.index.apply([0.0, [{"type": "AllBlocksCleared"}]])  # the engine restarted: seq anew
            replica.restarts += 1
            replica.next_seq = None
        replica.replay_overlap = False
        replica.index.apply(msgpack.unpackb(frames[2], raw=False, strict_map_key=False))
    except Exception as e:  # malformed: the engine and unillm disagree on the format
        replica.broken = f"{type(e).__name__}: {str(e)[:200]}"
        log.warning(
            "KV-cache events from %s unusable (%s): routing by the prefix tree",
            replica.endpoint,
            replica.broken,
        )
        return
    if replica.next_seq is not None and seq != replica.next_seq:
        replica.gaps += 1
    replica.next_seq = seq + 1
    replica.batches += 1


__all__ = ["KVEvents", "ReplicaEvents", "receive"]
