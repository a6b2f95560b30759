"""What a replica has cached, exactly: an index of the KV-cache blocks its engine reports.

vLLM publishes every block it caches or evicts (``--kv-events-config``; :mod:`unillm.fleet.kv_events`
subscribes). A stored block carries its hash, its parent block's hash and its token ids, so the
index keys each block by (parent hash, token ids, LoRA, extra keys, cache salt): a prompt's token
ids, cut into blocks of the engine's block size, walk that chain from the root, and the head that
walks is what the engine holds. unillm's requests carry no salt and, text-only, no extra keys, so
blocks that have them never match. The engine's hash function is never reproduced: its hashes only
link the chain.

    index = BlockIndex()
    index.apply(unpacked_batch)                   # [ts, [event, ...], dp_rank], msgpack-decoded
    index.match([1, 5, 9, ...])                   # tokens of the prompt's head cached, whole blocks

A block may be held in several tiers at once (``medium``: GPU, CPU or storage with KV offloading
or SGLang's HiCache; ``ownership``: which offloading tier): it is held while any tier of this
replica holds it, so its eviction from one tier does not hide a copy in another. Blocks whose
``locality`` is ``REMOTE`` are another machine's and are not indexed.

SGLang publishes the same format, one event per page, the last page of a sequence possibly
partial: the largest block size seen is the engine's, and smaller (partial) blocks are not
indexed. Pure logic: no I/O, no clock. A malformed event raises :class:`MalformedEvents` (the
subscriber then stops trusting the index, and the policy falls back to its prefix tree).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

Hash = bytes | int | str
_Key = tuple[Hash | None, tuple[int, ...], str | None, Any]
_Tier = tuple[Any, Any]  # (medium, ownership)


class MalformedEvents(ValueError):
    """An event batch that is not vLLM's ``KVEventBatch`` (what was wrong, in the message)."""


def _hashable(value: Any) -> Any:
    """An extra key (lists from msgpack) as something a dict can key on."""
    if isinstance(value, list | tuple):
        return tuple(_hashable(v) for v in value)
    return value


def _tier(event: Mapping[str, Any]) -> _Tier:
    """Where an event's blocks are held on the replica: its medium and offloading tier."""
    return (_hashable(event.get("medium")), _hashable(event.get("ownership")))


def _list(event: Mapping[str, Any], field: str) -> list[Any]:
    value = event.get(field)
    if not isinstance(value, list):
        raise MalformedEvents(f"{event.get('type')}.{field} is {type(value).__name__}, not a list")
    return value


