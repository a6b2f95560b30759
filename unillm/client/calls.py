"""The calls every async client answers, declared once: ``generate``, ``stream``, ``embed``,
``tokenize`` and the tool loops written once too.

:class:`Generates` is a protocol with default implementations: :class:`~unillm.client.llm.LLM`
and :class:`~unillm.fleet.fleet.Fleet` subclass it. Each call builds the validated request over the
client's defaults, then hands it to the client's own ``_complete(request)`` (under the request's
deadline) or ``_open_stream(request)`` (``_embed``, ``_tokenize`` take the call's arguments).
:class:`ClientCalls` adds the other calls; the blocking twin
drives any ClientCalls, and :class:`~unillm.client.protocol.Client` adds ``clone`` and ``blocking``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol, TypeVar, cast, overload

from pydantic import BaseModel
from typing_extensions import Self, Unpack

from unillm.client.deadline import Deadline
from unillm.client.tool_loop import ToolResult, ToolRun, run_tools, stream_tools
from unillm.embeddings import DEFAULT_BATCH_SIZE
from unillm.options import Messages, Options, OutputSpec, make_request
from unillm.results import Completion, Delta, Embeddings, LoraInfo, Tokens

if TYPE_CHECKING:
    from openai import AsyncOpenAI

    from unillm.adapter.base import EngineInfo
    from unillm.capabilities import Capabilities
    from unillm.client.stream import Stream
    from unillm.metrics import EngineMetrics
    from unillm.options import Request

M = TypeVar("M", bound=BaseModel)


class EmbedCall(NamedTuple):
    """An ``embed()`` call's arguments, as the client's ``_embed`` receives them."""

    texts: str | Sequence[str]
    batch_size: int
    dimensions: int | None
    concurrency: int
    timeout: float | None


class TokenizeCall(NamedTuple):
    """A ``tokenize()`` call's arguments, as the client's ``_tokenize`` receives them."""

    text: str | None
    messages: Messages | None
    timeout: float | None
    tools: Sequence[Any] | None
    replay_reasoning: str | None


class _Sends(Protocol):
    """What the default ``generate``/``stream`` need of the class that inherits them."""

    engine: str
    defaults: Options

    async def _complete(self, request: Request) -> Completion[Any]: ...

    def _open_stream(self, request: Request) -> Stream: ...

    async def _embed(self, call: EmbedCall) -> Embeddings: ...

    async def _tokenize(self, call: TokenizeCall) -> Tokens: ...


class LoraControl(Protocol):
    """Runtime LoRA adapters: ``await llm.loras.load("sql", "/adapters/sql")``."""

    async def load(self, name: str, path: str) -> None:
        """Load an adapter at runtime under ``name`` (then use ``lora=name``).

        Args:
            name: The name requests use (``lora=name``).
            path: The adapter's folder, as a path on the engine's host.

        Raises:
            InvalidOptions: A malformed name or an empty path.
            UnsupportedFeature: The engine cannot load adapters at runtime.
        """

    async def unload(self, name: str) -> None:
        """Unload the adapter ``name``.

        Args:
            name: The adapter's name, as loaded.

        Raises:
            UnknownLora: The engine serves no adapter of that name.
        """

    async def list(self) -> list[LoraInfo]:
        """Adapters served now."""


class Generates(Protocol):
    """The calls written once for one engine and a fleet: ``generate``, ``stream``, ``embed``,
    ``tokenize`` and the tool loops; each client supplies ``_complete``, ``_open_stream``,
    ``_embed`` and ``_tokenize``."""

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

    async def embed(
        self,
        texts: str | Sequence[str],
        *,
        batch_size: int = DEFAULT_BATCH_SIZE,
        dimensions: int | None = None,
        concurrency: int = 4,
        timeout: float | None = None,
    ) -> Embeddings:
        """Embed texts, one vector each: ``(await llm.embed(["a cat", "a dog"])).vectors``.

        Texts go in batches of ``batch_size`` (up to ``concurrency`` batches at a time) and come
        back in order; every vector has the same length (``.dimensions``), checked.
        ``dimensions=`` asks the engine for shorter vectors (Matryoshka models only). Engines
        without an embeddings API raise UnsupportedFeature before sending; an engine that
        serves one needs an embedding model (``unillm.launch(..., task="embed")``). A fleet
        embeds on one replica and fails over before any answer.

        Args:
            texts: One text or a sequence of texts; one vector comes back per text, in order.
            batch_size: Texts per request to the engine.
            dimensions: Ask for shorter vectors (Matryoshka models only); None is the model's size.
            concurrency: How many batches are in flight at once.
            timeout: Seconds each wait for the engine's bytes may take; None uses the client's
                read timeout.

        Returns:
            The vectors, their common length, usage and timings.

        Raises:
            UnsupportedFeature: The engine has no embeddings API.
            MalformedResponse: The vectors are not finite numbers or differ in length.
        """
        call = EmbedCall(texts, batch_size, dimensions, concurrency, timeout)
        return await cast(_Sends, self)._embed(call)

    async def tokenize(
        self,
        text: str | None = None,
        *,
        messages: Messages | None = None,
        timeout: float | None = None,
        tools: Sequence[Any] | None = None,
        replay_reasoning: str | None = None,
    ) -> Tokens:
        """Token ids of a text, or of chat messages as the model's chat template renders them.

            (await llm.tokenize("Hello world")).count
            (await llm.tokenize(messages=[{"role": "user", "content": "hi"}])).ids

        Messages are rendered with the generation prompt, i.e. what a chat request would send.
        A fleet tokenizes on one replica and fails over before any answer.

        Args:
            text: A text to tokenize as is; or pass ``messages``.
            messages: Chat messages, rendered by the model's chat template with the generation prompt.
            timeout: Seconds each wait for the engine's bytes may take; None uses the client's
                read timeout.
            tools: The tools a chat request would list (the template renders them too).
            replay_reasoning: How earlier thoughts are rendered, as ``generate()`` sends them
                ("field", "inline", "drop"; None: the engine's default).

        Returns:
            The token ids and their count.

        Raises:
            UnsupportedFeature: The engine has no tokenize endpoint.
        """
        call = TokenizeCall(text, messages, timeout, tools, replay_reasoning)
        return await cast(_Sends, self)._tokenize(call)

    async def run_tools(
        self, messages: Messages, tools: Sequence[Any], *, max_turns: int = 8, **options: Any
    ) -> ToolRun:
        """Answer with tools that unillm runs: each call the model makes is executed (async
        functions awaited, sync ones in a thread) and its result sent back, until the model
        answers without a call or ``max_turns`` answers were made (see :mod:`unillm.client.tool_loop`).
        On a fleet each turn goes to a replica (``session=`` keeps one).

        Args:
            messages: The conversation so far (chat messages).
            tools: Typed Python functions and :class:`~unillm.MCPServer` s the model may call.
            max_turns: The most model answers in the loop.
            **options: Per-call :class:`~unillm.Options` for every turn.

        Returns:
            The loop's turns (usage, timings, results), transcript and why it stopped.
        """
        return await run_tools(self, messages, tools, max_turns=max_turns, **options)

    def stream_tools(
        self, messages: Messages, tools: Sequence[Any], *, max_turns: int = 8, **options: Any
    ) -> AsyncIterator[Delta | ToolResult | ToolRun]:
        """:meth:`run_tools`, streamed: every turn's deltas, each executed call's result, then the run.

        Args:
            messages: The conversation so far (chat messages).
            tools: Typed Python functions and :class:`~unillm.MCPServer` s the model may call.
            max_turns: The most model answers in the loop.
            **options: Per-call :class:`~unillm.Options` for every turn.
        """
        return stream_tools(self, messages, tools, max_turns=max_turns, **options)


class ClientCalls(Generates, Protocol):
    """The calls of an async client, one engine or a fleet (:class:`~unillm.client.protocol.Client`
    adds ``clone`` and ``blocking``)."""

    @property
    def engine(self) -> str:
        """The engine's adapter name ("vllm", "sglang", ...)."""

    @property
    def defaults(self) -> Options:
        """Options applied to every request (overridden per call)."""

    @property
    def loras(self) -> LoraControl:
        """Runtime LoRA adapters."""

    async def __aenter__(self) -> Self: ...

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None: ...

    async def aclose(self) -> None:
        """Close the pooled connections."""

    async def info(self, *, refresh: bool = False) -> EngineInfo:
        """Served model, engine version and limits.

        Args:
            refresh: Ask the engine again instead of returning the cached answer.

        Returns:
            The served model, engine version and limits.
        """

    async def capabilities(self) -> Capabilities:
        """What the engine, at its detected version, can honour."""

    async def health(self) -> bool:
        """True when the engine answers its health check."""

    async def metrics(self) -> EngineMetrics:
        """The engine's Prometheus metrics."""

    def openai(self) -> AsyncOpenAI:
        """An ``openai.AsyncOpenAI`` client for the same endpoint."""


__all__ = ["ClientCalls", "EmbedCall", "Generates", "LoraControl", "TokenizeCall"]
