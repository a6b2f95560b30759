"""mlx-lm's sampler and logits processors for a request's sampling options (and its grammar)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mlx_lm.sample_utils import LogitsProcessor, Sampler

__all__ = ["PENALTY_CONTEXT", "logit_bias", "logits_processors", "sampler"]

PENALTY_CONTEXT = 20  # tokens each penalty looks back over (mlx-lm's default, as mlx_lm.server)


def sampler(body: dict[str, Any]) -> Sampler:
    """The token sampler for the request's temperature, top_p, min_p and top_k (unset: greedy, off)."""
    from mlx_lm.sample_utils import make_sampler

    return make_sampler(
        temp=body.get("temperature") or 0.0,
        top_p=body.get("top_p") or 0.0,
        min_p=body.get("min_p") or 0.0,
        top_k=body.get("top_k") or 0,
    )


def logit_bias(body: dict[str, Any]) -> dict[int, float] | None:
    """The request's ``logit_bias`` (OpenAI's token-id strings to biases) as mlx-lm takes it.

    Args:
        body: The request's JSON object.

    Returns:
        Token id to bias, or None when the request has none.
    """
    bias = body.get("logit_bias")
    return {int(token): float(value) for token, value in bias.items()} if bias else None


def logits_processors(
    body: dict[str, Any], *, grammar: str | None, lltokenizer: Any, skip: int
) -> list[LogitsProcessor]:
    """The request's repetition, presence and frequency penalties, then its grammar if any.

    Args:
        body: The request's JSON object.
        grammar: The compiled output constraint, or None.
        lltokenizer: llguidance's tokenizer for the grammar.
        skip: Leading tokens mlx-lm passes to processors that were not generated.

    Returns:
        The processors, in the order mlx-lm applies them.
    """
    from mlx_lm.sample_utils import make_logits_processors

    processors = make_logits_processors(
        logit_bias=logit_bias(body),
        repetition_penalty=body.get("repetition_penalty"),
        repetition_context_size=PENALTY_CONTEXT,
        presence_penalty=body.get("presence_penalty"),
        presence_context_size=PENALTY_CONTEXT,
        frequency_penalty=body.get("frequency_penalty"),
        frequency_context_size=PENALTY_CONTEXT,
    )
    if grammar is not None:
        from unillm_mlx.grammar import GrammarProcessor

        processors.append(GrammarProcessor(lltokenizer, grammar, skip=skip))
    return processors
