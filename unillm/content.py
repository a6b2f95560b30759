"""Chat messages as every engine accepts them: text, images, assistant tool calls, tool results.

    messages = [{"role": "user", "content": ["What is in this picture?",
                                             unillm.Image("cat.png")]}]       # or a URL, bytes, PIL image
    messages += [r.message(), {"role": "tool", "tool_call_id": call.id, "content": "18 C"}]

Content may be a string or a list of parts: strings, ``unillm.Image``, PIL images, and
OpenAI-style ``{"type": "text", ...}`` / ``{"type": "image_url", ...}`` dicts. Parts are
normalized once into OpenAI's shape (local files, bytes and PIL images become ``data:`` URLs);
a list of text parts only becomes one string, joined with newlines (as vLLM joins them).
"""

from __future__ import annotations

import base64
import io
import json
import mimetypes
from collections.abc import Callable, Mapping, Sequence
from os import PathLike
from pathlib import Path
from typing import Any

from unillm.errors import InvalidOptions

__all__ = ["Image", "content_text", "has_images", "normalize_messages", "text_of"]

_SNIFF = (
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF8", "image/gif"),
    (b"BM", "image/bmp"),
)


class Image:
    """An image for a message part: a URL (http, https or data), a local path, bytes, or a PIL image.

        {"role": "user", "content": ["Describe it", unillm.Image("photo.jpg")]}

    Local files, bytes and PIL images are sent inline as ``data:`` URLs (base64); a URL is sent
    as is, for the engine to fetch. ``detail`` is passed through where an engine reads it.

    Args:
        source: A URL, a ``data:`` URI, a file path or the image's bytes (or a PIL image).
        detail: The detail hint sent with it ("low", "high", "auto"); None sends none.

    Raises:
        InvalidOptions: A source that is none of those, or a file that cannot be read.
    """

    __slots__ = ("detail", "url")

    def __init__(self, source: str | PathLike[str] | bytes | Any, *, detail: str | None = None) -> None:
        self.url = _to_url(source)
        self.detail = detail

    def __repr__(self) -> str:
        shown = self.url if len(self.url) < 80 else self.url[:60] + "..."
        return f"Image({shown!r})"

    def to_openai(self) -> dict[str, Any]:
        """The OpenAI ``image_url`` part."""
        image: dict[str, Any] = {"url": self.url}
        if self.detail:
            image["detail"] = self.detail
        return {"type": "image_url", "image_url": image}


def _to_url(source: Any) -> str:
    if isinstance(source, Image):
        return source.url
    if isinstance(source, (bytes, bytearray, memoryview)):
        data = bytes(source)
        mime = next((m for magic, m in _SNIFF if data.startswith(magic)), None)
        if mime is None and data[:4] == b"RIFF" and data[8:12] == b"WEBP":
            mime = "image/webp"
        if mime is None:
            raise InvalidOptions(
                "image bytes are not PNG, JPEG, GIF, WebP or BMP; pass a file path or a PIL image instead"
            )
        return f"data:{mime};base64,{base64.b64encode(data).decode()}"
    if _is_pil(source):
        buffer = io.BytesIO()
        source.save(buffer, format="PNG")
        return f"data:image/png;base64,{base64.b64encode(buffer.getvalue()).decode()}"
    if isinstance(source, str) and source.startswith(("http://", "https://", "data:")):
        return source
    if isinstance(source, (str, PathLike)):
        path = Path(source).expanduser()
        try:
            data = path.read_bytes()
        except OSError as e:
            raise InvalidOptions(
                f"cannot read image {str(source)!r}: {e.strerror or e}. Pass an "
                "http(s) or data: URL, a readable path, bytes or a PIL image"
            ) from None
        guessed = mimetypes.guess_type(path.name)[0]
        if guessed and guessed.startswith("image/"):
            return f"data:{guessed};base64,{base64.b64encode(data).decode()}"
        return _to_url(data)
    raise InvalidOptions(
        f"unillm.Image takes a URL, a path, bytes or a PIL image, not {type(source).__name__}"
    )


