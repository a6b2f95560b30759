"""unillm as a LangChain chat model: ``ChatUnillm(client=llm)``, for one engine or a fleet.

    llm = unillm.connect("vllm", "http://127.0.0.1:8000")
    chat = ChatUnillm(client=llm, temperature=0)
    chat.bind_tools([get_weather]).invoke("What is the weather in Oslo?").tool_calls
    chat.with_structured_output(Capital).invoke("What is the capital of Kenya? Reply in JSON.")

A thin translation: LangChain messages become unillm chat messages (LangChain's own OpenAI converter),
``bind_tools`` becomes unillm ``tools=``/``tool_choice=``, ``with_structured_output`` becomes
``output=`` (the engine's constrained decoding; ``method="function_calling"`` a forced tool call
instead), call options become unillm options; the answer's text, tool calls, thinking
(``additional_kwargs["reasoning_content"]``), finish reason and usage come back on an ``AIMessage`` or
as ``AIMessageChunk`` s. What unillm cannot honour raises :class:`unillm.UnsupportedFeature` before
anything is sent. Needs ``pip install 'unillm-sdk[langchain]'``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from operator import itemgetter
from typing import Any, Literal, cast

from langchain_core.callbacks import AsyncCallbackManagerForLLMRun, CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel, LangSmithParams, LanguageModelInput
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage, convert_to_openai_messages
from langchain_core.messages.ai import UsageMetadata
from langchain_core.output_parsers import JsonOutputParser, PydanticOutputParser
from langchain_core.output_parsers.openai_tools import JsonOutputKeyToolsParser, PydanticToolsParser
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langchain_core.runnables import Runnable, RunnableMap, RunnablePassthrough
from langchain_core.tools import BaseTool
from langchain_core.utils.function_calling import convert_to_json_schema, convert_to_openai_tool
from pydantic import BaseModel, ConfigDict, Field

from unillm.client.protocol import Client
from unillm.errors import UnsupportedFeature
from unillm.integrations._common import refuse
from unillm.options import Options
from unillm.results import Completion, Delta, Usage

__all__ = ["ChatUnillm"]

_OPTIONS = frozenset(Options.__annotations__) | {"output"}


class ChatUnillm(BaseChatModel):
    """A LangChain chat model answered by a unillm client (one ``LLM`` or a ``Fleet``).

    Fields other than ``client`` and ``model_name`` are unillm options sent with every call (a
    per-call keyword or ``.bind(...)`` overrides them).
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    client: Any = Field(exclude=True)
    """The unillm client every request goes through (:class:`unillm.Client`)."""
    model_name: str | None = None
    """The name LangChain reports; None: the client's engine."""
    temperature: float | None = None
    max_tokens: int | None = None
    top_p: float | None = None
    seed: int | None = None
    stop: list[str] | None = None
    timeout: float | None = None

    @property
    def _llm_type(self) -> str:
        return "unillm"

    @property
    def _identifying_params(self) -> dict[str, Any]:
        return {"engine": self._client.engine, "model_name": self.model_name, **self._defaults()}

    def _get_ls_params(self, stop: list[str] | None = None, **kwargs: Any) -> LangSmithParams:
        name = kwargs.get("model") or self.model_name or self._client.engine
        params = LangSmithParams(ls_provider="unillm", ls_model_name=name, ls_model_type="chat")
        if (temperature := kwargs.get("temperature", self.temperature)) is not None:
            params["ls_temperature"] = temperature
        if (max_tokens := kwargs.get("max_tokens", self.max_tokens)) is not None:
            params["ls_max_tokens"] = max_tokens
        if stop := stop or self.stop:
            params["ls_stop"] = stop
        return params

    @property
    def _client(self) -> Client:
        client: Client = self.client
        return client

    def _defaults(self) -> dict[str, Any]:
        names = ("temperature", "max_tokens", "top_p", "seed", "stop", "timeout")
        return {k: v for k in names if (v := getattr(self, k)) is not None}

    def _call(
        self, messages: list[BaseMessage], stop: list[str] | None, kwargs: Mapping[str, Any]
    ) -> dict[str, Any]:
        engine = self._client.engine
        refuse(
            engine,
            "LangChain call option",
            (k for k, v in kwargs.items() if k not in _OPTIONS and v is not None),
        )
        call = {**self._defaults(), **{k: v for k, v in kwargs.items() if v is not None}}
        if stop:
            call["stop"] = stop
        call["messages"] = [dict(m) for m in convert_to_openai_messages(messages)]
        return call

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        """A whole answer from a synchronous caller (``invoke``), on a twin client in its own loop."""
        call = self._call(messages, stop, kwargs)

        async def once() -> Completion[Any]:
            async with self._client.clone() as twin:
                return await twin.generate(**call)

        return _result(asyncio.run(once()))

    async def _agenerate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        """A whole answer (``ainvoke``): text, tool calls, thinking, usage and finish reason."""
        return _result(await self._client.generate(**self._call(messages, stop, kwargs)))

    async def _astream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> AsyncIterator[ChatGenerationChunk]:
        """An answer as ``AIMessageChunk`` s (``astream``); the last carries usage and finish reason."""
        async with self._client.stream(**self._call(messages, stop, kwargs)) as stream:
            async for d in stream:
                if d.index != 0:
                    continue
                chunk = ChatGenerationChunk(message=_chunk(d))
                if run_manager is not None and d.text:
                    await run_manager.on_llm_new_token(d.text, chunk=chunk)
                yield chunk

    def bind_tools(
        self,
        tools: Sequence[dict[str, Any] | type | Callable[..., Any] | BaseTool],
        *,
        tool_choice: str | bool | None = None,
        **kwargs: Any,
    ) -> Runnable[LanguageModelInput, AIMessage]:
        """Offer tools (LangChain tools, pydantic classes, functions or OpenAI definitions).

        Args:
            tools: The tools, converted by LangChain's ``convert_to_openai_tool``.
            tool_choice: "auto", "none", "any"/"required"/True (some tool), or a tool's name.
            **kwargs: Other unillm options to bind.

        Returns:
            The model with the tools bound.
        """
        definitions = [convert_to_openai_tool(t) for t in tools]
        if tool_choice in ("any", True):
            tool_choice = "required"
        return self.bind(tools=definitions, tool_choice=tool_choice, **kwargs)

    def with_structured_output(
        self,
        schema: dict[str, Any] | type,
        *,
        include_raw: bool = False,
        method: Literal["json_schema", "function_calling", "json_mode"] = "json_schema",
        strict: bool | None = None,
        **kwargs: Any,
    ) -> Runnable[LanguageModelInput, dict[str, Any] | BaseModel]:
        """Answers shaped by ``schema``: by the engine's constrained decoding (``json_schema``, the
        default) or by a forced call of a tool of that schema (``function_calling``).

        Args:
            schema: A pydantic class (answers are instances), a TypedDict, a JSON schema or an
                OpenAI tool definition (answers are dicts).
            include_raw: Answer ``{"raw": AIMessage, "parsed": ..., "parsing_error": ...}``.
            method: ``json_schema``, ``function_calling`` or ``json_mode`` (any JSON object, constrained;
                the prompt must describe the shape).
            strict: Accepted for LangChain's interface; constrained decoding is always strict.
            **kwargs: Other unillm options to bind.

        Returns:
            A runnable that answers the parsed value.

        Raises:
            UnsupportedFeature: Another method.
        """
        is_model = isinstance(schema, type) and issubclass(schema, BaseModel)
        parser: Runnable[Any, Any]
        bound: Runnable[LanguageModelInput, Any]
        if method in ("json_schema", "json_mode"):
            if method == "json_mode":
                json_schema: dict[str, Any] = {"type": "object"}
            elif is_model:
                json_schema = cast(type[BaseModel], schema).model_json_schema()
            else:
                json_schema = convert_to_json_schema(schema)
            bound = self.bind(output=json_schema, **kwargs)
            parser = PydanticOutputParser(pydantic_object=schema) if is_model else JsonOutputParser()
        elif method == "function_calling":
            name = convert_to_openai_tool(schema)["function"]["name"]
            bound = self.bind_tools([schema], tool_choice=name, **kwargs)
            parser = (
                PydanticToolsParser(tools=[schema], first_tool_only=True)
                if is_model
                else JsonOutputKeyToolsParser(key_name=name, first_tool_only=True)
            )
        else:
            raise UnsupportedFeature(
                self._client.engine,
                f"with_structured_output(method={method!r})",
                alternative="use method='json_schema', 'json_mode' or 'function_calling'",
            )
        if not include_raw:
            return bound | parser
        parsed = RunnablePassthrough.assign(parsed=itemgetter("raw") | parser, parsing_error=lambda _: None)
        fallback = RunnablePassthrough.assign(parsed=lambda _: None)
        return RunnableMap(raw=bound) | parsed.with_fallbacks([fallback], exception_key="parsing_error")


