"""Blocking twins of the async API, written once for every engine.

The async ``LLM`` (or ``Fleet``) runs on an event loop in a private thread, so these calls also work where
a loop is already running (Jupyter, or a sync function called from async code).

    llm = unillm.connect("vllm", "http://127.0.0.1:8000").blocking()
    print(llm.generate("Hi", max_tokens=8).text)
    for d in llm.stream("Once upon", max_tokens=16):
        print(d.text, end="")
"""

from __future__ import annotations

import contextlib
import threading
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, TypeVar, overload

from anyio.from_thread import BlockingPortal, start_blocking_portal
from pydantic import BaseModel
from typing_extensions import Unpack

from unillm.adapter.frontends import Closing
from unillm.embeddings import DEFAULT_BATCH_SIZE
from unillm.options import Options, OutputSpec
from unillm.results import Completion, Delta, Embeddings, LoraInfo, Tokens

if TYPE_CHECKING:
    from openai import OpenAI

    from unillm.adapter.base import EngineInfo
    from unillm.capabilities import Capabilities
    from unillm.client.calls import ClientCalls
    from unillm.metrics import EngineMetrics
    from unillm.options import Messages

R = TypeVar("R")
M = TypeVar("M", bound=BaseModel)


class _Loop:
    """A private event loop thread shared by one blocking object and its children."""

    def __init__(self) -> None:
        self._cm: AbstractContextManager[BlockingPortal] = start_blocking_portal()
        self.portal = self._cm.__enter__()
        self._closed = False
        self._clients: weakref.WeakSet[BlockingLLM] = weakref.WeakSet()  # closed before the loop
        # The portal thread is not a daemon: stop it before the interpreter joins threads at exit
        # (as concurrent.futures does), so a forgotten close() cannot hang the exit.
        ref = weakref.ref(self)

        def close_at_exit() -> None:
            loop = ref()
            if loop is not None:
                loop.close()

        threading._register_atexit(close_at_exit)  # type: ignore[attr-defined]

    def call(self, fn: Callable[..., Awaitable[R]], *args: Any) -> R:
        return self.portal.call(fn, *args)

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        """Close the connections of every client on this loop, then stop the loop thread.

        Whoever comes first (an explicit close, a ``with`` exit, or the hook at interpreter exit)
        does it; later closes of the clients or the loop have nothing left to do.
        """
        if not self._closed:
            for client in list(self._clients):
                client._close_connections()
            self._closed = True
            self._cm.__exit__(None, None, None)


