"""The probe's neutral request and answer, and the client that sends them through unillm.

A probe cell asks in unillm's option names (:class:`Ask`) and judges a neutral :class:`Answer`, so
the same cells run through unillm, the openai SDK or LiteLLM (:mod:`unillm.probing.peers`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from unillm.capabilities import Feature
from unillm.client.calls import ClientCalls
from unillm.errors import InvalidOptions, OutputParseError, UnsupportedFeature
from unillm.options import Constraint
from unillm.results import Completion


@dataclass(frozen=True)
class Ask:
    """One chat request: the messages, unillm options, an optional output constraint, streaming,
    and the features the cell measures in the answer (``measures``: a client that knows the engine
    refuses the ask when its capability table says the engine lacks one)."""

    messages: tuple[Mapping[str, Any], ...]
    options: Mapping[str, Any] = field(default_factory=dict)
    output: Constraint | None = None
    stream: bool = False
    measures: tuple[Feature, ...] = ()


@dataclass(frozen=True)
class Choice:
    """One choice of an answer, in the terms the cells judge."""

    text: str
    finish_reason: str | None = None
    reasoning: str | None = None
    tool_calls: tuple[str, ...] = ()  # the names of the tools called (valid calls only)
    broken_calls: tuple[str, ...] = ()  # the raw arguments of calls that did not parse or validate
    top_counts: tuple[int, ...] | None = (
        None  # per generated token: how many top logprobs (None: no logprobs)
    )
    tokens: tuple[str, ...] = ()  # the generated tokens, when logprobs came back


@dataclass(frozen=True)
class Answer:
    """What the engine answered, as the cells judge it."""

    choices: tuple[Choice, ...]
    completion_tokens: int | None = None
    cached_tokens: int | None = None  # None: the client or engine reports no count

    @property
    def text(self) -> str:
        """The first choice's text."""
        return self.choices[0].text if self.choices else ""


class Refused(Exception):
    """The client refused the request before sending it (its message says why)."""


class NotExpressible(Exception):
    """The client has no way to ask for this option (the cell is not measurable through it)."""


class Rejected(Exception):
    """The engine answered the request with an error (loud, not a silent drop)."""


class ProbeClient(Protocol):
    """Something that sends a probe's asks to one engine."""

    name: str

    async def ask(self, ask: Ask) -> Answer:
        """Send one request.

        Raises:
            Refused: Refused before sending.
            NotExpressible: The client cannot express an option.
            Rejected: The engine answered with an error.
        """
        ...

    async def loras(self) -> list[str]:
        """The LoRA adapters the engine serves (by the name a request uses)."""
        ...


class UnillmClient:
    """The probe's asks through a unillm client (one engine or a fleet)."""

    name = "unillm"

    def __init__(self, llm: ClientCalls) -> None:
        self.llm = llm

    async def ask(self, ask: Ask) -> Answer:
        """Send one request through unillm (see :class:`ProbeClient`)."""
        from unillm.errors import UnillmError

        messages = [dict(m) for m in ask.messages]
        try:
            if ask.measures:  # what the answer lacks, unillm's table says before sending
                capabilities = await self.llm.capabilities()
                for feature in ask.measures:
                    capabilities.require(feature)
            if ask.stream:
                return await self._stream(messages, ask)
            done = await self.llm.generate(messages=messages, output=ask.output, **ask.options)
        except (UnsupportedFeature, InvalidOptions) as e:
            raise Refused(f"{type(e).__name__}: {e}") from None
        except OutputParseError as e:  # the constrained answer came back and did not validate
            return Answer(choices=(Choice(text=e.text, finish_reason=e.finish_reason),))
        except UnillmError as e:
            raise Rejected(f"{type(e).__name__}: {e}") from None
        return from_completion(done)

    async def _stream(self, messages: list[dict[str, Any]], ask: Ask) -> Answer:
        text, finish, tokens = [], None, None
        async with self.llm.stream(messages=messages, output=ask.output, **ask.options) as s:
            async for d in s:
                text.append(d.text)
                finish = d.finish_reason or finish
                if d.usage is not None:
                    tokens = d.usage.completion_tokens or None
        return Answer(choices=(Choice(text="".join(text), finish_reason=finish),), completion_tokens=tokens)

    async def loras(self) -> list[str]:
        """The LoRA adapters the engine lists (none when it cannot list them)."""
        from unillm.errors import UnillmError

        try:
            return [info.name for info in await self.llm.loras.list()]
        except UnillmError:
            return []


def from_completion(done: Completion[Any]) -> Answer:
    """The neutral answer of a unillm :class:`~unillm.Completion`.

    Args:
        done: The completion unillm returned.
    """
    choices = tuple(
        Choice(
            text=c.text,
            finish_reason=c.finish_reason,
            reasoning=c.reasoning,
            tool_calls=tuple(t.name for t in c.tool_calls if t.error is None and t.name),
            broken_calls=tuple(t.arguments for t in c.tool_calls if t.error is not None or not t.name),
            top_counts=None if c.logprobs is None else tuple(len(t.top) for t in c.logprobs),
            tokens=() if c.logprobs is None else tuple(t.token for t in c.logprobs),
        )
        for c in done.choices
    )
    return Answer(choices=choices, completion_tokens=done.usage.completion_tokens)
