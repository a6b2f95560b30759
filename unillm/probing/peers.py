"""The probe's asks through other clients, for a side-by-side count of silent drops.

OpenAIClient(url, model)            # the openai SDK: standard parameters, the rest in extra_body
LiteLLMClient(url, model)           # LiteLLM's hosted_vllm/ provider: the rest as keyword arguments

Options without an OpenAI parameter are sent the way vLLM's docs spell them (``structured_outputs``,
``repetition_penalty``, ``chat_template_kwargs``), so a column shows what each client does with
what a user of it would write. Needs the ``bench`` extra (openai, litellm).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from unillm.client.closing import AsyncClosing
from unillm.options import Choice as ChoiceOutput
from unillm.options import Grammar, JsonSchema, Regex
from unillm.probing.asking import Answer, Ask, Choice, NotExpressible, Refused, Rejected

#: Option names that are OpenAI chat parameters, sent as they are.
STANDARD = (
    "temperature",
    "seed",
    "max_tokens",
    "stop",
    "n",
    "presence_penalty",
    "frequency_penalty",
    "logprobs",
    "top_logprobs",
    "tools",
    "tool_choice",
)


def split_options(ask: Ask) -> tuple[dict[str, Any], dict[str, Any], str | None]:
    """OpenAI parameters, engine-specific fields (vLLM's spelling) and the LoRA name of an ask.

    Args:
        ask: The probe's request.

    Returns:
        (standard parameters, extra fields, the LoRA to name as the model or None).

    Raises:
        NotExpressible: An option with no OpenAI parameter and no vLLM field.
    """
    options = dict(ask.options)
    lora = options.pop("lora", None)
    standard = {k: options.pop(k) for k in STANDARD if k in options}
    extra: dict[str, Any] = {}
    if "repetition_penalty" in options:
        extra["repetition_penalty"] = options.pop("repetition_penalty")
    if "thinking" in options:
        extra["chat_template_kwargs"] = {"enable_thinking": bool(options.pop("thinking"))}
    if options:
        raise NotExpressible(f"no parameter for {sorted(options)}")
    out = ask.output
    if isinstance(out, JsonSchema):
        standard["response_format"] = {
            "type": "json_schema",
            "json_schema": {"name": out.name, "schema": dict(out.schema), "strict": True},
        }
    elif isinstance(out, Regex):
        extra["structured_outputs"] = {"regex": out.pattern}
    elif isinstance(out, ChoiceOutput):
        extra["structured_outputs"] = {"choice": list(out.options)}
    elif isinstance(out, Grammar):
        extra["structured_outputs"] = {"grammar": out.text}
    if ask.stream:
        standard["stream_options"] = {"include_usage": True}
    return standard, extra, lora


def answer_of(response: Any) -> Answer:
    """The neutral answer of an OpenAI-shaped chat completion (openai or LiteLLM objects).

    Args:
        response: The client's response object.
    """
    choices = []
    for c in response.choices or ():
        message = c.message
        calls = tuple(t.function.name for t in (message.tool_calls or ()) if t.function and t.function.name)
        logprobs = getattr(c, "logprobs", None)  # LiteLLM's Choices lack it when none came back
        content = getattr(logprobs, "content", None) if logprobs is not None else None
        choices.append(
            Choice(
                text=message.content or "",
                finish_reason=c.finish_reason,
                reasoning=getattr(message, "reasoning_content", None) or getattr(message, "reasoning", None),
                tool_calls=calls,
                top_counts=None if content is None else tuple(len(t.top_logprobs or ()) for t in content),
                tokens=() if content is None else tuple(t.token for t in content),
            )
        )
    usage = getattr(response, "usage", None)
    details = getattr(usage, "prompt_tokens_details", None)
    return Answer(
        choices=tuple(choices),
        completion_tokens=getattr(usage, "completion_tokens", None),
        cached_tokens=getattr(details, "cached_tokens", None),
    )


async def _streamed(stream: Any) -> Answer:
    text, finish, tokens = [], None, None
    async for event in stream:
        for c in event.choices or ():
            text.append(c.delta.content or "")
            finish = c.finish_reason or finish
        usage = getattr(event, "usage", None)
        if usage is not None and usage.completion_tokens:
            tokens = usage.completion_tokens
    return Answer(choices=(Choice(text="".join(text), finish_reason=finish),), completion_tokens=tokens)


class OpenAIClient(AsyncClosing):
    """The probe's asks through the openai SDK (extra fields in ``extra_body``)."""

    name = "openai SDK"

    def __init__(self, base_url: str, model: str, api_key: str = "unused") -> None:
        import openai

        self.model = model
        self.sdk = openai.AsyncOpenAI(base_url=f"{base_url.rstrip('/')}/v1", api_key=api_key, max_retries=0)

    async def ask(self, ask: Ask) -> Answer:
        """Send one request through the openai SDK (see :class:`~unillm.probing.asking.ProbeClient`)."""
        import openai

        standard, extra, lora = split_options(ask)
        try:
            response = await self.sdk.chat.completions.create(
                model=lora or self.model,
                messages=list(ask.messages),  # type: ignore[arg-type]
                stream=ask.stream,
                extra_body=extra or None,
                **standard,
            )
        except openai.APIStatusError as e:
            raise Rejected(f"{type(e).__name__}: {e}") from None
        except (TypeError, ValueError) as e:  # refused by the SDK itself
            raise Refused(f"{type(e).__name__}: {e}") from None
        return await _streamed(response) if ask.stream else answer_of(response)

    async def loras(self) -> list[str]:
        """The served models that name a parent (vLLM's LoRA cards)."""
        return await _loras(self.sdk)

    async def aclose(self) -> None:
        """Close the SDK's connections."""
        await self.sdk.close()


class LiteLLMClient(AsyncClosing):
    """The probe's asks through one of LiteLLM's providers (extra fields as keywords):
    ``hosted_vllm`` by default, ``openai`` for another OpenAI-compatible server, ``ollama_chat``
    for Ollama's native API (no ``/v1``: LiteLLM talks to ``/api/chat`` itself)."""

    name = "LiteLLM hosted_vllm/"

    def __init__(
        self, base_url: str, model: str, api_key: str = "unused", provider: str = "hosted_vllm"
    ) -> None:
        import openai

        native = provider.startswith("ollama")
        self.base = base_url.rstrip("/") + ("" if native else "/v1")
        self.model, self.key, self.provider, self.native = model, api_key, provider, native
        self.name = f"LiteLLM {provider}/"
        self.listing = openai.AsyncOpenAI(base_url=self.base, api_key=api_key, max_retries=0)

    async def ask(self, ask: Ask) -> Answer:
        """Send one request through LiteLLM (see :class:`~unillm.probing.asking.ProbeClient`)."""
        import os

        os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no network fetch at import
        import litellm
        import openai

        litellm.telemetry = False
        standard, extra, lora = split_options(ask)
        try:
            response = await litellm.acompletion(
                model=f"{self.provider}/{lora or self.model}",
                api_base=self.base,
                api_key=self.key,
                messages=list(ask.messages),
                stream=ask.stream,
                num_retries=0,
                **standard,
                **extra,
            )
        except litellm.exceptions.UnsupportedParamsError as e:
            raise Refused(f"UnsupportedParamsError: {str(e)[:200]}") from None
        except openai.APIError as e:  # LiteLLM's errors (400, 500, ...) are the openai SDK's
            raise Rejected(f"{type(e).__name__}: {str(e)[:200]}") from None
        return await _streamed(response) if ask.stream else answer_of(response)

    async def loras(self) -> list[str]:
        """The served models that name a parent (vLLM's LoRA cards; none on Ollama's native API)."""
        return [] if self.native else await _loras(self.listing)

    async def aclose(self) -> None:
        """Close the model listing's connections and the clients LiteLLM cached for this loop.

        LiteLLM keeps its provider clients in a process-wide cache; left there, one is collected
        later and tries to close its connections on a loop that has ended.
        """
        import litellm
        from litellm.llms.custom_httpx.async_client_cleanup import close_litellm_async_clients

        await self.listing.close()
        await close_litellm_async_clients()  # type: ignore[no-untyped-call]
        litellm.in_memory_llm_clients_cache.flush_cache()  # type: ignore[no-untyped-call]


async def _loras(sdk: Any) -> list[str]:
    import openai

    try:
        page = await sdk.models.list()
    except openai.NotFoundError:  # a server with no model listing (TGI) names no adapter there
        return []
    return [m.id for m in page.data if _extra(m).get("parent")]


def _extra(model: Any) -> Mapping[str, Any]:
    return dict(getattr(model, "model_extra", None) or {})
