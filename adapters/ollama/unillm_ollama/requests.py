"""Unified requests as Ollama's native request bodies (``/api/generate``, ``/api/chat``, ``/api/embed``).

Field names and shapes follow Ollama's ``api/types.go`` (GenerateRequest, ChatRequest, Message,
Options, EmbedRequest): sampling options go under ``options`` with Ollama's names
(``num_predict``, ``repeat_penalty``), a JSON schema is ``format``, images are base64 strings on
the message, and a prompt is sent ``raw`` so it is continued as is (no chat template).

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
    UnsupportedFeature,
    forced_call_schema,
)

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
        body["tools"] = [t.to_openai() for t in request.tools]
    if forced is not None:  # Ollama cannot force a call: the call's schema is the output format
        assert request.tools is not None
        body["format"] = forced_call_schema(request.tools, forced)
        body.pop("tools", None)
    elif isinstance(request.output, JsonSchema):
        body["format"] = dict(request.output.schema)
    if request.logprobs:
        body["logprobs"] = True
        if request.top_logprobs:
            body["top_logprobs"] = request.top_logprobs
    for key, value in (request.extra_body or {}).items():  # e.g. think, keep_alive
        body[key] = value
    return HttpCall("POST", path, body, stream=request.stream)


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
