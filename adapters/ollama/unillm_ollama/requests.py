"""Unified requests as Ollama's native request bodies (``/api/generate``, ``/api/chat``, ``/api/embed``).

Field names and shapes follow Ollama's ``api/types.go`` (GenerateRequest, ChatRequest, Message,
Options, EmbedRequest): sampling options go under ``options`` with Ollama's names
(``num_predict``, ``repeat_penalty``), a JSON schema is ``format``, images are base64 strings on
the message, a prompt is sent ``raw`` so it is continued as is (no chat template), ``thinking=``
and ``reasoning_effort=`` are ``think`` (ThinkValue: a bool or a level), and a tool's parameters
carry only what Ollama's tool types keep (``tool_schema``).

    call = build_call(request, "llama3.2:1b")   # HttpCall("POST", "/api/chat", {...}, stream=True)
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from unillm.adapter import (
    HttpCall,
    InvalidRequest,
    JsonSchema,
    Request,
    Tool,
    UnsupportedFeature,
    forced_call_schema,
)
from unillm_ollama.tool_schema import ollama_parameters

ENGINE = "ollama"
GENERATE, CHAT, EMBED = "/api/generate", "/api/chat", "/api/embed"
# unillm's option -> the name in Ollama's Options (api/types.go)
OPTIONS = {
    "max_tokens": "num_predict",
    "temperature": "temperature",
    "top_p": "top_p",
    "top_k": "top_k",
    "min_p": "min_p",
    "seed": "seed",
    "presence_penalty": "presence_penalty",
    "frequency_penalty": "frequency_penalty",
    "repetition_penalty": "repeat_penalty",
}
#: routes.go answers 400 to more alternatives per token than this.
TOP_LOGPROBS_MAX = 20
#: unillm's reasoning_effort -> Ollama's think value (ThinkValue: "low", "medium", "high", "max").
THINK_LEVELS: dict[str, str | bool] = {"none": False, "low": "low", "medium": "medium", "high": "high"}


def route(request: Request) -> str:
    """The endpoint that answers ``request``: chat messages to /api/chat, a prompt to /api/generate."""
    return CHAT if request.messages is not None else GENERATE


def build_call(request: Request, model: str) -> HttpCall:
    """The native call for ``request`` (capabilities are already checked by the core)."""
    path = route(request)
    body: dict[str, Any] = {"model": request.lora or model, "stream": request.stream}
    if path == CHAT:
        body["messages"] = [message(m) for m in request.messages or ()]
    else:  # the core refuses tools with a prompt (tools need chat messages)
        body["prompt"] = request.prompt
        body["raw"] = True  # a completion: no chat template around the prompt
    options = {
        name: getattr(request, key) for key, name in OPTIONS.items() if getattr(request, key) is not None
    }
    if request.stop is not None:
        options["stop"] = list(request.stop)
    if options:
        body["options"] = options
    forced = forced_choice(request)
    if request.tools and request.tool_choice is not None and request.tool_choice.mode != "none":
        body["tools"] = [tool(t) for t in request.tools]
    if forced is not None:  # Ollama cannot force a call: the call's schema is the output format
        assert request.tools is not None
        body["format"] = forced_call_schema(request.tools, forced)
        body.pop("tools", None)
    elif isinstance(request.output, JsonSchema):
        body["format"] = dict(request.output.schema)
    if request.logprobs:
        body["logprobs"] = True
        if request.top_logprobs:
            body["top_logprobs"] = top_logprobs(request.top_logprobs)
    body.update(think(request))
    for key, value in (request.extra_body or {}).items():  # e.g. think, keep_alive
        body[key] = value
    return HttpCall("POST", path, body, stream=request.stream)


def top_logprobs(count: int) -> int:
    """``count`` alternatives per token, refused above Ollama's 20 before sending."""
    if count > TOP_LOGPROBS_MAX:
        raise UnsupportedFeature(
            ENGINE,
            f"top_logprobs={count}",
            why=f"Ollama returns at most {TOP_LOGPROBS_MAX} alternatives per token (its server answers "
            "400 above)",
            alternative=f"Ask for top_logprobs={TOP_LOGPROBS_MAX} or fewer",
        )
    return count


