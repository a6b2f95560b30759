"""Prompts as token ids (chat messages through the model's chat template), and the context length."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from unillm_mlx.inprocess.parsing import RequestError

__all__ = ["model_context", "prompt_ids", "template_messages"]


def prompt_ids(tokenizer: Any, body: dict[str, Any], *, chat: bool) -> list[int]:
    """The prompt's token ids: chat messages through the chat template, or the prompt text.

    Raises:
        RequestError: The chat template refused the messages.
    """
    if chat:
        try:
            return list(
                tokenizer.apply_chat_template(
                    template_messages(body["messages"]),
                    tools=body.get("tools") or None,
                    add_generation_prompt=True,
                    **(body.get("chat_template_kwargs") or {}),  # e.g. enable_thinking
                )
            )
        except Exception as e:
            raise RequestError(400, f"cannot apply the chat template: {e}") from None
    text = body["prompt"]
    bos = tokenizer.bos_token
    return list(tokenizer.encode(text, add_special_tokens=bos is None or not text.startswith(bos)))


def template_messages(messages: list[Any]) -> list[Any]:
    """Messages as chat templates expect them: tool-call arguments as objects, text content."""
    out = []
    for m in messages:
        m = dict(m)
        if m.get("content") is None:
            m["content"] = ""
        if m.get("tool_calls"):
            m["tool_calls"] = [
                {**c, "function": {**c["function"], "arguments": _loads(c["function"].get("arguments"))}}
                for c in m["tool_calls"]
            ]
        out.append(m)
    return out


def _loads(arguments: Any) -> Any:
    try:
        return json.loads(arguments) if isinstance(arguments, str) else arguments
    except json.JSONDecodeError:
        return arguments


def model_context(model: str) -> int | None:
    """The context length a local model folder declares (vLLM's default ``max_model_len`` too)."""
    try:
        config = json.loads((Path(model).expanduser() / "config.json").read_text())
    except (OSError, ValueError):
        return None
    value = config.get("max_position_embeddings") if isinstance(config, dict) else None
    return value if isinstance(value, int) and value > 0 else None
