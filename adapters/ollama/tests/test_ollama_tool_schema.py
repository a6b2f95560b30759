"""Tool parameter schemas on Ollama: only what ToolFunctionParameters / ToolProperty keep is sent
(api/types.go at fb30760), exact rewrites keep the meaning (``$ref`` inlined, ``const`` as a
one-value ``enum``, annotations left out), and a keyword Ollama would drop is refused before
sending, naming the tool, the parameter and the keyword. The contract check (``check_request``)
fails on any key Go would drop, so a schema that loses meaning cannot pass unseen."""

from __future__ import annotations

from typing import Any, Literal

import pytest
from ollama_types import DroppedKeys, check_request
from pydantic import BaseModel, Field
from unillm_ollama import OllamaAdapter

from unillm.adapter.base import EngineInfo
from unillm.errors import UnsupportedFeature
from unillm.options import make_request

ADAPTER = OllamaAdapter()
INFO = EngineInfo(engine="ollama", model="llama3.2:1b", version="0.32.15")
CHAT = [{"role": "user", "content": "Send it"}]


class Address(BaseModel):
    """Where to send it."""

    street: str
    city: str = "Paris"


class Send(BaseModel):
    """Send a parcel."""

    to: Address
    speed: Literal["fast"]
    note: str | None = None


def sent_tools(*tools: Any) -> list[dict[str, Any]]:
    request = make_request(None, CHAT, None, {"tools": list(tools), "tool_choice": "auto"}, stream=False)
    call = ADAPTER.build(request, INFO)
    check_request(call.path, call.json)  # Ollama would keep every key
    assert call.json is not None
    return list(call.json["tools"])


def test_a_nested_pydantic_argument_reaches_ollama_whole() -> None:
    parameters = sent_tools(Send)[0]["function"]["parameters"]
    assert parameters["properties"]["to"] == {
        "type": "object",
        "description": "Where to send it.",
        "properties": {"street": {"type": "string"}, "city": {"type": "string"}},
        "required": ["street"],
    }
    assert parameters["properties"]["speed"] == {"type": "string", "enum": ["fast"]}
    assert "$defs" not in parameters


def test_the_old_schema_would_have_been_dropped_by_ollama() -> None:
    from unillm.tools import to_tools

    body = {"model": "m", "messages": CHAT, "tools": [to_tools([Send])[0].to_openai()]}
    with pytest.raises(DroppedKeys, match=r"\$ref"):
        check_request("/api/chat", body)


class Bounded(BaseModel):
    count: int = Field(ge=1)


class Patterned(BaseModel):
    code: str = Field(pattern=r"^[A-Z]{3}$")


@pytest.mark.parametrize(
    ("tool", "parameter", "keyword"),
    [(Bounded, "count", "minimum"), (Patterned, "code", "pattern")],
    ids=["minimum", "pattern"],
)
def test_a_keyword_ollama_would_drop_is_refused_before_sending(
    tool: Any, parameter: str, keyword: str
) -> None:
    with pytest.raises(UnsupportedFeature, match=keyword) as e:
        sent_tools(tool)
    assert e.value.engine == "ollama" and tool.__name__ in e.value.feature and parameter in e.value.feature
    assert e.value.alternative


def test_a_recursive_reference_is_refused() -> None:
    schema = {
        "type": "object",
        "$defs": {"Node": {"type": "object", "properties": {"next": {"$ref": "#/$defs/Node"}}}},
        "properties": {"head": {"$ref": "#/$defs/Node"}},
    }
    tool = {"type": "function", "function": {"name": "walk", "parameters": schema}}
    with pytest.raises(UnsupportedFeature, match=r"\$ref"):
        sent_tools(tool)


def test_a_schema_ollama_keeps_is_sent_as_given() -> None:
    schema = {
        "type": "object",
        "properties": {
            "unit": {"type": ["string", "null"], "enum": ["C", "F", None], "description": "unit"},
            "days": {"type": "array", "items": {"type": "integer", "minimum": 1}},
        },
        "required": ["unit"],
    }
    tool = {"type": "function", "function": {"name": "forecast", "parameters": schema}}
    assert sent_tools(tool)[0]["function"]["parameters"] == schema  # items are kept whole
