"""Embedding and tokenization requests: validated once, split into batches, answers checked.

Pure helpers for :meth:`unillm.LLM.embed` and :meth:`unillm.LLM.tokenize` (the LLM does the I/O,
adapters translate)::

    batches = embed_batches(["a", "b", "c"], batch_size=2, dimensions=None, timeout=None)
    # -> [EmbedRequest(texts=("a", "b")), EmbedRequest(texts=("c",))]
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from unillm.content import normalize_messages
from unillm.errors import InvalidOptions, MalformedResponse
from unillm.options import REPLAY_MODES, check_option
from unillm.tools import Tool, to_tools

__all__ = [
    "EmbedBatch",
    "EmbedRequest",
    "TokenizeRequest",
    "check_batch",
    "embed_batches",
    "tokenize_request",
]

DEFAULT_BATCH_SIZE = 64


@dataclass(frozen=True, slots=True)
class EmbedRequest:
    """One batch of texts to embed (what an adapter turns into one HTTP call)."""

    texts: tuple[str, ...]
    dimensions: int | None = None
    timeout: float | None = None


@dataclass(frozen=True, slots=True)
class EmbedBatch:
    """What an adapter reads from one embedding answer: vectors in input order, tokens used."""

    vectors: list[list[float]]
    prompt_tokens: int = 0


@dataclass(frozen=True, slots=True)
class TokenizeRequest:
    """A text, or chat messages rendered with the model's chat template, to tokenize."""

    text: str | None = None
    messages: tuple[dict[str, Any], ...] | None = None
    #: The tools the chat template lists (what a chat request with ``tools=`` renders).
    tools: tuple[Tool, ...] | None = None
    #: How earlier thoughts are rendered, as ``generate(replay_reasoning=...)`` sends them.
    replay_reasoning: str | None = None


def embed_batches(
    texts: str | Sequence[str],
    *,
    batch_size: int,
    dimensions: int | None,
    timeout: float | None,
) -> list[EmbedRequest]:
    """Validate ``embed()``'s arguments and split the texts into requests of ``batch_size``."""
    items = [texts] if isinstance(texts, str) else texts
    if isinstance(items, (bytes, Mapping)) or not isinstance(items, Sequence) or not items:
        raise InvalidOptions('embed() needs a string or a non-empty list of strings, e.g. ["a cat"]')
    for i, text in enumerate(items):
        if not isinstance(text, str) or not text:
            raise InvalidOptions(f"texts[{i}] must be a non-empty string, got {text!r}")
    for name, value in (("batch_size", batch_size), ("dimensions", dimensions)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise InvalidOptions(f"{name} must be a positive integer, got {value!r}")
    if timeout is not None:
        check_option("timeout", timeout)
    return [
        EmbedRequest(tuple(items[i : i + batch_size]), dimensions, timeout)
        for i in range(0, len(items), batch_size)
    ]


def check_batch(batch: EmbedBatch, request: EmbedRequest, engine: str, dimensions: int | None) -> int:
    """The vectors' common length; refuses answers with a wrong count or inconsistent lengths.

    ``dimensions`` is the length seen in earlier batches (or asked for with ``dimensions=``).
    """
    if len(batch.vectors) != len(request.texts):
        raise MalformedResponse(
            f"{engine} returned {len(batch.vectors)} embeddings for {len(request.texts)} texts"
        )
    lengths = {len(v) for v in batch.vectors}
    if len(lengths) != 1 or 0 in lengths:
        raise MalformedResponse(f"{engine} returned embeddings of different lengths {sorted(lengths)}")
    (length,) = lengths
    if dimensions is not None and length != dimensions:
        asked = request.dimensions is not None and request.dimensions == dimensions
        raise MalformedResponse(
            f"{engine} returned {length}-dimensional embeddings, expected {dimensions}"
            + (" (dimensions= asked for it)" if asked else " (earlier batches had that length)")
        )
    return length


def tokenize_request(
    text: str | None,
    messages: Sequence[Any] | None,
    *,
    timeout: float | None = None,
    tools: Sequence[Any] | None = None,
    replay_reasoning: str | None = None,
) -> TokenizeRequest:
    """Validate ``tokenize()``'s arguments: a string, or chat messages (not both), with the tools
    and reasoning replay a chat request would render, and its timeout."""
    if timeout is not None:
        check_option("timeout", timeout)
    if replay_reasoning is not None and replay_reasoning not in REPLAY_MODES:
        raise InvalidOptions(f"replay_reasoning={replay_reasoning!r} is not one of {', '.join(REPLAY_MODES)}")
    if (tools or replay_reasoning is not None) and messages is None:
        raise InvalidOptions("tools= and replay_reasoning= render chat messages: pass messages=[...]")
    if (text is None) == (messages is None):
        raise InvalidOptions('tokenize() needs a text or messages=[{"role": "user", "content": "hi"}]')
    if text is not None and not isinstance(text, str):
        raise InvalidOptions(f"tokenize() text must be a string, got {type(text).__name__}")
    return TokenizeRequest(
        text=text,
        messages=None if messages is None else normalize_messages(messages),
        tools=to_tools(tools) if tools else None,
        replay_reasoning=replay_reasoning,
    )


def float_vectors(rows: Any, engine: str) -> list[list[float]]:
    """Embedding rows from JSON, checked for shape only: the numbers are validated once, when
    :class:`~unillm.results.Embeddings` is built (strictly, at pydantic-core speed).

    Args:
        rows: The answer's embedding rows, as decoded JSON.
        engine: The adapter's name, for the error message.

    Raises:
        MalformedResponse: The rows are not lists (e.g. base64-encoded).
    """
    if type(rows) is not list or not all(type(row) is list for row in rows):
        raise MalformedResponse(
            f"{engine}: embeddings must be lists of numbers (ask for encoding_format='float')"
        )
    return rows
