"""Validated requests for adapter tests (golden bodies, wire mappings): ``chat_request(max_tokens=8)``."""

from __future__ import annotations

from typing import Any

from unillm.options import Request, make_request

#: The one-message chat the request builders send.
CHAT = [{"role": "user", "content": "Hi"}]


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


__all__ = ["CHAT", "chat_request", "prompt_request"]