def _is_pil(value: Any) -> bool:
    """True for a PIL image, without importing Pillow (it may not be installed)."""
    return any(c.__module__.startswith("PIL.") and c.__name__ == "Image" for c in type(value).__mro__)


# -- messages -------------------------------------------------------------------------------------
def normalize_messages(messages: Any) -> tuple[dict[str, Any], ...]:
    """Validate chat messages and normalize their content parts and tool calls (OpenAI shape)."""
    if isinstance(messages, (str, bytes)) or not isinstance(messages, Sequence) or not messages:
        raise InvalidOptions('messages must be a non-empty list like [{"role": "user", "content": "hi"}]')
    return tuple(_message(i, m) for i, m in enumerate(messages))


MESSAGE_KEYS = ("role", "content", "tool_calls", "tool_call_id", "name", "reasoning", "reasoning_content")


def _reasoning(i: int, m: Mapping[str, Any]) -> str | None:
    """An assistant message's thought: ``reasoning`` (unillm's key, what ``r.message()`` writes)
    or ``reasoning_content`` (the OpenAI-compatible servers' older name), one thought at most."""
    given = {k: m[k] for k in ("reasoning", "reasoning_content") if m.get(k) is not None}
    if not given:
        return None
    if m["role"] != "assistant":
        raise InvalidOptions(f"messages[{i}]: only assistant messages carry reasoning")
    if any(not isinstance(v, str) for v in given.values()):
        raise InvalidOptions(f"messages[{i}]: reasoning must be a string (the model's thought)")
    if len(set(given.values())) > 1:
        raise InvalidOptions(
            f"messages[{i}] has two different thoughts in reasoning and reasoning_content: keep one"
        )
    return next(iter(given.values())) or None


def _message(i: int, m: Any) -> dict[str, Any]:
    if not isinstance(m, Mapping) or not isinstance(m.get("role"), str):
        raise InvalidOptions(f"messages[{i}] needs a string 'role' and a 'content', got {m!r}")
    unknown = [k for k in m if k not in MESSAGE_KEYS]
    if unknown:
        raise InvalidOptions(
            f"messages[{i}] has unknown key(s) {', '.join(map(repr, unknown))}: a message takes "
            f"{', '.join(MESSAGE_KEYS)} (engine-specific fields go in extra_body=)"
        )
    if m.get("name") is not None and not isinstance(m["name"], str):
        raise InvalidOptions(f"messages[{i}]: name must be a string, got {m['name']!r}")
    role = m["role"]
    out: dict[str, Any] = {"role": role}
    calls = m.get("tool_calls")
    if calls:
        if role != "assistant":
            raise InvalidOptions(f"messages[{i}]: only assistant messages carry tool_calls")
        out["tool_calls"] = [_call(i, c) for c in calls]
    content = m.get("content")
    if content is None and calls:
        out["content"] = None
    elif isinstance(content, str):
        out["content"] = content
    elif isinstance(content, Sequence) and not isinstance(content, (bytes, bytearray)) and content:
        out["content"] = _parts(i, content)
    else:
        raise InvalidOptions(
            f"messages[{i}]: content must be a string or a list of parts (strings, unillm.Image, "
            f'{{"type": "text", "text": ...}}, {{"type": "image_url", "image_url": {{"url": ...}}}}), '
            f"got {content!r}"
        )
    if role == "tool":
        call_id = m.get("tool_call_id")
        if not isinstance(call_id, str) or not call_id:
            raise InvalidOptions(
                f"messages[{i}]: a tool result needs the tool_call_id of the call it answers (call.id)"
            )
        out["tool_call_id"] = call_id
        if not isinstance(out["content"], str):
            out["content"] = _result_text(out["content"])
    if isinstance(m.get("name"), str):
        out["name"] = m["name"]
    if (thought := _reasoning(i, m)) is not None:
        out["reasoning"] = thought
    return out