class BlockIndex:
    """One replica's cached blocks, from its engine's ``BlockStored`` / ``BlockRemoved`` /
    ``AllBlocksCleared`` events (vLLM's ``vllm.distributed.kv_events``).

    Only the first KV-cache group is indexed (``group_idx`` absent or 0: a plain decoder's one
    group; a hybrid model's other groups cache the same prompts in other layers).
    """

    def __init__(self) -> None:
        self.block_size: int | None = None
        self._child: dict[_Key, Hash] = {}
        self._key: dict[Hash, _Key] = {}
        self._tiers: dict[Hash, set[_Tier]] = {}  # where each block is held

    def __len__(self) -> int:
        return len(self._key)

    def apply(self, batch: Any) -> None:
        """Apply one event batch, as ``msgpack.unpackb(payload)`` gives it.

        Args:
            batch: ``[ts, [event, ...]]`` or ``[ts, [event, ...], dp_rank]``; each event a mapping
                with ``type`` naming its kind.

        Raises:
            MalformedEvents: Not that shape, or a field of the wrong type (the events before it in
                the batch are applied).
        """
        if not isinstance(batch, list | tuple) or len(batch) < 2 or not isinstance(batch[1], list):
            raise MalformedEvents(f"an event batch is [ts, events, ...], got {type(batch).__name__}")
        for event in batch[1]:
            if not isinstance(event, Mapping):
                raise MalformedEvents(f"an event is a map, got {type(event).__name__}")
            try:
                self._event(event)
            except (TypeError, KeyError, IndexError) as e:  # an unhashable hash, odd extra keys
                raise MalformedEvents(f"{event.get('type')}: {type(e).__name__}: {str(e)[:200]}") from None

    def _event(self, event: Mapping[str, Any]) -> None:
        if event.get("group_idx") not in (None, 0) or event.get("locality") == "REMOTE":
            return
        kind = event.get("type")
        if kind == "BlockStored":
            self._stored(event)
        elif kind == "BlockRemoved":
            medium = event.get("medium")
            for h in _list(event, "block_hashes"):
                tiers = self._tiers.get(h)
                if medium is not None and tiers:  # no medium: gone from every tier
                    tiers.discard(_tier(event))
                    if tiers:
                        continue  # still held in another tier
                self._forget(h)
        elif kind == "AllBlocksCleared":
            self._clear()
        # other kinds (a newer engine's) carry no block of the first group's

    def _clear(self) -> None:
        self._child.clear()
        self._key.clear()
        self._tiers.clear()

    def _stored(self, event: Mapping[str, Any]) -> None:
        hashes, tokens, size = (
            _list(event, "block_hashes"),
            _list(event, "token_ids"),
            event.get("block_size"),
        )
        if not isinstance(size, int) or isinstance(size, bool) or size < 1:
            raise MalformedEvents(f"BlockStored.block_size is {size!r}")
        if self.block_size is None or size > self.block_size:  # the first whole block sets it
            if self.block_size is not None:  # what came before were partial pages
                self._clear()
            self.block_size = size
        elif size < self.block_size:  # a partial last page (SGLang): no whole block to match
            return
        extras = event.get("extra_keys") or [None] * len(hashes)
        lora, salt = event.get("lora_name"), event.get("cache_salt")
        parent = event.get("parent_block_hash")
        for j, h in enumerate(hashes):
            block = tuple(tokens[j * size : (j + 1) * size])
            if len(block) < size:
                break
            extra = extras[j] if j < len(extras) else None
            if lora is not None and isinstance(extra, list) and extra[:1] == [lora]:
                extra = extra[1:]  # the adapter's name leads its blocks' extra keys
            extra = _hashable(extra) or None
            if salt is not None:  # SGLang names a request's cache salt apart (vLLM: in extra_keys)
                extra = (extra, ("cache_salt", salt))
            key: _Key = (parent, block, lora, extra)
            if self._child.get(key) != h:
                self._forget(self._child.get(key))
                self._child[key] = h
                self._key[h] = key
            self._tiers.setdefault(h, set()).add(_tier(event))
            parent = h

    def _forget(self, h: Hash | None) -> None:
        if h is None:
            return
        self._tiers.pop(h, None)
        key = self._key.pop(h, None)
        if key is not None and self._child.get(key) == h:
            del self._child[key]

    def match(self, tokens: Sequence[int], lora: str | None = None) -> int:
        """How many of ``tokens``' first tokens the replica holds, in whole blocks.

        Args:
            tokens: The prompt's token ids, as the engine tokenizes it.
            lora: The LoRA adapter the request names (blocks are cached per adapter).

        Returns:
            A multiple of the block size, at most ``len(tokens)``.
        """
        size = self.block_size
        if not size:
            return 0
        parent: Hash | None = None
        held = 0
        for start in range(0, len(tokens) - size + 1, size):
            h = self._child.get((parent, tuple(tokens[start : start + size]), lora, None))
            if h is None:
                break
            parent, held = h, start + size
        return held


class InFlight:
    """The prompts sent to one replica and not answered yet, as chains of whole blocks.

    An engine reports a prompt's blocks once it has computed them, so for a moment after a prompt
    is sent its replica holds more than its events say: conversations starting together on one
    shared system prompt would each see it nowhere and spread it over every replica. Counting the
    prompts in flight closes that gap. Blocks are keyed as in :class:`BlockIndex`, with a count of
    the prompts that hold each one.
    """

    def __init__(self) -> None:
        self._nodes: dict[tuple[int, tuple[int, ...], str | None], list[int]] = {}
        self._ids = 0

    def __len__(self) -> int:
        return len(self._nodes)

    def add(self, tokens: Sequence[int], lora: str | None, size: int) -> None:
        """One more prompt in flight.

        Args:
            tokens: Its token ids.
            lora: Its LoRA adapter.
            size: The engine's block size.
        """
        parent = 0
        for start in range(0, len(tokens) - size + 1, size):
            key = (parent, tuple(tokens[start : start + size]), lora)
            node = self._nodes.get(key)
            if node is None:
                self._ids += 1
                node = self._nodes[key] = [self._ids, 0]
            node[1] += 1
            parent = node[0]

    def remove(self, tokens: Sequence[int], lora: str | None, size: int) -> None:
        """A prompt added with the same arguments is answered (or given up).

        Args:
            tokens: Its token ids.
            lora: Its LoRA adapter.
            size: The block size it was added with.
        """
        parent = 0
        for start in range(0, len(tokens) - size + 1, size):
            key = (parent, tuple(tokens[start : start + size]), lora)
            node = self._nodes.get(key)
            if node is None:
                return
            node[1] -= 1
            if node[1] <= 0:
                del self._nodes[key]
            parent = node[0]

    def match(self, tokens: Sequence[int], lora: str | None, size: int) -> int:
        """Tokens of ``tokens``' head that a prompt in flight shares, in whole blocks.

        Args:
            tokens: The new prompt's token ids.
            lora: Its LoRA adapter.
            size: The engine's block size.
        """
        parent, held = 0, 0
        for start in range(0, len(tokens) - size + 1, size):
            node = self._nodes.get((parent, tuple(tokens[start : start + size]), lora))
            if node is None:
                break
            parent, held = node[0], start + size
        return held


__all__ = ["BlockIndex", "InFlight", "MalformedEvents"]
