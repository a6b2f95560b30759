"""Watch every ``generate`` and ``stream``: the seam for tracing, metrics and routing annotations.

OpenTelemetry (``unillm.instrument()``) is one observer; a fleet or a router can add its own,
or tag the calls it makes with attributes that observers record::

    class Log:
        def start(self, call: unillm.observe.Call) -> unillm.observe.Observation | None:
            print("->", call.operation, call.model)
            return None                      # or an object with finish(outcome) / fail(error)

    unillm.observe.add(Log())
    with unillm.observe.attributes({"unillm.fleet.replica": "gpu-1"}):
        await llm.generate("Hi")             # observers see call.attributes

With no observer registered the cost is one check per call: nothing is wrapped or measured
beyond the client timings every answer carries.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal, Protocol

from unillm.options import Request
from unillm.results import Completion, Delta, Timings, Usage

#: The registered observers; the hot path only checks that this tuple is empty.
OBSERVERS: tuple[Observer, ...] = ()
_ATTRIBUTES: ContextVar[Mapping[str, Any]] = ContextVar(
    "unillm_observe_attributes", default=MappingProxyType({})
)


@dataclass(frozen=True, slots=True)
class Call:
    """One generate/stream call about to be sent: to which engine (its adapter's name, "vllm",
    "sglang", ...), at which URL, for which model (None if discovery failed)."""

    engine: str
    url: str
    request: Request
    operation: Literal["chat", "text_completion"]
    model: str | None
    attributes: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Target:
    """Where observed calls go: the engine, its URL, and how to learn the served model."""

    engine: str
    url: str
    model: Callable[[], Awaitable[str]]


@dataclass(frozen=True, slots=True)
class Outcome:
    """How a call ended: per-choice texts and finish reasons, usage, timings, response ids.

    For a stream that the caller left early, ``complete`` is False and the texts are partial.
    """

    stream: bool
    texts: Sequence[str]
    finish_reasons: Sequence[str | None]
    usage: Usage | None
    timings: Timings | None
    response_model: str | None = None
    response_id: str | None = None
    complete: bool = True
    reasonings: Sequence[str | None] = ()  # per choice, the model's thinking (None: it did not think)


class Observation(Protocol):
    """One observed call: told once how it ended."""

    def finish(self, outcome: Outcome) -> None:
        """The call returned (or the stream ended, or its caller stopped reading)."""

    def fail(self, error: BaseException) -> None:
        """The call raised ``error`` (including cancellation)."""


class Observer(Protocol):
    """Sees every call start; returns an :class:`Observation` to hear how it ends, or None."""

    def start(self, call: Call) -> Observation | None:
        """Called before anything is sent."""


def add(observer: Observer) -> None:
    """Register ``observer`` for every LLM in this process (idempotent)."""
    global OBSERVERS
    if observer not in OBSERVERS:
        OBSERVERS = (*OBSERVERS, observer)


def remove(observer: Observer) -> None:
    """Unregister ``observer`` (no error if it was not registered)."""
    global OBSERVERS
    OBSERVERS = tuple(o for o in OBSERVERS if o is not observer)


@contextmanager
def attributes(values: Mapping[str, Any]) -> Iterator[None]:
    """Attach ``values`` to the calls made inside this block (nested blocks add up).

    with unillm.observe.attributes({"unillm.router.route": "sql"}):
        await llm.generate(...)
    """
    token = _ATTRIBUTES.set({**_ATTRIBUTES.get(), **values})
    try:
        yield
    finally:
        _ATTRIBUTES.reset(token)


# -- used by LLM (only when OBSERVERS is not empty) --------------------------------------------
async def _call(target: Target, request: Request) -> tuple[Call, BaseException | None]:
    error: BaseException | None = None
    model: str | None = request.lora
    if model is None:
        try:
            model = await target.model()
        except Exception as e:  # observed as the call's failure, then raised by the caller
            error = e
    operation: Literal["chat", "text_completion"] = (
        "chat" if request.messages is not None else "text_completion"
    )
    return Call(target.engine, target.url, request, operation, model, _ATTRIBUTES.get()), error


def _start(call: Call) -> list[Observation]:
    return [o for o in (observer.start(call) for observer in OBSERVERS) if o is not None]


def _fail(observations: Sequence[Observation], error: BaseException) -> None:
    for o in observations:
        o.fail(error)


async def generate(
    target: Target,
    request: Request,
    run: Callable[[Request], Awaitable[Completion[Any]]],
) -> Completion[Any]:
    """``run(request)`` with every observer told how it went."""
    call, error = await _call(target, request)
    observations = _start(call)
    if error is not None:
        _fail(observations, error)
        raise error
    try:
        completion = await run(request)
    except BaseException as e:
        _fail(observations, e)
        raise
    outcome = Outcome(
        stream=False,
        texts=[c.text for c in completion.choices],
        finish_reasons=[c.finish_reason for c in completion.choices],
        usage=completion.usage,
        timings=completion.timings,
        response_model=completion.model,
        response_id=completion.id,
        reasonings=[c.reasoning for c in completion.choices],
    )
    for o in observations:
        o.finish(outcome)
    return completion


async def stream(
    target: Target,
    request: Request,
    partial: Callable[[], Sequence[str]],
    deltas: AsyncIterator[Delta],
) -> AsyncIterator[Delta]:
    """``deltas`` passed through, with every observer told how the stream went (``partial()``:
    the texts received so far, per choice)."""
    call, error = await _call(target, request)
    observations = _start(call)
    if error is not None:
        _fail(observations, error)
        raise error
    final: Delta | None = None
    finishes: dict[int, str | None] = {}
    thoughts: dict[int, list[str]] = {}
    try:
        async for delta in deltas:
            if delta.reasoning:
                thoughts.setdefault(delta.index, []).append(delta.reasoning)
            if delta.finish_reason is not None:
                finishes[delta.index] = delta.finish_reason
            if delta.timings is not None:
                final = delta
            yield delta
    except GeneratorExit:  # the caller stopped reading: not an error
        await deltas.aclose()  # type: ignore[attr-defined]
        _finish(observations, partial, final, finishes, thoughts)
        raise
    except BaseException as e:
        await deltas.aclose()  # type: ignore[attr-defined]
        _fail(observations, e)
        raise
    _finish(observations, partial, final, finishes, thoughts)


def _finish(
    observations: Sequence[Observation],
    partial: Callable[[], Sequence[str]],
    final: Delta | None,
    finishes: Mapping[int, str | None],
    thoughts: Mapping[int, list[str]],
) -> None:
    texts = partial()
    outcome = Outcome(
        stream=True,
        texts=texts,
        finish_reasons=[finishes.get(i) for i in range(len(texts) or 1)],
        usage=final.usage if final else None,
        timings=final.timings if final else None,
        complete=final is not None,
        reasonings=["".join(thoughts[i]) if i in thoughts else None for i in range(len(texts))],
    )
    for o in observations:
        o.finish(outcome)


__all__ = ["OBSERVERS", "Call", "Observation", "Observer", "Outcome", "Target", "add", "attributes", "remove"]