def think(request: Request) -> dict[str, Any]:
    """The ``think`` field for the thinking options (none set: no field, the model's default).

    Raises:
        UnsupportedFeature: ``thinking_budget``, or an effort Ollama has no level for.
        InvalidRequest: ``thinking=False`` with an effort that thinks.
    """
    if request.thinking_budget is not None:
        raise UnsupportedFeature(
            ENGINE,
            "thinking_budget",
            why="Ollama's think field takes on/off or a level; it has no thinking token budget",
            alternative="Use reasoning_effort='low' for shorter thinking, or max_tokens to cap the whole "
            "answer; vLLM reads thinking_budget",
        )
    effort = request.reasoning_effort
    if effort is not None and effort not in THINK_LEVELS:
        raise UnsupportedFeature(
            ENGINE,
            f"reasoning_effort={effort!r}",
            why="Ollama's think levels are low, medium and high",
            alternative="Use reasoning_effort='low', or thinking=False",
        )
    level = THINK_LEVELS[effort] if effort is not None else None
    if level is not None and request.thinking is not None and bool(level) != request.thinking:
        raise InvalidRequest(
            f"ollama: thinking={request.thinking} and reasoning_effort={effort!r} contradict each "
            "other (both are Ollama's think field); set one of them",
            engine=ENGINE,
        )
    value = level if level is not None else request.thinking
    return {} if value is None else {"think": value}


def tool(t: Tool) -> dict[str, Any]:
    """One tool as Ollama's Tool, its parameters as ToolFunctionParameters keeps them."""
    function: dict[str, Any] = {"name": t.name, "parameters": ollama_parameters(t.name, t.parameters)}
    if t.description:
        function["description"] = t.description
    return {"type": "function", "function": function}


def forced_choice(request: Request) -> Any:
    """The forced tool choice (``required`` or a name) sent as a JSON-schema format; None: none."""
    choice = request.tool_choice
    return choice if request.tools and choice is not None and choice.forces_call else None


def message(m: Mapping[str, Any]) -> dict[str, Any]:
    """One unified (OpenAI-layout) chat message as Ollama's Message."""
    out: dict[str, Any] = {"role": m["role"], "content": ""}
    content = m.get("content")
    if isinstance(content, str):
        out["content"] = content
    elif isinstance(content, list):
        texts, images = [], []
        for part in content:
            kind = part.get("type") if isinstance(part, Mapping) else None
            if kind == "text":
                texts.append(str(part.get("text") or ""))
            elif kind == "image_url":
                images.append(_inline_image(part))
            else:
                raise InvalidRequest(
                    f"ollama: a message part of type {kind!r} cannot be sent; use text and image_url parts",
                    engine=ENGINE,
                )
        out["content"] = "".join(texts)
        if images:
            out["images"] = images
    calls = m.get("tool_calls")
    if calls:
        out["tool_calls"] = [_tool_call(c) for c in calls]
    if isinstance(m.get("thinking"), str):  # an earlier thought (replay_reasoning="field")
        out["thinking"] = m["thinking"]
    if m["role"] == "tool":
        if m.get("name"):
            out["tool_name"] = m["name"]
        if m.get("tool_call_id"):
            out["tool_call_id"] = m["tool_call_id"]
    return out


def _inline_image(part: Mapping[str, Any]) -> str:
    image = part.get("image_url")
    url = str(image.get("url") if isinstance(image, Mapping) else image or "")
    head, sep, data = url.partition(",")
    if not (url.startswith("data:") and sep and head.endswith(";base64")):
        raise UnsupportedFeature(
            ENGINE,
            "images by URL",
            why="Ollama takes images inline, as base64 data, not as URLs it would fetch",
            alternative="Pass the image as a data URL (data:image/png;base64,...)",
        )
    return data


def _tool_call(call: Mapping[str, Any]) -> dict[str, Any]:
    function = call.get("function") or {}
    arguments = function.get("arguments")
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except ValueError:
            raise InvalidRequest(
                f"ollama: the arguments of tool call {function.get('name')!r} are not JSON; Ollama "
                "takes them as an object",
                engine=ENGINE,
            ) from None
    out: dict[str, Any] = {"function": {"name": function.get("name", ""), "arguments": arguments or {}}}
    if call.get("id"):
        out["id"] = call["id"]
    return out


def embed_body(texts: list[str], model: str, dimensions: int | None) -> dict[str, Any]:
    """Ollama's EmbedRequest for one batch."""
    body: dict[str, Any] = {"model": model, "input": texts}
    if dimensions is not None:
        body["dimensions"] = dimensions
    return body
