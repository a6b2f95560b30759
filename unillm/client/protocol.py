"""The interface an ``LLM`` and a ``Fleet`` share: type code against ``unillm.Client`` to accept both.

    async def summarize(llm: unillm.Client, text: str) -> str:
        return (await llm.generate(f"Summarize: {text}", max_tokens=64)).text

    await summarize(unillm.connect("vllm", "http://a:8000"), text)                        # one engine
    await summarize(unillm.connect("vllm", ["http://a:8000", "http://b:8000"]), text)     # a fleet

The blocking twin (:class:`~unillm.client.blocking.BlockingLLM`) and the SGLang DSL backend take a Client.
"""

from __future__ import annotations

from collections.abc import Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Protocol

from typing_extensions import Self

from unillm.client.calls import Generates
from unillm.embeddings import DEFAULT_BATCH_SIZE
from unillm.options import Messages, Options
from unillm.results import Embeddings, LoraInfo, Tokens

if TYPE_CHECKING:
    from openai import AsyncOpenAI

    from unillm.adapter.base import EngineInfo
    from unillm.capabilities import Capabilities
    from unillm.client.blocking import BlockingLLM
    from unillm.metrics import EngineMetrics


class LoraControl(Protocol):
    """Runtime LoRA adapters: ``await llm.loras.load("sql", "/adapters/sql")``."""

    async def load(self, name: str, path: str) -> None:
        """Load an adapter at runtime under ``name``.

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


class Client(Generates, Protocol):
    """Anything that generates like :class:`~unillm.client.llm.LLM`: one engine, or a fleet of replicas."""

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

    def clone(self) -> Client:
        """A twin with its own connection pools (e.g. for another event loop)."""

    def blocking(self) -> BlockingLLM:
        """A blocking twin for scripts and notebooks."""

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

    async def embed(
        self,
        texts: str | Sequence[str],
        *,
        batch_size: int = DEFAULT_BATCH_SIZE,
        dimensions: int | None = None,
        concurrency: int = 4,
        timeout: float | None = None,
    ) -> Embeddings:
        """One vector per text.

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

    async def tokenize(
        self,
        text: str | None = None,
        *,
        messages: Messages | None = None,
        timeout: float | None = None,
    ) -> Tokens:
        """Token ids of a text or of rendered chat messages.

        Args:
            text: A text to tokenize as is; or pass ``messages``.
            messages: Chat messages, rendered by the model's chat template with the generation prompt.
            timeout: Seconds each wait for the engine's bytes may take; None uses the client's
                read timeout.

        Returns:
            The token ids and their count.

        Raises:
            UnsupportedFeature: The engine has no tokenize endpoint.
        """


__all__ = ["LoraControl", "Client"]
