"""``generate`` and ``stream``, declared and written once for every async client.

:class:`Generates` is a protocol with default implementations: :class:`~unillm.client.llm.LLM`
and :class:`~unillm.fleet.fleet.Fleet` subclass it, and :class:`~unillm.client.protocol.Client`
extends it. Each call builds the validated request over the client's defaults, then hands it to
the client's own ``_complete(request)`` (under the request's deadline) or
``_open_stream(request)``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, TypeVar, cast, overload

from pydantic import BaseModel
from typing_extensions import Unpack

from unillm.client.deadline import Deadline
from unillm.options import Messages, Options, OutputSpec, make_request
from unillm.results import Completion

if TYPE_CHECKING:
    from unillm.client.stream import Stream
    from unillm.options import Request

M = TypeVar("M", bound=BaseModel)


class _Sends(Protocol):
    """What the default ``generate``/``stream`` need of the class that inherits them."""

    engine: str
    defaults: Options

    async def _complete(self, request: Request) -> Completion[Any]: ...

    def _open_stream(self, request: Request) -> Stream: ...


class Generates(Protocol):
    """Generation, the same on one engine and on a fleet: ``generate`` and ``stream``."""

    @overload
    async def generate(
        self,
        prompt: str | None = None,
        *,
        messages: Messages | None = None,
        output: type[M],
        **options: Unpack[Options],
    ) -> Completion[M]: ...

    @overload
    async def generate(
        self,
        prompt: str | None = None,
        *,
        messages: Messages | None = None,
        output: OutputSpec | None = None,
        **options: Unpack[Options],
    ) -> Completion[Any]: ...

    async def generate(
        self,
        prompt: str | None = None,
        *,
        messages: Messages | None = None,
        output: OutputSpec | None = None,
        **options: Unpack[Options],
    ) -> Completion[Any]:
        """Generate a whole answer: ``await llm.generate("Hi", max_tokens=8)``.

        ``output=`` constrains the answer (pydantic class, JSON-schema dict, Regex, Choice,
        Grammar) and fills ``.parsed``. Unsupported options raise UnsupportedFeature first.
        ``deadline=`` seconds bound the whole call; ``timeout=`` bounds each wait for bytes.
        A fleet sends the request to one replica and fails over only before any answer.

        Args:
            prompt: A plain-text prompt (sent to the completions API); or pass ``messages``.
            messages: Chat messages (``{"role": ..., "content": ...}``), sent to the chat API.
            output: Constrains the answer: a pydantic class, a JSON-schema dict, Regex, Choice or
                Grammar; the parsed value lands in ``.parsed``.
            **options: Per-call :class:`~unillm.Options` (max_tokens, temperature, tools, lora,
                deadline, timeout, ...), over the client's defaults.

        Returns:
            The whole answer: text, usage, timings and finish reason.

        Raises:
            InvalidOptions: A malformed option, refused before sending.
            UnsupportedFeature: An option this engine (at its version) cannot honour.
            EngineError: The engine refused or failed the request (a subclass says how).
        """
        client = cast(_Sends, self)
        request = make_request(prompt, messages, output, {**client.defaults, **options}, stream=False)
        with Deadline(request.deadline, client.engine).bound():
            return await client._complete(request)

    def stream(
        self,
        prompt: str | None = None,
        *,
        messages: Messages | None = None,
        output: OutputSpec | None = None,
        **options: Unpack[Options],
    ) -> Stream:
        """Stream an answer as deltas; the last delta carries usage, timings and finish reason.

            async with llm.stream("Once upon", max_tokens=32) as s:
                async for d in s:
                    print(d.text, end="")

        Leaving the loop early (or cancelling) closes the HTTP stream, so the engine stops. A
        fleet streams from one replica and fails over only before the stream starts.

        Args:
            prompt: A plain-text prompt (sent to the completions API); or pass ``messages``.
            messages: Chat messages (``{"role": ..., "content": ...}``), sent to the chat API.
            output: Constrains the answer: a pydantic class, a JSON-schema dict, Regex, Choice or
                Grammar; the parsed value lands in ``.parsed``.
            **options: Per-call :class:`~unillm.Options` (max_tokens, temperature, tools, lora,
                deadline, timeout, ...), over the client's defaults.

        Returns:
            A :class:`~unillm.Stream`; use it with ``async with`` and ``async for``.
        """
        client = cast(_Sends, self)
        request = make_request(prompt, messages, output, {**client.defaults, **options}, stream=True)
        return client._open_stream(request)


__all__ = ["Generates"]
