"""unillm as a pydantic-ai model: ``Agent(UnillmModel(llm))``, for one engine or a fleet.

    llm = unillm.connect("vllm", "http://127.0.0.1:8000")
    agent = Agent(UnillmModel(llm), output_type=NativeOutput(Capital))
    result = await agent.run("What is the capital of Kenya? Reply in JSON.")

A thin translation: pydantic-ai's messages become unillm chat messages, its tool definitions (function
and output tools) unillm ``tools=``, native structured output ``output=`` (the engine's constrained
decoding), its settings unillm options; the answer's text, thinking (a ``ThinkingPart``), tool calls,
finish reason and usage come back as pydantic-ai parts. A setting or part unillm cannot honour raises
:class:`unillm.UnsupportedFeature` before anything is sent. Needs ``pip install 'unillm-sdk[pydantic-ai]'``.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Iterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, cast

from pydantic_ai.messages import (
    BinaryContent,
    FinishReason,
    ImageUrl,
    ModelMessage,
    ModelRequest,
    ModelResponse,
    ModelResponsePart,
    ModelResponseStreamEvent,
    RetryPromptPart,
    SystemPromptPart,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models import Model, ModelRequestParameters, StreamedResponse
from pydantic_ai.profiles import ModelProfile, ModelProfileSpec
from pydantic_ai.settings import ModelSettings
from pydantic_ai.usage import RequestUsage

from unillm.client.protocol import Client
from unillm.client.stream import Stream
from unillm.errors import UnsupportedFeature
from unillm.integrations._common import FINISH_REASONS, OPENAI_NAMED_SETTINGS, function_tool, refuse
from unillm.options import JsonSchema, Options
from unillm.results import Completion, Usage

__all__ = ["UnillmModel", "UnillmStreamedResponse"]

#: pydantic-ai settings -> unillm options of the same meaning.
_SETTINGS = {
    **{name: name for name in OPENAI_NAMED_SETTINGS},
    "top_k": "top_k",
    "seed": "seed",
    "stop_sequences": "stop",
}
#: Settings pydantic-ai applies itself, or that change nothing on the wire: not unillm's to refuse.
_HANDLED_BY_PYDANTIC_AI = frozenset(
    {
        "request_timeout",
        "first_event_timeout",
        "framing_announcement",
        "max_retries",
        "tool_choice",
        "thinking",
    }
)
_THINKING_EFFORTS = {"minimal": "minimal", "low": "low", "medium": "medium", "high": "high"}

#: What unillm can do for any engine it talks to (a setting the engine cannot honour is refused by
#: unillm itself, before sending): tools, JSON-schema constrained output and thinking.
DEFAULT_PROFILE = ModelProfile(
    supports_tools=True,
    supports_json_schema_output=True,
    supports_json_object_output=False,
    supports_thinking=True,
)


class UnillmModel(Model):
    """A pydantic-ai model answered by a unillm client (one ``LLM`` or a ``Fleet``).

    Args:
        client: The unillm client every request goes through (launched, connected or a fleet).
        model_name: The name pydantic-ai reports; None: the client's engine name.
        settings: Default pydantic-ai model settings.
        profile: pydantic-ai's model profile; None: tools, JSON-schema output and thinking on.
    """

    def __init__(
        self,
        client: Client,
        *,
        model_name: str | None = None,
        settings: ModelSettings | None = None,
        profile: ModelProfileSpec | None = None,
    ) -> None:
        super().__init__(settings=settings, profile=profile if profile is not None else DEFAULT_PROFILE)
        self.client = client
        self._model_name = model_name or client.engine

    @property
    def model_name(self) -> str:
        """The model's name, as pydantic-ai reports it."""
        return self._model_name

    @property
    def system(self) -> str:
        """The engine behind the client ("vllm", "sglang", ...)."""
        return self.client.engine

    async def request(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
    ) -> ModelResponse:
        """One whole answer.

        Args:
            messages: The conversation so far.
            model_settings: pydantic-ai settings over the model's.
            model_request_parameters: Tools, output mode and output schema.

        Returns:
            The answer's thinking, text and tool calls, with usage and finish reason.

        Raises:
            UnsupportedFeature: A setting or message part unillm cannot send.
            UnillmError: What the engine or the fleet raised (a subclass says what).
        """
        settings, params = self.prepare_request(model_settings, model_request_parameters)
        kwargs = self._call(messages, settings, params)
        r = await self.client.generate(**kwargs)
        return self._response(r)

    @asynccontextmanager
    async def request_stream(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
        run_context: Any = None,
    ) -> AsyncGenerator[StreamedResponse]:
        """One answer as it arrives (see :meth:`request` for the arguments and errors)."""
        settings, params = self.prepare_request(model_settings, model_request_parameters)
        kwargs = self._call(messages, settings, params)
        async with self.client.stream(**kwargs) as stream:
            yield UnillmStreamedResponse(
                model_request_parameters=params, _model_name=self._model_name, _stream=stream
            )

    # -- pydantic-ai -> unillm ------------------------------------------------------------------------
    def _call(
        self, messages: list[ModelMessage], settings: ModelSettings | None, params: ModelRequestParameters
    ) -> dict[str, Any]:
        engine = self.client.engine
        if params.native_tools:
            names = ", ".join(type(t).__name__ for t in params.native_tools)
            raise UnsupportedFeature(
                engine, f"pydantic-ai native tools ({names})", why="open engines run none"
            )
        kwargs: dict[str, Any] = {"messages": self._messages(messages, params), **_options(engine, settings)}
        tools = [
            function_tool(t.name, t.description, t.parameters_json_schema)
            for t in (*params.function_tools, *params.output_tools)
        ]
        if tools:
            kwargs["tools"] = tools
            choice = (settings or {}).get("tool_choice")
            if isinstance(choice, str):
                kwargs["tool_choice"] = choice
            elif isinstance(choice, list) and len(choice) == 1:
                kwargs["tool_choice"] = choice[0]
            elif choice is not None:
                raise UnsupportedFeature(
                    engine, f"pydantic-ai tool_choice={choice!r}", alternative="name one tool"
                )
            if not params.allow_text_output and "tool_choice" not in kwargs:
                kwargs["tool_choice"] = "required"
        if params.output_mode == "native" and params.output_object is not None:
            o = params.output_object
            kwargs["output"] = JsonSchema(o.json_schema, name=o.name or "final_result")
        elif params.output_mode == "image":
            raise UnsupportedFeature(engine, "pydantic-ai image output", why="unillm answers text")
        thinking = (settings or {}).get("thinking", params.thinking)
        if thinking is True or thinking is False:
            kwargs["thinking"] = thinking
        elif isinstance(thinking, str):
            if thinking not in _THINKING_EFFORTS:
                raise UnsupportedFeature(
                    engine, f"pydantic-ai thinking={thinking!r}", alternative="use low to high"
                )
            kwargs["reasoning_effort"] = _THINKING_EFFORTS[thinking]
        return kwargs

    def _messages(
        self, messages: Sequence[ModelMessage], params: ModelRequestParameters
    ) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for message in messages:
            if isinstance(message, ModelRequest):
                out.extend(_request_messages(self.client.engine, message))
            else:
                out.append(_response_message(message))
        leading = next((i for i, m in enumerate(out) if m["role"] != "system"), len(out))
        instructions = self._get_instruction_parts(messages, params) or []
        out[leading:leading] = [{"role": "system", "content": part.content} for part in instructions]
        return out

    # -- unillm -> pydantic-ai ------------------------------------------------------------------------
    def _response(self, r: Completion[Any]) -> ModelResponse:
        parts: list[ModelResponsePart] = []
        if r.reasoning:
            parts.append(ThinkingPart(content=r.reasoning))
        if r.text:
            parts.append(TextPart(content=r.text))
        parts += [ToolCallPart(c.name, c.arguments, tool_call_id=c.id) for c in r.tool_calls]
        return ModelResponse(
            parts=parts,
            usage=_usage(r.usage),
            model_name=r.model or self._model_name,
            provider_name=self.client.engine,
            provider_response_id=r.id,
            finish_reason=_finish(r.finish_reason),
        )


