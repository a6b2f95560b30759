"""Validated requests for adapter tests (golden bodies, wire mappings): ``chat_request(max_tokens=8)``."""

from __future__ import annotations

from typing import Any, Final, TypedDict

from unillm.options import Request, make_request

#: The one-message chat the request builders send.
CHAT = [{"role": "user", "content": "Hi"}]


class Sampling(TypedDict):
    """The sampling options of :data:`SAMPLING`, each set (unpacks next to max_tokens, stop, seed)."""

    temperature: float
    top_p: float
    top_k: int
    min_p: float
    presence_penalty: float
    frequency_penalty: float
    repetition_penalty: float


#: Every sampling option at once (but seed and stop, which some servers take only when set up
#: for them), with values every engine accepts: ``llm.generate("Hi", **SAMPLING)``. The
#: OpenAI-compatible engines send each one under its own name.
SAMPLING: Final[Sampling] = {
    "temperature": 0.8,
    "top_p": 0.9,
    "top_k": 20,
    "min_p": 0.01,
    "presence_penalty": 0.1,
    "frequency_penalty": 0.1,
    "repetition_penalty": 1.05,
}


def prompt_request(output: Any = None, *, stream: bool = False, **options: Any) -> Request:
    """A completions request for the prompt ``"Hi"``.

    Args:
        output: The ``output=`` constraint, if any.
        stream: Build a streaming request.
        **options: Per-call options.

    Returns:
        The validated request.
    """
    return make_request("Hi", None, output, options, stream=stream)


def chat_request(output: Any = None, *, stream: bool = False, **options: Any) -> Request:
    """:func:`prompt_request`'s chat twin: the messages are :data:`CHAT`."""
    return make_request(None, CHAT, output, options, stream=stream)


__all__ = ["CHAT", "SAMPLING", "Sampling", "chat_request", "prompt_request"]
