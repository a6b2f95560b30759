"""The interface an ``LLM`` and a ``Fleet`` share: type code against ``unillm.Client`` to accept both.

    async def summarize(llm: unillm.Client, text: str) -> str:
        return (await llm.generate(f"Summarize: {text}", max_tokens=64)).text

    await summarize(unillm.connect("vllm", "http://a:8000"), text)                        # one engine
    await summarize(unillm.connect("vllm", ["http://a:8000", "http://b:8000"]), text)     # a fleet

The calls themselves are :class:`~unillm.client.calls.ClientCalls`, which the blocking twin
(:class:`~unillm.client.blocking.BlockingLLM`) drives; a Client also clones itself and makes that twin.
The SGLang DSL backend takes a Client.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from unillm.client.calls import ClientCalls, LoraControl

if TYPE_CHECKING:
    from unillm.client.blocking import BlockingLLM


class Client(ClientCalls, Protocol):
    """Anything that generates like :class:`~unillm.client.llm.LLM`: one engine, or a fleet of replicas."""

    def clone(self) -> Client:
        """A twin with its own connection pools (e.g. for another event loop)."""

    def blocking(self) -> BlockingLLM:
        """A blocking twin for scripts and notebooks."""


__all__ = ["LoraControl", "Client"]