@dataclass
class UnillmStreamedResponse(StreamedResponse):
    """A unillm :class:`~unillm.Stream` as pydantic-ai stream events (thinking, text, tool-call parts)."""

    _model_name: str
    _stream: Stream
    _timestamp: datetime = field(default_factory=lambda: datetime.now(timezone.utc))

    async def _get_event_iterator(self) -> AsyncIterator[ModelResponseStreamEvent]:
        async for d in self._stream:
            for event in self._events(d.reasoning, d.text):
                yield event
            for call in d.tool_calls or ():
                for event in self._parts_manager.handle_tool_call_delta_events(
                    vendor_part_id=("call", call.index),
                    tool_name=call.name,
                    args=call.arguments or None,
                    tool_call_id=call.id,
                ):
                    yield event
            if d.usage is not None:
                self._usage = _usage(d.usage)
            if d.finish_reason is not None:
                self.finish_reason = _finish(d.finish_reason)

    def _events(self, reasoning: str, text: str) -> Iterator[ModelResponseStreamEvent]:
        if reasoning:
            yield from self._parts_manager.handle_thinking_delta(vendor_part_id="thinking", content=reasoning)
        if text:
            yield from self._parts_manager.handle_text_delta(vendor_part_id="text", content=text)

    @property
    def model_name(self) -> str:
        """The model's name."""
        return self._model_name

    @property
    def provider_name(self) -> str | None:
        """The engine behind the stream."""
        return None

    @property
    def provider_url(self) -> str | None:
        """Not told: a fleet's replica is picked per request."""
        return None

    @property
    def timestamp(self) -> datetime:
        """When the stream started."""
        return self._timestamp


