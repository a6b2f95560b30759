"""A generated token's logprob entry, with its most likely alternatives (OpenAI's chat shape)."""

from __future__ import annotations

import math
from typing import Any

__all__ = ["token_logprob"]


def token_logprob(tokenizer: Any, token: int, logprobs: Any, top: int) -> dict[str, Any]:
    """``{"token", "logprob", "top_logprobs"}`` for ``token``, from the step's logprobs (an mx.array).

    Args:
        tokenizer: The model's tokenizer.
        token: The generated token id.
        logprobs: The step's log-probabilities over the vocabulary.
        top: How many alternatives to list, most likely first.

    Returns:
        The entry; an infinite or NaN logprob is None (JSON has no such numbers).
    """
    import mlx.core as mx

    entry: dict[str, Any] = {
        "token": tokenizer.decode([token]),
        "logprob": _finite(logprobs[token].item()),
        "top_logprobs": [],
    }
    if top > 0:
        ids: list[int] = mx.argpartition(-logprobs, kth=top - 1)[:top].tolist()  # type: ignore[assignment]
        values: list[float] = logprobs[mx.array(ids)].tolist()
        ranked = sorted(zip(ids, values, strict=True), key=lambda p: -p[1])
        entry["top_logprobs"] = [{"token": tokenizer.decode([i]), "logprob": _finite(v)} for i, v in ranked]
    return entry


def _finite(value: float) -> float | None:
    return None if math.isinf(value) or math.isnan(value) else value
