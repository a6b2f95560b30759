"""One choice of a request decoded by mlx-lm on the worker thread, as Text and Finish events."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from unillm_mlx.inprocess.channel import Cancelled
from unillm_mlx.inprocess.counters import Counters
from unillm_mlx.inprocess.detokenize import Detokenizer, StopText
from unillm_mlx.inprocess.events import Event, Finish, Text
from unillm_mlx.inprocess.logprobs import token_logprob
from unillm_mlx.inprocess.models import Draft
from unillm_mlx.inprocess.parsing import Job
from unillm_mlx.inprocess.sampling import logits_processors, sampler

if TYPE_CHECKING:
    from mlx_lm.generate import GenerationResponse

__all__ = ["Prepared", "generate_choice"]


@dataclass(frozen=True)
class Prepared:
    """A request ready to decode: its model, tokenizer, prompt ids and compiled grammar (if any)."""

    model: Any
    tokenizer: Any
    prompt: list[int]
    grammar: str | None = None
    lltokenizer: Any = None


def generate_choice(
    job: Job,
    index: int,
    prepared: Prepared,
    *,
    draft: Draft | None,
    counters: Counters,
    emit: Callable[[Event], None],
) -> None:
    """Decode choice ``index`` of ``job``, emitting its text as it comes and then its Finish.

    Raises:
        Cancelled: The request was cancelled.
    """
    import mlx.core as mx
    from mlx_lm import stream_generate

    body = job.body
    if body.get("seed") is not None:
        mx.random.seed(body["seed"] + index)
    sample = sampler(body)
    skip = 1 if draft is not None else len(prepared.prompt)  # mlx-lm passes these leading tokens
    processors = logits_processors(
        body, grammar=prepared.grammar, lltokenizer=prepared.lltokenizer, skip=skip
    )
    speculative: dict[str, Any] = {}
    if draft is not None:
        speculative = {"draft_model": draft.model, "num_draft_tokens": draft.num_tokens}
    text = _ChoiceText(job, index, prepared, emit)
    reason, tokens = "length", 0
    for out in stream_generate(
        prepared.model,
        prepared.tokenizer,
        mx.array(prepared.prompt),
        max_tokens=job.max_tokens,
        sampler=sample,
        logits_processors=processors,
        **speculative,
    ):
        if job.cancelled.is_set():
            raise Cancelled
        tokens = out.generation_tokens
        counters.generation_tokens += 1
        counters.spec_decode_num_accepted_tokens += bool(out.from_draft)
        if text.add(out):
            reason = "stop"
            break
        if out.finish_reason is not None:
            reason = out.finish_reason
            text.end()
    emit(Finish(index, reason, tokens))


class _ChoiceText:
    """One choice's tokens as Text events: decoded as vLLM does, cut at the stop strings."""

    def __init__(self, job: Job, index: int, prepared: Prepared, emit: Callable[[Event], None]) -> None:
        self._job, self._index, self._emit = job, index, emit
        self._tokenizer = prepared.tokenizer
        self._words = Detokenizer(prepared.tokenizer, prepared.prompt)
        self._stops = StopText(job.stop)

    def add(self, out: GenerationResponse) -> bool:
        """Emit the text ``out``'s token completes; True when a stop string ends the choice."""
        eos = out.finish_reason == "stop"
        logprobs = None
        if self._job.logprobs and not eos:
            logprobs = [token_logprob(self._tokenizer, out.token, out.logprobs, self._job.top_logprobs)]
        # mlx-lm's own text (out.text) drops the first token's leading space; decode as vLLM does
        piece = "" if eos else self._words.add(out.token)
        if out.finish_reason is not None:
            piece += self._words.flush()
        text, stopped = self._stops.feed(piece)
        if text or logprobs:
            self._emit(Text(self._index, text, logprobs))
        return stopped

    def end(self) -> None:
        """Emit what the stop strings held back, at the end of the choice."""
        tail = self._stops.flush()
        if tail:
            self._emit(Text(self._index, tail, None))