def _result(r: Completion[Any]) -> ChatResult:
    message = AIMessage(
        content=r.text,
        tool_calls=[
            {
                "name": c.name,
                "args": c.parsed if isinstance(c.parsed, dict) else {},
                "id": c.id,
                "type": "tool_call",
            }
            for c in r.tool_calls
            if c.valid
        ],
        invalid_tool_calls=[
            {"name": c.name, "args": c.arguments, "id": c.id, "error": c.error, "type": "invalid_tool_call"}
            for c in r.tool_calls
            if not c.valid
        ],
        additional_kwargs={"reasoning_content": r.reasoning} if r.reasoning else {},
        usage_metadata=_usage(r.usage),
        response_metadata={"finish_reason": r.finish_reason, "model_name": r.model, "engine": r.engine},
        id=r.id,
    )
    return ChatResult(generations=[ChatGeneration(message=message)])


def _chunk(d: Delta) -> AIMessageChunk:
    return AIMessageChunk(
        content=d.text,
        additional_kwargs={"reasoning_content": d.reasoning} if d.reasoning else {},
        tool_call_chunks=[
            {
                "name": c.name,
                "args": c.arguments or None,
                "id": c.id,
                "index": c.index,
                "type": "tool_call_chunk",
            }
            for c in d.tool_calls or ()
        ],
        usage_metadata=_usage(d.usage) if d.usage is not None else None,
        response_metadata={"finish_reason": d.finish_reason} if d.finish_reason else {},
    )


def _usage(usage: Usage) -> UsageMetadata:
    metadata: dict[str, Any] = {
        "input_tokens": usage.prompt_tokens,
        "output_tokens": usage.completion_tokens,
        "total_tokens": usage.total_tokens,
    }
    if usage.reasoning_tokens is not None:
        metadata["output_token_details"] = {"reasoning": usage.reasoning_tokens}
    if usage.cached_tokens is not None:
        metadata["input_token_details"] = {"cache_read": usage.cached_tokens}
    return cast(UsageMetadata, metadata)
