"""A whole answer read from a stream: ``generate`` on an engine that stops only streams.

Some engines stop generating when a client leaves a stream but run a non-streamed request to its
end whatever the client did (SGLang notices a gone client only every few seconds; MLX's server
never). On such an engine (``Adapter.stops_only_streams``) ``generate`` sends its request as a
stream and joins the deltas into the same :class:`~unillm.results.Completion`, so a cancelled call
stops the engine too. It does so only where nothing is lost: one choice, and an engine whose
streams count tokens.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from unillm.capabilities import Capabilities, Feature, check
from unillm.errors import UnsupportedFeature
from unillm.options import Request
from unillm.results import Completion, CompletionChoice, Delta, TokenLogprob, Usage

if TYPE_CHECKING:
    from unillm.adapter.base import EngineInfo
    from unillm.client.stream import Stream


def streamed_variant(capabilities: Capabilities, request: Request) -> Request | None:
    """``request`` sent as a stream, when a stream can carry all of its answer; else None.

    Args:
        capabilities: The engine's capabilities at its version.
        request: A validated non-streamed request.

    Returns:
        The streamed request, or None (n > 1, streams without token counts, or a feature the
        engine honours only whole).
    """
    if (request.n or 1) != 1 or not capabilities.supports(Feature.STREAM_USAGE):
        return None
    streamed = replace(request, stream=True)
    try:
        check(capabilities, streamed)
    except UnsupportedFeature:
        return None
    return streamed


async def join_stream(
    stream: Stream, deltas: AsyncIterator[Delta], engine: str, info: EngineInfo
) -> Completion[Any]:
    """The completion a non-streamed answer would have given, from one choice's deltas.

    Args:
        stream: The stream (it joins the tool calls).
        deltas: Its deltas, unobserved (the call is observed as a ``generate``); the last carries
            usage, timings and finish reason.
        engine: The adapter's name.
        info: What discovery learnt about the engine (version, served model).

    Returns:
        The completion (its ``timings`` the stream's: first token and gaps included).
    """
    texts: list[str] = []
    thoughts: list[str] = []
    logprobs: list[TokenLogprob] | None = None
    last = Delta()
    async for last in deltas:
        texts.append(last.text)
        thoughts.append(last.reasoning)
        if last.logprobs is not None:
            logprobs = [*(logprobs or ()), *last.logprobs]
    assert last.timings is not None  # the stream's final delta always carries them
    thought = "".join(thoughts)
    choice: CompletionChoice[Any] = CompletionChoice(
        index=0,
        text="".join(texts),
        finish_reason=last.finish_reason,
        logprobs=logprobs,
        tool_calls=stream.tool_calls,
        reasoning=thought or None,
    )
    return Completion(
        choices=[choice],
        usage=last.usage or Usage(),
        timings=last.timings,
        engine=engine,
        engine_version=info.version,
        model=info.model,
    )
