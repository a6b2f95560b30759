"""What callers get back: typed completions and stream deltas, the same for every engine.

    r = await llm.generate("Hi", max_tokens=8)
    r.text, r.finish_reason, r.usage.completion_tokens, r.timings.total_s
"""

from __future__ import annotations

from typing import Any, Generic, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, model_validator

T = TypeVar("T")


class Usage(BaseModel):
    """Token counts reported by the engine.

    ``total_tokens`` is the engine's own total when it sends one, else prompt + completion.
    """

    model_config = ConfigDict(frozen=True)

    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0

    @model_validator(mode="before")
    @classmethod
    def _total(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("total_tokens") is None:
            counts = (data.get("prompt_tokens") or 0, data.get("completion_tokens") or 0)
            data = {**data, "total_tokens": sum(counts)}
        return data


class Timings(BaseModel):
    """Client-side timings in seconds.

    ``first_token_s`` is measured on streams (time to the first text); it is ``None`` for a
    non-streamed answer, which arrives all at once.
    """

    model_config = ConfigDict(frozen=True)

    total_s: float
    first_token_s: float | None = None
    tokens_per_s: float | None = None


class TopLogprob(BaseModel):
    """One alternative token and its log-probability."""

    model_config = ConfigDict(frozen=True)

    token: str
    logprob: float


class TokenLogprob(BaseModel):
    """The sampled token, its log-probability and the top alternatives (if asked)."""

    model_config = ConfigDict(frozen=True)

    token: str
    logprob: float
    top: list[TopLogprob] = []


class CompletionChoice(BaseModel, Generic[T]):
    """One generated answer (there are ``n`` of them when ``n > 1``)."""

    index: int
    text: str
    finish_reason: str | None
    logprobs: list[TokenLogprob] | None = None
    parsed: T | None = None


class RouteDecision(BaseModel):
    """Which route a prompt took, and why: ``reason`` is ``matched``, ``default`` or ``fallback``
    (the embedder failed and the router was told to fall back). ``scores`` holds the best
    similarity per route (for routes with utterances); ``signals`` the signals that fired."""

    model_config = ConfigDict(frozen=True)

    route: str | None
    reason: Literal["matched", "default", "fallback"]
    score: float | None = None
    scores: dict[str, float] = {}
    signals: tuple[str, ...] = ()
    seconds: float = 0.0


class Completion(BaseModel, Generic[T]):
    """A finished generation. ``text``/``finish_reason``/``parsed`` are those of choice 0.

    ``parsed`` is set for ``output=`` constraints: a pydantic instance for a model class,
    the decoded JSON for a schema dict, the text for Regex/Choice/Grammar.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    choices: list[CompletionChoice[T]]
    usage: Usage
    timings: Timings
    engine: str
    engine_version: str | None
    model: str
    route: RouteDecision | None = None

    @property
    def text(self) -> str:
        """The text of the first choice."""
        return self.choices[0].text

    @property
    def finish_reason(self) -> str | None:
        """Why the first choice stopped: "stop", "length", ..."""
        return self.choices[0].finish_reason

    @property
    def parsed(self) -> T | None:
        """The first choice's structured output, when ``output=`` was given."""
        return self.choices[0].parsed

    @property
    def logprobs(self) -> list[TokenLogprob] | None:
        """The first choice's token log-probabilities, when asked for."""
        return self.choices[0].logprobs


class Delta(BaseModel):
    """A piece of a stream. The last delta carries ``usage``, ``timings`` and the finish reason."""

    index: int = 0
    text: str = ""
    finish_reason: str | None = None
    logprobs: list[TokenLogprob] | None = None
    usage: Usage | None = None
    timings: Timings | None = None


class AdapterInfo(BaseModel):
    """A LoRA adapter the engine currently serves."""

    model_config = ConfigDict(frozen=True)

    name: str
    path: str | None = None

