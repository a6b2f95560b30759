"""Typed errors: each says what happened, why, and what to do.

Every error unillm raises derives from :class:`UnillmError`. Errors that come from an
engine carry the engine's own message in ``engine_message``.

    try:
        await llm.generate("hi", output=unillm.Grammar("root ::= 'a'"))
    except unillm.UnsupportedFeature as e:
        print(e.engine, e.feature, e.alternative)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pydantic import ValidationError


class UnillmError(Exception):
    """Base class of every error raised by unillm."""


class InvalidOptions(UnillmError, ValueError):
    """The caller's options are malformed; nothing was sent."""


class ConfigError(UnillmError, ValueError):
    """A configuration file or mapping is invalid; nothing was started."""


class UnknownEngine(UnillmError, LookupError):
    """No adapter is installed for the engine name."""


class UnsupportedFeature(UnillmError):
    """The engine (or its detected version) cannot honour an option; nothing was sent."""

    def __init__(
        self,
        engine: str,
        feature: str,
        *,
        version: str | None = None,
        why: str = "",
        alternative: str = "",
    ) -> None:
        self.engine, self.feature, self.version = engine, feature, version
        self.why, self.alternative = why, alternative
        who = f"{engine} {version}" if version else engine
        msg = f"{who} cannot honour {feature}"
        if why:
            msg += f": {why}"
        if alternative:
            msg += f". {alternative}"
        super().__init__(msg)


#: Longest engine message kept, in an exception's text and in its ``engine_message``.
ENGINE_MESSAGE_LIMIT = 2000


def clip_message(message: str, limit: int = ENGINE_MESSAGE_LIMIT) -> str:
    """``message`` cut to at most ``limit`` characters, saying how long it was (an engine can send
    megabytes). Cutting twice changes nothing.

    Args:
        message: The text to cut.
        limit: The most characters to keep, the cut mark included.
    """
    if len(message) <= limit:
        return message
    mark = f"... [cut: {len(message)} characters in all]"
    return message[: max(0, limit - len(mark))] + mark


class EngineError(UnillmError):
    """The engine answered with an error status; ``engine_message`` is its own text.

    Engine messages are bounded: ``engine_message`` (and the part of the exception's text that
    quotes it) holds at most :data:`ENGINE_MESSAGE_LIMIT` characters of what the engine sent,
    marked when it was cut.
    """

    def __init__(
        self,
        message: str,
        *,
        engine: str,
        status: int | None = None,
        engine_message: str = "",
    ) -> None:
        self.engine, self.status, self.engine_message = engine, status, clip_message(engine_message)
        super().__init__(message)


class InvalidRequest(EngineError):
    """The engine rejected the request as invalid (HTTP 400/422)."""


class Unauthorized(EngineError):
    """The engine refused the API key (HTTP 401/403)."""


class NotFound(EngineError):
    """The engine does not know what the request named (HTTP 404)."""


class UnknownModel(NotFound):
    """The requested model is not served by this engine."""


class UnknownLora(NotFound):
    """The requested LoRA adapter is not loaded on this engine."""


class Overloaded(EngineError):
    """The engine is overloaded (HTTP 429/503) and retries ran out."""

    def __init__(
        self,
        message: str,
        *,
        engine: str,
        status: int | None = None,
        engine_message: str = "",
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message, engine=engine, status=status, engine_message=engine_message)
        self.retry_after = retry_after


class EngineInternalError(EngineError):
    """The engine failed while serving the request (HTTP 5xx)."""


class EngineUnavailable(UnillmError):
    """The engine could not be reached (connection refused, reset or timed out)."""


class EngineTimeout(EngineUnavailable):
    """The engine stopped answering within the configured timeout."""


class ToolServerError(UnillmError):
    """An MCP tool server could not be started or reached, or broke off mid-call (its process
    exited, the connection closed); the tool loop stops and the server's session is closed."""


class ToolServerTimeout(ToolServerError, TimeoutError):
    """An MCP tool server did not start, list its tools or answer a call within its ``timeout``;
    the call was cancelled on the server."""


class ReplicaMismatch(UnillmError):
    """A fleet's replicas serve different models or engines; ``replicas`` maps URL -> what it serves."""

    def __init__(self, message: str, *, replicas: Mapping[str, str]) -> None:
        self.replicas = dict(replicas)
        super().__init__(message)


class FanOutFailed(UnillmError):
    """An operation sent to every replica of a fleet failed on some of them (and worked on others).

    ``failures`` maps each failed replica's URL to its error; ``succeeded`` lists the others.
    """

    def __init__(
        self, message: str, *, failures: Mapping[str, UnillmError], succeeded: Sequence[str]
    ) -> None:
        self.failures, self.succeeded = dict(failures), list(succeeded)
        super().__init__(message)


class PoolTimeout(UnillmError, TimeoutError):
    """No pooled connection to the engine became free in time; nothing was sent.

    Raise ``unillm.Pool(max_connections=..., wait=...)``, or send fewer requests at once.
    """


