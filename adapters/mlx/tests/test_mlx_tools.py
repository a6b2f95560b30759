"""Tool calls on MLX: forced (named / required) in-process through unillm's grammar engine, and
the typed refusals of what each mode cannot do. Runs real mlx-lm in this process."""

from __future__ import annotations

from typing import Any, Literal

import pytest
from pydantic import BaseModel

import unillm
from unillm.testing.streams import forced_call_streams_alike

pytestmark = pytest.mark.anyio
ASK = [{"role": "user", "content": "What is the weather in Rome?"}]


class GetWeather(BaseModel):
    """Current weather in a city."""

    city: Literal["Paris", "Rome", "Oslo"]
    unit: Literal["C", "F"]


def add(a: Literal[1, 2, 3], b: Literal[1, 2, 3]) -> int:
    """Add two small numbers."""
    return a + b


async def test_mlx_inproc_named_and_required_tool_calls_are_valid_and_stream_alike(
    inproc_settings: dict[str, Any],
) -> None:
    async with unillm.launch("mlx", **inproc_settings) as llm:
        named = await llm.generate(
            messages=ASK, tools=[GetWeather, add], tool_choice=GetWeather, max_tokens=40, temperature=0
        )
        (call,) = named.tool_calls
        assert isinstance(call.parsed, GetWeather) and named.finish_reason == "tool_calls"
        required = await forced_call_streams_alike(
            llm, messages=ASK, tools=[GetWeather, add], tool_choice="required", max_tokens=48, temperature=0
        )
        (call,) = required.tool_calls
        assert call.name in ("GetWeather", "add"), call
        # the call and its result continue the conversation through the chat template
        messages = [*ASK, required.message(), {"role": "tool", "tool_call_id": call.id, "content": "ok"}]
        answer = await llm.generate(messages=messages, max_tokens=4, temperature=0)
        assert answer.usage.prompt_tokens > required.usage.prompt_tokens


async def test_mlx_inproc_refuses_auto_tools_and_images_before_sending(
    inproc_settings: dict[str, Any],
) -> None:
    async with unillm.launch("mlx", **inproc_settings) as llm:
        with pytest.raises(unillm.UnsupportedFeature, match="free text"):
            await llm.generate(messages=ASK, tools=[add], max_tokens=4)
        image = unillm.Image(bytes.fromhex("89504e470d0a1a0a"))
        with pytest.raises(unillm.UnsupportedFeature, match="image"):
            await llm.generate(messages=[{"role": "user", "content": ["Look", image]}], max_tokens=4)


def test_mlx_server_refuses_forced_tool_choices_it_would_ignore(mlx_adapter: Any) -> None:
    caps = mlx_adapter.capabilities(None)
    assert caps.supports(unillm.Feature.TOOL_CHOICE_AUTO)
    for feature in (unillm.Feature.TOOL_CHOICE_REQUIRED, unillm.Feature.TOOL_CHOICE_NAMED):
        with pytest.raises(unillm.UnsupportedFeature, match="ignores tool_choice"):
            caps.require(feature)