def _call(i: int, call: Any) -> dict[str, Any]:
    to_openai = getattr(call, "to_openai", None)
    if callable(to_openai):
        call = to_openai()
    function = call.get("function") if isinstance(call, Mapping) else None
    if not isinstance(function, Mapping) or not isinstance(function.get("name"), str):
        raise InvalidOptions(
            f"messages[{i}]: a tool call needs {{'id', 'type': 'function', "
            f"'function': {{'name', 'arguments'}}}} (or a unillm ToolCall), got {call!r}"
        )
    arguments = function.get("arguments", "{}")
    if not isinstance(arguments, str):
        arguments = json.dumps(arguments)
    call_id = call.get("id")
    if not isinstance(call_id, str) or not call_id:
        raise InvalidOptions(f"messages[{i}]: a tool call needs its 'id' (tool results refer to it)")
    return {"id": call_id, "type": "function", "function": {"name": function["name"], "arguments": arguments}}


def _parts(i: int, content: Sequence[Any]) -> str | list[dict[str, Any]]:
    parts: list[dict[str, Any]] = []
    for part in content:
        if isinstance(part, str):
            parts.append({"type": "text", "text": part})
        elif isinstance(part, Image):
            parts.append(part.to_openai())
        elif _is_pil(part):
            parts.append(Image(part).to_openai())
        elif isinstance(part, Mapping) and part.get("type") == "text" and isinstance(part.get("text"), str):
            parts.append({"type": "text", "text": part["text"]})
        elif isinstance(part, Mapping) and part.get("type") == "image_url":
            image = part.get("image_url")
            url = image.get("url") if isinstance(image, Mapping) else image
            if not isinstance(url, str):
                raise InvalidOptions(f"messages[{i}]: an image_url part needs {{'url': ...}}, got {part!r}")
            detail = image.get("detail") if isinstance(image, Mapping) else None
            parts.append(Image(url, detail=detail).to_openai())
        elif isinstance(part, Mapping) and part.get("type") == "image" and "image" in part:
            parts.append(Image(part["image"]).to_openai())
        else:
            raise InvalidOptions(
                f"messages[{i}]: unknown content part {part!r}; use strings, unillm.Image(...), "
                '{"type": "text", "text": ...} or {"type": "image_url", "image_url": {"url": ...}}'
            )
    if all(p["type"] == "text" for p in parts):
        return "\n".join(p["text"] for p in parts)
    return parts


def _result_text(content: Any) -> str:
    if isinstance(content, list):
        raise InvalidOptions("a tool result's content must be text (images cannot be tool results)")
    return str(content)


def has_images(messages: Sequence[Mapping[str, Any]] | None) -> bool:
    """True when any message has an image part."""
    return any(
        isinstance(m.get("content"), list) and any(p.get("type") == "image_url" for p in m["content"])
        for m in messages or ()
    )


def content_text(content: Any, image: Callable[[Mapping[str, Any]], str] | None = None) -> str:
    """A message's ``content`` as text: a string as it is, content parts' texts joined by newlines.

    Args:
        content: A message's content: a string, or a list of parts.
        image: Writes a non-text part (an image) as text; None: such parts are left out.

    Returns:
        The text ("" for no content).
    """
    if isinstance(content, str):
        return content
    if not isinstance(content, (list, tuple)):
        return ""
    out = []
    for part in content:
        if isinstance(part, str):
            out.append(part)
        elif isinstance(part, Mapping):
            if isinstance(part.get("text"), str):
                out.append(part["text"])
            elif image is not None:
                out.append(image(part))
    return "\n".join(out)


def text_of(message: Mapping[str, Any]) -> str:
    """A message's text (its text parts joined, images left out; tool calls as their JSON).

    Args:
        message: A chat message whose ``content`` is a string or a list of parts.

    Returns:
        The message's text parts joined; images are left out.
    """
    calls = message.get("tool_calls")
    return content_text(message.get("content")) + (json.dumps(calls) if calls else "")