def _options(engine: str, settings: ModelSettings | None) -> Options:
    values = dict(settings or {})
    refuse(
        engine,
        "pydantic-ai ModelSettings",
        (
            k
            for k, v in values.items()
            if v is not None and k not in _SETTINGS and k not in _HANDLED_BY_PYDANTIC_AI
        ),
    )
    options = {_SETTINGS[k]: v for k, v in values.items() if k in _SETTINGS and v is not None}
    return cast(Options, options)


def _request_messages(engine: str, request: ModelRequest) -> Iterator[dict[str, Any]]:
    for part in request.parts:
        if isinstance(part, SystemPromptPart):
            yield {"role": "system", "content": part.content}
        elif isinstance(part, UserPromptPart):
            yield {"role": "user", "content": _user_content(engine, part.content)}
        elif isinstance(part, ToolReturnPart):
            yield {"role": "tool", "tool_call_id": part.tool_call_id, "content": part.model_response_str()}
        elif isinstance(part, RetryPromptPart):
            if part.tool_name is None:
                yield {"role": "user", "content": part.model_response()}
            else:
                yield {"role": "tool", "tool_call_id": part.tool_call_id, "content": part.model_response()}
        else:  # instruction and settings deltas: pydantic-ai's prepare_messages folds them away first
            continue


def _user_content(engine: str, content: Any) -> str | list[Any]:
    if isinstance(content, str):
        return content
    parts: list[Any] = []
    for item in content:
        if isinstance(item, str):
            parts.append({"type": "text", "text": item})
        elif isinstance(item, ImageUrl):
            parts.append({"type": "image_url", "image_url": {"url": item.url}})
        elif isinstance(item, BinaryContent) and item.is_image:
            parts.append({"type": "image_url", "image_url": {"url": item.data_uri}})
        else:
            raise UnsupportedFeature(
                engine, f"pydantic-ai {type(item).__name__} input", alternative="send text and images"
            )
    return parts


def _response_message(response: ModelResponse) -> dict[str, Any]:
    """An earlier answer, as the assistant message the chat template reads (thinking is not sent back)."""
    text = "".join(p.content for p in response.parts if isinstance(p, TextPart))
    calls = [
        {
            "id": p.tool_call_id,
            "type": "function",
            "function": {"name": p.tool_name, "arguments": p.args_as_json_str()},
        }
        for p in response.parts
        if isinstance(p, ToolCallPart)
    ]
    message: dict[str, Any] = {"role": "assistant", "content": text or None}
    if calls:
        message["tool_calls"] = calls
    return message


def _usage(usage: Usage) -> RequestUsage:
    details = {"reasoning_tokens": usage.reasoning_tokens} if usage.reasoning_tokens is not None else {}
    return RequestUsage(
        input_tokens=usage.prompt_tokens,
        output_tokens=usage.completion_tokens,
        cache_read_tokens=usage.cached_tokens or 0,
        details=details,
    )


def _finish(reason: str | None) -> FinishReason | None:
    return cast("FinishReason | None", FINISH_REASONS.get(reason or ""))