class BlockingLLM(Closing):
    """The blocking face of an :class:`~unillm.client.llm.LLM` or a :class:`~unillm.fleet.fleet.Fleet`;
    close it (or use ``with``) when done.

    Args:
        llm: The async client (an LLM or a Fleet) to drive; this object owns it.
        loop: The private loop thread to share with a parent; None starts its own.
    """

    def __init__(self, llm: ClientCalls, loop: _Loop | None = None) -> None:
        self.llm = llm
        self._owns_loop = loop is None
        self._loop = loop or _Loop()
        self._loop._clients.add(self)
        self.loras = BlockingLoras(self)

    def close(self) -> None:
        """Close connections (and the private loop thread, if this object owns it)."""
        self._close_connections()
        if self._owns_loop:
            self._loop.close()

    def _close_connections(self) -> None:
        if not self._loop.closed:  # a stopped loop (e.g. at interpreter exit) closed them already
            self._loop._clients.discard(self)
            self._loop.call(self.llm.aclose)

    def _run(self, fn: Callable[..., Awaitable[R]], *args: Any, **kwargs: Any) -> R:
        async def call() -> R:
            return await fn(*args, **kwargs)

        return self._loop.call(call)

    def info(self) -> EngineInfo:
        """See :meth:`LLM.info`.

        Returns:
            The served model, engine version and limits.
        """
        return self._run(self.llm.info)

    def capabilities(self) -> Capabilities:
        """See :meth:`LLM.capabilities`."""
        return self._run(self.llm.capabilities)

    def openai(self) -> OpenAI:
        """A blocking ``openai.OpenAI`` client for the same endpoint (needs ``unillm-sdk[openai]``).

        client = llm.openai()
        client.completions.create(model=llm.info().model, prompt="Hi", max_tokens=8)
        """
        twin = self.llm.openai()  # the same endpoint and key (a Fleet refuses, saying why)
        self._loop.call(twin.close)  # only its settings are needed
        from openai import OpenAI

        return OpenAI(base_url=str(twin.base_url), api_key=twin.api_key)

    def health(self) -> bool:
        """See :meth:`LLM.health`."""
        return self._run(self.llm.health)

    def metrics(self) -> EngineMetrics:
        """See :meth:`LLM.metrics`."""
        return self._run(self.llm.metrics)

    @overload
    def generate(
        self,
        prompt: str | None = None,
        *,
        messages: Messages | None = None,
        output: type[M],
        **options: Unpack[Options],
    ) -> Completion[M]: ...

    @overload
    def generate(
        self,
        prompt: str | None = None,
        *,
        messages: Messages | None = None,
        output: OutputSpec | None = None,
        **options: Unpack[Options],
    ) -> Completion[Any]: ...

    def generate(
        self,
        prompt: str | None = None,
        *,
        messages: Messages | None = None,
        output: OutputSpec | None = None,
        **options: Unpack[Options],
    ) -> Completion[Any]:
        """See :meth:`LLM.generate`; ``output=Model`` gives ``Completion[Model]``.

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
        return self._run(self.llm.generate, prompt, messages=messages, output=output, **options)

    def embed(
        self,
        texts: str | Sequence[str],
        *,
        batch_size: int = DEFAULT_BATCH_SIZE,
        dimensions: int | None = None,
        concurrency: int = 4,
        timeout: float | None = None,
    ) -> Embeddings:
        """See :meth:`LLM.embed`.

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
        return self._run(
            self.llm.embed,
            texts,
            batch_size=batch_size,
            dimensions=dimensions,
            concurrency=concurrency,
            timeout=timeout,
        )

    def tokenize(
        self,
        text: str | None = None,
        *,
        messages: Messages | None = None,
        timeout: float | None = None,
        tools: Sequence[Any] | None = None,
        replay_reasoning: str | None = None,
    ) -> Tokens:
        """See :meth:`LLM.tokenize`.

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
        return self._run(
            self.llm.tokenize,
            text,
            messages=messages,
            timeout=timeout,
            tools=tools,
            replay_reasoning=replay_reasoning,
        )

    def stream(
        self,
        prompt: str | None = None,
        *,
        messages: Messages | None = None,
        output: OutputSpec | None = None,
        **options: Unpack[Options],
    ) -> Iterator[Delta]:
        """See :meth:`LLM.stream`; leaving the loop early closes the stream.

        Args:
            prompt: A plain-text prompt (sent to the completions API); or pass ``messages``.
            messages: Chat messages (``{"role": ..., "content": ...}``), sent to the chat API.
            output: Constrains the answer: a pydantic class, a JSON-schema dict, Regex, Choice or
                Grammar; the parsed value lands in ``.parsed``.
            **options: Per-call :class:`~unillm.Options` (max_tokens, temperature, tools, lora,
                deadline, timeout, ...), over the client's defaults.

        Returns:
            An iterator of deltas; the last carries usage, timings and finish reason.
        """
        agen: AsyncIterator[Delta] = aiter(
            self.llm.stream(prompt, messages=messages, output=output, **options)
        )
        try:
            while True:
                try:
                    yield self._loop.call(agen.__anext__)
                except StopAsyncIteration:
                    return
        finally:
            self._loop.call(agen.aclose)  # type: ignore[attr-defined]


class BlockingLoras:
    """Blocking twin of :class:`~unillm.client.llm.Loras`.

    Args:
        owner: The blocking client whose engine's adapters these are.
    """

    def __init__(self, owner: BlockingLLM) -> None:
        self._owner = owner

    def load(self, name: str, path: str) -> None:
        """Load a LoRA adapter at runtime.

        Args:
            name: The name requests use (``lora=name``).
            path: The adapter's folder, as a path on the engine's host.

        Raises:
            InvalidOptions: A malformed name or an empty path.
            UnsupportedFeature: The engine cannot load adapters at runtime.
        """
        self._owner._run(self._owner.llm.loras.load, name, path)

    def unload(self, name: str) -> None:
        """Unload a LoRA adapter.

        Args:
            name: The adapter's name, as loaded.

        Raises:
            UnknownLora: The engine serves no adapter of that name.
        """
        self._owner._run(self._owner.llm.loras.unload, name)

    def list(self) -> list[LoraInfo]:
        """Adapters served now."""
        return self._owner._run(self._owner.llm.loras.list)


@contextlib.contextmanager
def blocking_launch(launch: contextlib.AbstractAsyncContextManager[Any]) -> Iterator[BlockingLLM]:
    """Enter a launch (one engine or a fleet) on a private loop thread; a blocking twin of its client."""
    loop = _Loop()
    try:
        with loop.portal.wrap_async_context_manager(launch) as llm:
            blocking = BlockingLLM(llm, loop)
            yield blocking
    finally:
        loop.close()
