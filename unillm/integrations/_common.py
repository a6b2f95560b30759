"""What the framework models share: finish reasons, OpenAI-style tool definitions and the refusal of
an option no unillm engine takes."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from unillm.errors import UnsupportedFeature

#: unillm's (OpenAI's) finish reasons as pydantic-ai and LangChain spell them.
FINISH_REASONS: Mapping[str, str] = {
    "stop": "stop",
    "length": "length",
    "tool_calls": "tool_call",
    "content_filter": "content_filter",
}

#: The settings the frameworks and unillm both name as OpenAI's API does: each maps to itself.
OPENAI_NAMED_SETTINGS = (
    "temperature",
    "top_p",
    "frequency_penalty",
    "presence_penalty",
    "max_tokens",
    "extra_body",
    "timeout",
)


def function_tool(name: str, description: str | None, parameters: Mapping[str, Any]) -> dict[str, Any]:
    """An OpenAI ``{"type": "function", ...}`` definition, the form ``tools=[...]`` takes.

    Args:
        name: The tool's name.
        description: What it does, for the model (None or "": none).
        parameters: The JSON schema of its arguments.
    """
    function: dict[str, Any] = {"name": name, "parameters": dict(parameters)}
    if description:
        function["description"] = description
    return {"type": "function", "function": function}


def refuse(engine: str, framework: str, options: Iterable[str], alternative: str = "") -> None:
    """Raise UnsupportedFeature for the framework options that are set and that unillm cannot honour.

    Args:
        engine: The client's engine, named in the error.
        framework: The framework, as it names its settings ("pydantic-ai ModelSettings").
        options: The options that were set.
        alternative: What to do instead.

    Raises:
        UnsupportedFeature: When ``options`` is not empty; nothing was sent.
    """
    names = sorted(options)
    if names:
        raise UnsupportedFeature(
            engine,
            f"{framework} {', '.join(names)}",
            why="unillm has no such option on any engine",
            alternative=alternative or "leave it unset",
        )
