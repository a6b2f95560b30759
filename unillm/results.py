"""What callers get back: typed completions and stream deltas, the same for every engine.

r = await llm.generate("Hi", max_tokens=8)
r.text, r.finish_reason, r.usage.completion_tokens, r.timings.total_s
"""

from __future__ import annotations

from typing import Annotated, Any, Generic, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, model_validator

T = TypeVar("T")
#: A token count an engine reports in a detail of its usage: a whole number >= 0, never a
#: bool or a string (an answer carrying one is malformed).
TokenCount = Annotated[int, Field(ge=0, strict=True)]


class Usage(BaseModel):
    """Token counts reported by the engine.

    ``total_tokens`` is the engine's own total when it sends one, else prompt + completion.
    ``cached_tokens`` and ``reasoning_tokens`` are None when the engine does not report them
    (vLLM reports cached tokens when launched with ``--enable-prompt-tokens-details``, SGLang
    with ``--enable-cache-report``: ``unillm.launch`` turns both on).
    """

    model_config = ConfigDict(frozen=True)

    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0
    #: Tokens of the model's thinking, part of ``completion_tokens``; None: the engine does not count them.
    reasoning_tokens: TokenCount | None = None
    #: Prompt tokens the engine served from its prefix cache, part of ``prompt_tokens``; None: not reported.
    cached_tokens: TokenCount | None = None

    @model_validator(mode="before")
    @classmethod
    def _total(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("total_tokens") is None:
            counts = (data.get("prompt_tokens") or 0, data.get("completion_tokens") or 0)
            data = {**data, "total_tokens": sum(counts)}
        return data

    def __add__(self, other: Usage) -> Usage:
        """The counts of two answers together (a detail stays None only if neither reports it)."""
        return Usage(
            prompt_tokens=self.prompt_tokens + other.prompt_tokens,
            completion_tokens=self.completion_tokens + other.completion_tokens,
            total_tokens=self.total_tokens + other.total_tokens,
            reasoning_tokens=_plus(self.reasoning_tokens, other.reasoning_tokens),
            cached_tokens=_plus(self.cached_tokens, other.cached_tokens),
        )


def _plus(a: int | None, b: int | None) -> int | None:
    return None if a is None and b is None else (a or 0) + (b or 0)


class Timings(BaseModel):
    """Client-side timings in seconds, measured as ``vllm bench serve`` defines them.

    * ``total_s``: end-to-end latency, from sending the request to the end of the answer.
    * ``ttft_s``: time to the first content chunk, text, thought or tool-call piece (streams; ``None``
      for a non-streamed answer, which arrives all at once).
    * ``itl_s``: every gap between consecutive content chunks (streams), in order. An engine may
      pack several tokens in one chunk (speculative decoding, stream intervals): these are
      chunk gaps, not token gaps.
    * ``tpot_s``: time per output token after the first, ``(total_s - ttft_s) /
      (output tokens - 1)`` with the engine's token count (streams of one choice with at
      least 2 output tokens).
    * ``tokens_per_s``: output tokens / ``total_s``.

    Streams measure choice 0 (the text of ``Stream.text``).
    """

    model_config = ConfigDict(frozen=True)

    total_s: float
    ttft_s: float | None = None
    itl_s: tuple[float, ...] = ()
    tpot_s: float | None = None
    tokens_per_s: float | None = None

    @property
    def first_token_s(self) -> float | None:
        """Same as ``ttft_s`` (the name of earlier versions)."""
        return self.ttft_s


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


class ToolCall(BaseModel):
    """A call the model made to one of the ``tools``.

    ``arguments`` is the raw JSON the engine produced. ``parsed`` holds them validated against
    the tool's schema: an instance when the tool was a pydantic class, else a dict (a function's
    arguments coerced to its type hints, ready for ``fn(**call.parsed)`` unless it has
    positional-only ones). When they do not validate (e.g. cut by ``max_tokens``), ``parsed`` is
    None and ``error`` says why; nothing is raised, so the rest of the answer stays usable.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    id: str
    name: str
    arguments: str
    parsed: Any = None
    error: str | None = None

    @property
    def valid(self) -> bool:
        """True when the arguments validated against the tool's schema."""
        return self.error is None

    def to_openai(self) -> dict[str, Any]:
        """The call as an OpenAI assistant-message ``tool_calls`` entry."""
        return {
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": self.arguments},
        }


class ToolCallDelta(BaseModel):
    """A piece of a streamed tool call: ``id`` and ``name`` come first, then ``arguments``
    fragments; ``index`` is the call's position in the answer. Join them with
    :class:`unillm.tools.ToolCallAccumulator` (``Stream.tool_calls`` does it for you)."""

    index: int = 0
    id: str | None = None
    name: str | None = None
    arguments: str = ""


class CompletionChoice(BaseModel, Generic[T]):
    """One generated answer (there are ``n`` of them when ``n > 1``)."""

    index: int
    text: str
    finish_reason: str | None
    logprobs: list[TokenLogprob] | None = None
    parsed: T | None = None
    tool_calls: list[ToolCall] = []
    reasoning: str | None = None  # the model's thinking, apart from ``text`` (None: it did not think)


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
    the decoded JSON for a schema dict, the text for Regex/Choice/Grammar. There is always at
    least one choice (an engine answer without any is a MalformedResponse).
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    choices: list[CompletionChoice[T]] = Field(min_length=1)
    usage: Usage
    timings: Timings
    engine: str
    engine_version: str | None
    model: str
    route: RouteDecision | None = None
    id: str | None = None  # the engine's response id, when it sends one

    @property
    def text(self) -> str:
        """The text of the first choice."""
        return self.choices[0].text

    @property
    def reasoning(self) -> str | None:
        """The first choice's thinking, apart from the answer (None when the model did not think)."""
        return self.choices[0].reasoning

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

    @property
    def tool_calls(self) -> list[ToolCall]:
        """The first choice's tool calls (empty when it answered with text)."""
        return self.choices[0].tool_calls

    def message(self) -> dict[str, Any]:
        """The first choice as an assistant message, to continue the conversation:

        messages += [r.message(), {"role": "tool", "tool_call_id": r.tool_calls[0].id,
                                   "content": "18 C"}]

        The thought, if any, rides along as ``reasoning``; the next call sends it back as the
        engine expects (``replay_reasoning=``).
        """
        return assistant_message(self.text, self.tool_calls, self.reasoning)


def assistant_message(text: str, calls: list[ToolCall], reasoning: str | None = None) -> dict[str, Any]:
    """An assistant chat message: the answer, its tool calls and its thought (``reasoning``).

    Args:
        text: The answer text ("" for none: the content is then None beside tool calls, as
            OpenAI's API sends it, and "" without any: a message with neither, e.g. a turn that
            spent its tokens on a thought, is sent back as it is).
        calls: The tool calls it made.
        reasoning: The model's thought before it (None or "": none).

    Returns:
        The OpenAI-shaped message, with unillm's ``reasoning`` key when there was a thought.
    """
    message: dict[str, Any] = {"role": "assistant", "content": text or (None if calls else "")}
    if calls:
        message["tool_calls"] = [c.to_openai() for c in calls]
    if reasoning:
        message["reasoning"] = reasoning
    return message


class Delta(BaseModel):
    """A piece of a stream. The last delta carries ``usage``, ``timings`` and the finish reason.

    ``reasoning`` is a piece of the model's thinking, ``text`` a piece of the answer.
    """

    index: int = 0
    text: str = ""
    reasoning: str = ""
    finish_reason: str | None = None
    logprobs: list[TokenLogprob] | None = None
    tool_calls: list[ToolCallDelta] | None = None
    usage: Usage | None = None
    timings: Timings | None = None


class LoraInfo(BaseModel):
    """A LoRA adapter the engine currently serves (``await llm.loras.list()``)."""

    model_config = ConfigDict(frozen=True)

    name: str
    path: str | None = None


class Embeddings(BaseModel):
    """Embedding vectors, one per input text and in the same order, all of ``dimensions`` floats.

    e = await llm.embed(["a cat", "a kitten"])
    e.vectors[0], e.dimensions, e.usage.prompt_tokens, e.cosine(0, 1)
    """

    # finite numbers only: no strings, no booleans, no NaN or infinity
    model_config = ConfigDict(frozen=True, strict=True, allow_inf_nan=False)

    vectors: list[list[float]]
    dimensions: int
    usage: Usage
    timings: Timings
    engine: str
    engine_version: str | None
    model: str

    def __len__(self) -> int:
        return len(self.vectors)

    def cosine(self, i: int, j: int) -> float:
        """Cosine similarity of vectors ``i`` and ``j`` (0.0 when either is all zeros).

        Args:
            i: The first vector's index.
            j: The second vector's index.
        """
        a, b = self.vectors[i], self.vectors[j]
        dot = sum(x * y for x, y in zip(a, b, strict=True))
        norm = (sum(x * x for x in a) * sum(y * y for y in b)) ** 0.5
        return dot / norm if norm else 0.0


class Tokens(BaseModel):
    """How the engine's tokenizer splits a text (or renders and splits chat messages).

    t = await llm.tokenize("Hello world")
    t.count, t.ids, t.max_model_len
    """

    model_config = ConfigDict(frozen=True)

    ids: list[int]
    max_model_len: int | None = None
    engine: str
    model: str

    @property
    def count(self) -> int:
        """How many tokens."""
        return len(self.ids)
