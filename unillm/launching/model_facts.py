"""What a local model folder says about itself: its tool-call and thinking formats, whether it reads images.

    detect_tool_parser("/models/qwen2.5-7b-instruct")   # "hermes" (its template emits <tool_call>)
    detect_reasoning_parser("/models/qwen3-0.6b")        # "qwen3" (its template writes <think>)
    takes_images("/models/tiny")                          # False: a text-only architecture

Only reliable signals are used; anything unclear answers None (unknown), never a guess.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

__all__ = ["chat_template", "detect_reasoning_parser", "detect_tool_parser", "takes_images"]

# Markers a chat template writes around tool calls -> the parser (vLLM's names) that reads them.
_TEMPLATE_MARKERS = (
    ("<tool_call>", "hermes"),
    ("[TOOL_CALLS]", "mistral"),
    ("<|python_tag|>", "llama3_json"),
)
# Thinking markers a chat template writes -> the reasoning parser that reads them (checked in
# order: DeepSeek-R1 templates open the thought in the prompt, which its own parser expects).
_THINKING_MARKERS = (
    (("<\uff5cAssistant\uff5c>", "<think>"), "deepseek_r1"),
    (("<think>",), "qwen3"),
    (("[THINK]",), "mistral"),
    (("<seed:think>",), "seed_oss"),
)
_PROCESSOR_FILES = ("preprocessor_config.json", "processor_config.json")
_VISION_MARKERS = ("vision", "visual", "image", "img", "mm_")


def _json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def chat_template(model: str | Path) -> str | None:
    """The chat template of a local model folder (tokenizer_config.json or chat_template.jinja)."""
    folder = Path(model).expanduser()
    if not folder.is_dir():
        return None
    try:
        return (folder / "chat_template.jinja").read_text()
    except OSError:
        pass
    template = (_json(folder / "tokenizer_config.json") or {}).get("chat_template")
    if isinstance(template, list):  # named templates: [{"name": "default", "template": ...}, ...]
        template = "\n".join(t.get("template", "") for t in template if isinstance(t, dict))
    return template if isinstance(template, str) else None


def detect_tool_parser(model: str | Path) -> str | None:
    """The tool parser for a local model whose chat template writes tool calls in a known format."""
    template = chat_template(model)
    if not template or "tool" not in template:
        return None
    return next((parser for marker, parser in _TEMPLATE_MARKERS if marker in template), None)


def detect_reasoning_parser(model: str | Path) -> str | None:
    """The reasoning parser (vLLM's spelling) for a local model whose chat template writes
    thinking markers: ``qwen3`` for ``<think>``, ``deepseek_r1`` for DeepSeek-R1's template."""
    template = chat_template(model)
    if not template:
        return None
    return next((p for markers, p in _THINKING_MARKERS if all(m in template for m in markers)), None)


def takes_images(model: str | Path) -> bool | None:
    """True for a vision-language model folder, False for a plainly text-only one, None when unknown.

    Conservative: any image processor file or any config key about vision or images counts as
    a vision model; only a causal-LM architecture with none of those is text-only.
    """
    folder = Path(model).expanduser()
    config = _json(folder / "config.json") if folder.is_dir() else None
    if config is None:
        return None
    if any((folder / name).is_file() for name in _PROCESSOR_FILES):
        return True
    if any(marker in key.lower() for key in config for marker in _VISION_MARKERS):
        return True
    architectures = config.get("architectures") or []
    if architectures and all(isinstance(a, str) and a.endswith("ForCausalLM") for a in architectures):
        return False
    return None
