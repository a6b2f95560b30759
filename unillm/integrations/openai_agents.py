"""unillm as an OpenAI Agents SDK model: ``Agent(model=UnillmAgentsModel(llm))``, or every agent of a run
through ``RunConfig(model_provider=UnillmProvider(llm))``; one engine or a fleet.

    llm = unillm.connect("vllm", "http://127.0.0.1:8000")
    agent = Agent(name="weather", tools=[get_weather], model=UnillmAgentsModel(llm))
    result = await Runner.run(agent, "What is the weather in Oslo?")

A thin translation: the SDK's Responses-format input becomes chat messages by the SDK's own
Chat Completions converter, function tools and handoffs become unillm ``tools=``, a structured
``output_type`` becomes ``output=`` (the engine's constrained decoding), settings become unillm options;
the answer (text, thinking as a reasoning item, tool calls, usage) comes back as Responses items, and a
stream as Responses events, built by the SDK's own Chat Completions stream handler. What unillm
cannot honour (hosted tools, an option it has not) raises :class:`unillm.UnsupportedFeature` before
anything is sent. Needs ``pip install 'unillm-sdk[openai-agents]'``.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

from agents import Handoff, ModelSettings, Tool, Usage
from agents.agent_output import AgentOutputSchemaBase
from agents.items import ModelResponse, TResponseInputItem, TResponseStreamEvent
from agents.models.chatcmpl_converter import Converter
from agents.models.chatcmpl_stream_handler import ChatCmplStreamHandler
from agents.models.fake_id import FAKE_RESPONSES_ID
from agents.models.interface import Model, ModelProvider, ModelTracing
from openai.types.chat import ChatCompletionChunk, ChatCompletionMessage
from openai.types.chat.chat_completion_message_function_tool_call import (
    ChatCompletionMessageFunctionToolCall,
    Function,
)
from openai.types.completion_usage import CompletionTokensDetails, CompletionUsage, PromptTokensDetails
from openai.types.responses import Response
from openai.types.responses.response_usage import InputTokensDetails, OutputTokensDetails

from unillm.client.protocol import Client
from unillm.client.stream import Stream
from unillm.errors import UnsupportedFeature
from unillm.integrations._common import OPENAI_NAMED_SETTINGS, function_tool, refuse
from unillm.options import JsonSchema
from unillm.results import Completion
from unillm.results import Usage as UnillmUsage

__all__ = ["UnillmAgentsModel", "UnillmProvider"]

#: ModelSettings fields -> unillm options of the same meaning.
_SETTINGS = {name: name for name in OPENAI_NAMED_SETTINGS}
#: Fields the SDK itself acts on (retries, usage bookkeeping, tool choice handled below).
_HANDLED_BY_THE_SDK = frozenset(
    {"tool_choice", "reasoning", "top_logprobs", "retry", "include_usage", "preserve_raw_usage"}
)


class UnillmAgentsModel(Model):
    """An Agents SDK model answered by a unillm client (one ``LLM`` or a ``Fleet``).

    Args:
        client: The unillm client every request goes through.
        model: The name the SDK reports; None: the client's engine name.
    """

    def __init__(self, client: Client, *, model: str | None = None) -> None:
        self.client = client
        self.model = model or client.engine

    async def get_response(
        self,
        system_instructions: str | None,
        input: str | list[TResponseInputItem],
        model_settings: ModelSettings,
        tools: list[Tool],
        output_schema: AgentOutputSchemaBase | None,
        handoffs: list[Handoff],
        tracing: ModelTracing,
        *,
        previous_response_id: str | None = None,
        conversation_id: str | None = None,
        prompt: Any = None,
    ) -> ModelResponse:
        """One whole answer, as Responses output items.

        Args:
            system_instructions: The agent's instructions (a system message).
            input: The conversation, in Responses format.
            model_settings: The SDK's settings, mapped to unillm options.
            tools: Function tools (hosted tools are refused).
            output_schema: A structured output type, sent as ``output=``.
            handoffs: Handoffs, offered as tools.
            tracing: The SDK's tracing setting (unillm's own observers trace the call).
            previous_response_id: Must be None: open engines keep no server-side state.
            conversation_id: Must be None, as above.
            prompt: Must be None: a stored OpenAI prompt.

        Returns:
            The answer's reasoning, message and tool calls, with usage.

        Raises:
            UnsupportedFeature: An option or tool unillm cannot honour; nothing was sent.
            UnillmError: What the engine or the fleet raised.
        """
        kwargs = self._call(
            system_instructions, input, model_settings, tools, output_schema, handoffs,
            previous_response_id, conversation_id, prompt,
        )  # fmt: skip
        r = await self.client.generate(**kwargs)
        return ModelResponse(
            output=Converter.message_to_output_items(_message(r)),
            usage=_usage(r.usage),
            response_id=r.id,
        )

    async def stream_response(
        self,
        system_instructions: str | None,
        input: str | list[TResponseInputItem],
        model_settings: ModelSettings,
        tools: list[Tool],
        output_schema: AgentOutputSchemaBase | None,
        handoffs: list[Handoff],
        tracing: ModelTracing,
        *,
        previous_response_id: str | None = None,
        conversation_id: str | None = None,
        prompt: Any = None,
    ) -> AsyncIterator[TResponseStreamEvent]:
        """One answer as Responses stream events (see :meth:`get_response` for the arguments)."""
        kwargs = self._call(
            system_instructions, input, model_settings, tools, output_schema, handoffs,
            previous_response_id, conversation_id, prompt,
        )  # fmt: skip
        response = Response(
            id=FAKE_RESPONSES_ID,
            created_at=time.time(),
            model=self.model,
            object="response",
            output=[],
            tool_choice="auto",
            tools=[],
            parallel_tool_calls=False,
        )
        async with self.client.stream(**kwargs) as stream:
            chunks = _chunks(stream, self.model)
            async for event in ChatCmplStreamHandler.handle_stream(response, chunks):  # type: ignore[arg-type]
                yield event

    def _call(
        self,
        system_instructions: str | None,
        input: str | list[TResponseInputItem],
        model_settings: ModelSettings,
        tools: list[Tool],
        output_schema: AgentOutputSchemaBase | None,
        handoffs: list[Handoff],
        previous_response_id: str | None,
        conversation_id: str | None,
        prompt: Any,
    ) -> dict[str, Any]:
        engine = self.client.engine
        stateful = {"previous_response_id": previous_response_id, "conversation_id": conversation_id}
        refuse(engine, "Agents SDK", [k for k, v in {**stateful, "prompt": prompt}.items() if v is not None])
        messages: list[dict[str, Any]] = [dict(m) for m in Converter.items_to_messages(input)]
        if system_instructions:
            messages.insert(0, {"role": "system", "content": system_instructions})
        kwargs: dict[str, Any] = {"messages": messages, **_options(engine, model_settings)}
        definitions = [_tool(engine, t) for t in tools] + [
            function_tool(h.tool_name, h.tool_description, h.input_json_schema) for h in handoffs
        ]
        if definitions:
            kwargs["tools"] = definitions
            if model_settings.tool_choice is not None:
                if not isinstance(model_settings.tool_choice, str):
                    raise UnsupportedFeature(
                        engine, "Agents SDK MCP tool_choice", alternative="name a function"
                    )
                kwargs["tool_choice"] = model_settings.tool_choice
        if output_schema is not None and not output_schema.is_plain_text():
            kwargs["output"] = JsonSchema(output_schema.json_schema(), name="final_output")
        return kwargs


class UnillmProvider(ModelProvider):
    """Every agent of a run answered by one unillm client: ``RunConfig(model_provider=UnillmProvider(llm))``.

    Args:
        client: The unillm client (one ``LLM`` or a ``Fleet``).
    """

    def __init__(self, client: Client) -> None:
        self.client = client

    def get_model(self, model_name: str | None) -> Model:
        """The model for an agent (its model name is only reported: the client decides what answers).

        Args:
            model_name: The agent's model name, if it set one.
        """
        return UnillmAgentsModel(self.client, model=model_name)


def _tool(engine: str, tool: Tool) -> dict[str, Any]:
    from agents import FunctionTool

    if not isinstance(tool, FunctionTool):
        raise UnsupportedFeature(
            engine, f"the hosted tool {type(tool).__name__}", why="open engines run function tools only"
        )
    return function_tool(tool.name, tool.description, tool.params_json_schema)


def _options(engine: str, settings: ModelSettings) -> dict[str, Any]:
    values = {k: v for k, v in settings.to_json_dict().items() if v is not None}
    refuse(
        engine,
        "Agents SDK ModelSettings",
        (k for k in values if k not in _SETTINGS and k not in _HANDLED_BY_THE_SDK),
    )
    options = {_SETTINGS[k]: getattr(settings, k) for k in values if k in _SETTINGS}
    if settings.top_logprobs is not None:
        options.update(logprobs=True, top_logprobs=settings.top_logprobs)
    effort = settings.reasoning.effort if settings.reasoning is not None else None
    if effort is not None:
        options["reasoning_effort"] = effort
    return options


def _message(r: Completion[Any]) -> ChatCompletionMessage:
    calls = [
        ChatCompletionMessageFunctionToolCall(
            id=c.id, type="function", function=Function(name=c.name, arguments=c.arguments)
        )
        for c in r.tool_calls
    ]
    extra = {"reasoning_content": r.reasoning} if r.reasoning else {}
    return ChatCompletionMessage(role="assistant", content=r.text or None, tool_calls=calls or None, **extra)


def _usage(usage: UnillmUsage | None) -> Usage:
    if usage is None:
        return Usage(requests=1)
    return Usage(
        requests=1,
        input_tokens=usage.prompt_tokens,
        output_tokens=usage.completion_tokens,
        total_tokens=usage.total_tokens,
        input_tokens_details=InputTokensDetails(cached_tokens=usage.cached_tokens or 0, cache_write_tokens=0),
        output_tokens_details=OutputTokensDetails(reasoning_tokens=usage.reasoning_tokens or 0),
    )


async def _chunks(stream: Stream, model: str) -> AsyncIterator[ChatCompletionChunk]:
    """unillm deltas as the Chat Completions chunks the SDK's stream handler reads."""
    async for d in stream:
        delta: dict[str, Any] = {"role": "assistant"}
        if d.text:
            delta["content"] = d.text
        if d.reasoning:
            delta["reasoning_content"] = d.reasoning
        if d.tool_calls:
            delta["tool_calls"] = [
                {
                    "index": c.index,
                    "id": c.id,
                    "type": "function" if c.id else None,
                    "function": {"name": c.name, "arguments": c.arguments},
                }
                for c in d.tool_calls
            ]
        choice = {"index": 0, "delta": delta, "finish_reason": d.finish_reason}
        chunk: dict[str, Any] = {
            "id": FAKE_RESPONSES_ID,
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": model,
            "choices": [choice],
        }
        if d.usage is not None:
            chunk["usage"] = CompletionUsage(
                prompt_tokens=d.usage.prompt_tokens,
                completion_tokens=d.usage.completion_tokens,
                total_tokens=d.usage.total_tokens,
                prompt_tokens_details=PromptTokensDetails(cached_tokens=d.usage.cached_tokens or 0),
                completion_tokens_details=CompletionTokensDetails(
                    reasoning_tokens=d.usage.reasoning_tokens or 0
                ),
            ).model_dump()
        yield ChatCompletionChunk.model_validate(chunk)
