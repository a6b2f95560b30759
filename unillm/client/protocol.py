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
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, overload

from pydantic import BaseModel
from typing_extensions import Self, Unpack

from unillm.embeddings import DEFAULT_BATCH_SIZE
from unillm.options import Messages, Options, OutputSpec
from unillm.results import Completion, Embeddings, LoraInfo, Tokens

if TYPE_CHECKING:
    from openai import AsyncOpenAI

    from unillm.adapter.base import EngineInfo
    from unillm.capabilities import Capabilities
    from unillm.client.blocking import BlockingLLM
    from unillm.client.stream import Stream
    from unillm.metrics import EngineMetrics

M = TypeVar("M", bound=BaseModel)


class LoraControl(Protocol):
    """Runtime LoRA adapters: ``await llm.loras.load("sql", "/adapters/sql")``."""

    async def load(self, name: str, path: str) -> None:
        """Load an adapter at runtime under ``name``."""

    async def unload(self, name: str) -> None:
        """Unload the adapter ``name``."""

    async def list(self) -> list[LoraInfo]:
        """Adapters served now."""


class Client(Protocol):
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
        """Served model, engine version and limits."""

    async def capabilities(self) -> Capabilities:
        """What the engine, at its detected version, can honour."""

    async def health(self) -> bool:
        """True when the engine answers its health check."""

    async def metrics(self) -> EngineMetrics:
        """The engine's Prometheus metrics."""

    def openai(self) -> AsyncOpenAI:
        """An ``openai.AsyncOpenAI`` client for the same endpoint."""

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
        """Generate a whole answer."""

    def stream(
        self,
        prompt: str | None = None,
        *,
        messages: Messages | None = None,
        output: OutputSpec | None = None,
        **options: Unpack[Options],
    ) -> Stream:
        """Stream an answer as deltas."""

    async def embed(
        self,
        texts: str | Sequence[str],
        *,
        batch_size: int = DEFAULT_BATCH_SIZE,
        dimensions: int | None = None,
        concurrency: int = 4,
        timeout: float | None = None,
    ) -> Embeddings:
        """One vector per text."""

    async def tokenize(
        self,
        text: str | None = None,
        *,
        messages: Messages | None = None,
        timeout: float | None = None,
    ) -> Tokens:
        """Token ids of a text or of rendered chat messages."""


__all__ = ["LoraControl", "Client"]