class DeadlineExceeded(UnillmError, TimeoutError):
    """A call's ``deadline=`` passed (queueing, retries and generation included).

    ``partial_text`` holds what a stream received before it was stopped ("" for generate).
    """

    def __init__(self, message: str, *, deadline: float, partial_text: Sequence[str] = ()) -> None:
        self.deadline, self.partial_texts = deadline, list(partial_text)
        super().__init__(message)

    @property
    def partial_text(self) -> str:
        """Text received for the first choice before the deadline."""
        return self.partial_texts[0] if self.partial_texts else ""


class MalformedResponse(UnillmError):
    """The engine's answer is not what its protocol promises (bad JSON, broken SSE, a field of the
    wrong type, an answer larger than ``unillm.Pool``'s size limits)."""


#: What a decoder raises on an answer of the wrong shape (pydantic's ValidationError is a ValueError).
SHAPE_ERRORS: tuple[type[Exception], ...] = (
    LookupError,
    TypeError,
    AttributeError,
    ValueError,
    ArithmeticError,
    RecursionError,
)


def malformed(engine: str, what: str, error: Exception) -> MalformedResponse:
    """The MalformedResponse for an answer whose decoding failed with ``error`` (one of
    :data:`SHAPE_ERRORS`): names the engine, what was decoded and, briefly, what was wrong::

        except SHAPE_ERRORS as e:
            raise malformed("vllm", "stream chunk", e) from e

    Args:
        engine: The adapter's name, for the error message.
        what: What was being decoded (e.g. "stream chunk").
        error: The decoding error (one of ``SHAPE_ERRORS``).
    """
    from pydantic import ValidationError

    if isinstance(error, ValidationError) and error.errors():  # where and what, without the input
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "value"
        detail = f"{where}: {first['msg']}"
    elif isinstance(error, KeyError):
        detail = f"missing field {clip_message(str(error), 100)}"
    else:
        detail = f"{type(error).__name__}: {clip_message(str(error), 200)}"
    return MalformedResponse(f"{engine}: unexpected {what} ({detail})")


class StreamInterrupted(UnillmError):
    """A stream ended before the engine finished; ``partial_text`` holds what arrived."""

    def __init__(self, message: str, *, partial_text: Sequence[str]) -> None:
        self.partial_texts = list(partial_text)
        super().__init__(message)

    @property
    def partial_text(self) -> str:
        """Text received for the first choice before the interruption."""
        return self.partial_texts[0] if self.partial_texts else ""


class OutputParseError(UnillmError, ValueError):
    """The engine's constrained answer did not parse or validate (e.g. cut by max_tokens)."""

    def __init__(self, message: str, *, text: str, finish_reason: str | None) -> None:
        self.text, self.finish_reason = text, finish_reason
        super().__init__(message)


class LaunchError(UnillmError):
    """An engine failed to start: the command, the likely cause and the log's first errors and tail.

    ``causes`` is the advice of every known cause found (what to change), ``error_lines`` the
    first error lines of the log, numbered (empty when they are in ``log_tail`` anyway).
    """

    def __init__(
        self,
        message: str,
        *,
        command: str,
        log_tail: Sequence[str],
        error_lines: Sequence[str] = (),
        causes: Sequence[str] = (),
    ) -> None:
        self.message, self.command, self.log_tail = message, command, list(log_tail)
        self.error_lines, self.causes = list(error_lines), list(causes)
        parts = [message, *(f"likely cause: {c}" for c in self.causes), f"command: {command}"]
        if self.error_lines:
            parts += ["first error lines:", *(f"  {line}" for line in self.error_lines)]
        tail = "\n".join(f"  | {line}" for line in self.log_tail)
        parts.append(f"last log lines:\n{tail or '  (none)'}")
        super().__init__("\n".join(parts))

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickle by its parts (a Ray actor sends an engine's launch failure to the driver)."""
        return _rebuild_launch_error, (
            self.message,
            self.command,
            self.log_tail,
            self.error_lines,
            self.causes,
        )


def _rebuild_launch_error(
    message: str, command: str, log_tail: list[str], error_lines: list[str], causes: list[str]
) -> LaunchError:
    return LaunchError(message, command=command, log_tail=log_tail, error_lines=error_lines, causes=causes)


def validation_problems(error: ValidationError, whole: str = "") -> str:
    """A pydantic ``ValidationError`` as one readable line: ``field.sub: message; ...``.

    Args:
        error: What pydantic raised.
        whole: What to call the object itself in an error about it as a whole (no field), e.g.
            ``"(top)"``; empty: such an error is its message alone.

    Returns:
        The problems, ``; ``-separated, without pydantic's ``Value error, `` prefixes.
    """
    problems = []
    for x in error.errors():
        where = ".".join(map(str, x["loc"])) or whole
        message = x["msg"].removeprefix("Value error, ")
        problems.append(f"{where}: {message}" if where else message)
    return "; ".join(problems)
