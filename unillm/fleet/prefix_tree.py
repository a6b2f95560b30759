"""What each replica has probably cached: an approximate prefix tree of the prompts sent to it.

The ``cache_aware`` policy of :mod:`unillm.fleet.picker` keeps one :class:`PrefixTree` per
replica. A prompt (or the serialized messages) is cut into token-ish chunks (:func:`chunks`: a
word with its leading spaces, at most 16 characters); the tree is a trie of those chunks, so a
conversation's growing history shares one path. :meth:`PrefixTree.match` says how many
characters of a new prompt's head the replica was sent before: the part its prefix cache
likely still holds. Pure logic: no I/O, no clock.

Size: each tree holds at most ``max_chunks`` chunks (nodes). Inserting past the bound evicts
the least recently used leaves first (a prompt touches its whole path, deepest node first, so a
node is never older than its descendants and the oldest node is always a leaf); a shared
system prompt, touched by every conversation, is the last to go. About 150 bytes a chunk.

It is an approximation, as vllm-router's and smg's ``cache_aware`` trees are: it sees only what
this client sent, not what the engine evicted or what other clients sent.
"""

from __future__ import annotations

import re
from collections import OrderedDict
from collections.abc import Sequence

from unillm.errors import InvalidOptions

_CHUNK = re.compile(r"\s*\S{1,16}|\s+")


def chunks(text: str) -> list[str]:
    """``text`` cut into token-ish chunks: each word with its leading whitespace (at most 16
    non-space characters a chunk); joined back they are ``text``.

    Args:
        text: A prompt, or messages serialized to text.

    Returns:
        The chunks, in order.
    """
    return _CHUNK.findall(text)


class _Node:
    __slots__ = ("children", "key", "parent")

    def __init__(self, key: str, parent: _Node | None) -> None:
        self.key = key
        self.parent = parent
        self.children: dict[str, _Node] = {}


class PrefixTree:
    """The chunked prompts sent to one replica, at most ``max_chunks`` of them (LRU leaves evicted).

    Args:
        max_chunks: The most chunks (trie nodes) kept; a positive integer.

    Raises:
        InvalidOptions: ``max_chunks`` is not a positive integer.
    """

    def __init__(self, max_chunks: int) -> None:
        if not isinstance(max_chunks, int) or isinstance(max_chunks, bool) or max_chunks < 1:
            raise InvalidOptions(f"max_chunks must be a positive integer, got {max_chunks!r}")
        self.max_chunks = max_chunks
        self._root = _Node("", None)
        self._lru: OrderedDict[_Node, None] = OrderedDict()  # oldest first; the root is never in it

    def __len__(self) -> int:
        return len(self._lru)

    def match(self, pieces: Sequence[str]) -> int:
        """How many characters of ``pieces``' head the tree holds (whole chunks only).

        Args:
            pieces: The prompt's chunks (:func:`chunks`).

        Returns:
            The length in characters of the longest stored prefix.
        """
        node, matched = self._root, 0
        for piece in pieces:
            child = node.children.get(piece)
            if child is None:
                break
            matched += len(piece)
            node = child
        return matched

    def insert(self, pieces: Sequence[str]) -> None:
        """Record that ``pieces`` were sent: the path becomes the most recently used, and the
        least recently used leaves go while the tree holds more than ``max_chunks`` chunks.

        Args:
            pieces: The prompt's chunks (:func:`chunks`).
        """
        node, path = self._root, []
        for piece in pieces:
            child = node.children.get(piece)
            if child is None:
                child = node.children[piece] = _Node(piece, node)
            path.append(child)
            node = child
        lru = self._lru
        for n in reversed(path):  # deepest first: every ancestor ends up more recent than it
            lru[n] = None
            lru.move_to_end(n)
        while len(lru) > self.max_chunks:
            leaf, _ = lru.popitem(last=False)
            assert leaf.parent is not None and not leaf.children
            del leaf.parent.children[leaf.key]

    def clear(self) -> None:
        """Forget everything (the replica restarted, or its cache was reset)."""
        self._root = _Node("", None)
        self._lru.clear()


__all__ = ["PrefixTree", "chunks"]
