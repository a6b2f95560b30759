"""The client as a frontend shipped in an adapter package sees it: two narrow protocols.

A frontend (SGLang's DSL, ``unillm_sglang.dsl``) runs on a client its user hands it: an async
``unillm.LLM`` or ``unillm.Fleet``, or the blocking twin of one (``unillm.BlockingLLM``). Adapter
packages import the adapter SDK only, so the frontend names what it uses here, not the client's
classes, which fit these protocols as they are (mypy checks it where a client is passed):

    def __init__(self, llm: AsyncClient | BlockingClient) -> None:
        self.llm = llm.blocking() if isinstance(llm, AsyncClient) else llm
"""

from __future__ import annotations

from collections.abc import Iterator
from types import TracebackType
from typing import Any, Protocol, runtime_checkable

from typing_extensions import Self, Unpack

from unillm.adapter.base import EngineInfo
from unillm.options import Messages, Options, OutputSpec
from unillm.results import Completion, Delta

__all__ = ["AsyncClient", "BlockingClient", "Closing"]


class _Inputs(Options, total=False):
    """What a call takes besides the prompt: chat messages, an output constraint, the options."""

    messages: Messages | None
    output: OutputSpec | None


class _Named(Protocol):
    """A client that names its engine."""

    @property
    def engine(self) -> str:
        """The engine's adapter name ("vllm", "sglang", ...)."""


@runtime_checkable
class AsyncClient(_Named, Protocol):
    """An async client (``unillm.LLM``, ``unillm.Fleet``): its engine, and a blocking twin."""

    def blocking(self) -> BlockingClient:
        """A blocking twin, with its own event-loop thread (close it when done)."""


class BlockingClient(Protocol):
    """A blocking client (``unillm.BlockingLLM``), usable from any thread."""

    @property
    def llm(self) -> _Named:
        """The async client it drives."""

    def info(self) -> EngineInfo:
        """Served model, engine version and limits."""

    def generate(self, prompt: str | None = None, **inputs: Unpack[_Inputs]) -> Completion[Any]:
        """The whole answer to ``prompt`` (completions API) or ``messages`` (chat API).

        Args:
            prompt: A plain prompt; None to send ``messages``.
            inputs: ``messages``, ``max_tokens``, ``output``, ... as :meth:`unillm.LLM.generate` takes them.
        """

    def stream(self, prompt: str | None = None, **inputs: Unpack[_Inputs]) -> Iterator[Delta]:
        """The answer as it comes; the last delta carries usage, timings and finish reason.

        Args:
            prompt: A plain prompt; None to send ``messages``.
            inputs: ``messages``, ``max_tokens``, ``output``, ... as :meth:`unillm.LLM.stream` takes them.
        """

    def close(self) -> None:
        """Close the connections and the event-loop thread."""


class Closing:
    """``with obj:`` calls ``obj.close()`` on leaving (the blocking client, a frontend's backend)."""

    def close(self) -> None:
        """Release what the object holds (connections, a loop thread)."""
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
