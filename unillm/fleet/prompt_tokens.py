"""A request's prompt as the engine tokenizes it, on the client: what KV-cache events are matched on.

    tokens = PromptTokens.from_folder("/models/llama", template)   # tokenizer.json beside the weights
    tokens(request)            # [128000, 9906, ...], or None when it cannot be known here

As vLLM does: a completion prompt is encoded with the tokenizer's special tokens (BOS); chat
messages are rendered through the model's chat template with the generation prompt, in a sandbox
set up as Hugging Face ``transformers`` sets it up, then encoded without special tokens (the
template writes them). Requests whose prompt depends on more than text (tools, images) give None:
the ``cache_aware`` policy then uses its prefix tree for them. Only the text's first ``max_chars``
characters are encoded (64 Ki by default: routing compares heads, and tokenizing a long context on
every request would stall the event loop). Needs ``tokenizers`` and ``jinja2``
(``pip install 'unillm-sdk[kv-events]'``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from unillm.errors import InvalidOptions
from unillm.options import Request

if TYPE_CHECKING:
    import jinja2
    from tokenizers import Tokenizer

_SPECIAL = ("bos_token", "eos_token", "unk_token", "pad_token")


def _special_tokens(config: Mapping[str, Any]) -> dict[str, str]:
    """The special tokens a template may name, from tokenizer_config.json (strings or added tokens)."""
    out = {}
    for name in _SPECIAL:
        value = config.get(name)
        value = value.get("content") if isinstance(value, Mapping) else value
        if isinstance(value, str):
            out[name] = value
    return out


def _template(source: str) -> jinja2.Template:
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message: str) -> None:
        raise ValueError(message)

    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"]
    )
    env.filters["tojson"] = lambda value, indent=None, **_: json.dumps(
        value, ensure_ascii=False, indent=indent
    )
    env.globals["raise_exception"] = raise_exception
    return env.from_string(source)


def _text_only(messages: tuple[dict[str, Any], ...]) -> list[dict[str, Any]] | None:
    """The messages with every content a string (text parts joined by newlines, as vLLM joins
    them for a string-content template), or None when a part is not text."""
    out = []
    for m in messages:
        content = m.get("content")
        if isinstance(content, list):
            if not all(isinstance(p, Mapping) and p.get("type") == "text" for p in content):
                return None
            content = "\n".join(str(p.get("text", "")) for p in content)
        out.append({**m, "content": content})
    return out


class PromptTokens:
    """Turns requests into the token ids the engine will see (see the module docstring).

    Args:
        tokenizer: The model's ``tokenizers.Tokenizer``.
        template: The model's chat template (None: chat requests give None).
        special_tokens: ``bos_token`` and the like, as the template names them.
        max_chars: How much of the prompt's text is encoded (its head; the last token may be cut).
    """

    def __init__(
        self,
        tokenizer: Tokenizer,
        template: str | None,
        special_tokens: Mapping[str, str],
        max_chars: int = 65536,
    ) -> None:
        self._tokenizer = tokenizer
        self._template = _template(template) if template else None
        self._special = dict(special_tokens)
        self.max_chars = max_chars

    @classmethod
    def from_folder(cls, folder: str | Path, template: str | None) -> PromptTokens:
        """The tokenizer of a local model folder (``tokenizer.json``, ``tokenizer_config.json``).

        Args:
            folder: The model's folder.
            template: Its chat template (:func:`unillm.launching.model_facts.chat_template`).

        Raises:
            InvalidOptions: No ``tokenizer.json`` there, or ``tokenizers``/``jinja2`` missing.
        """
        try:
            import jinja2  # noqa: F401
            from tokenizers import Tokenizer
        except ImportError:
            raise InvalidOptions(
                "matching KV-cache events needs tokenizers and jinja2: pip install 'unillm-sdk[kv-events]'"
            ) from None
        path = Path(folder).expanduser()
        if not (path / "tokenizer.json").is_file():
            raise InvalidOptions(f"no tokenizer.json in {path}: KV-cache events cannot be matched to prompts")
        try:
            config = json.loads((path / "tokenizer_config.json").read_text())
        except (OSError, ValueError):
            config = {}
        special = _special_tokens(config if isinstance(config, dict) else {})
        try:
            return cls(Tokenizer.from_file(str(path / "tokenizer.json")), template, special)
        except Exception as e:  # a tokenizer file or chat template these libraries cannot read
            raise InvalidOptions(
                f"cannot read {path}'s tokenizer or chat template ({type(e).__name__}: {str(e)[:200]}): "
                "KV-cache events cannot be matched to prompts"
            ) from None

    def __call__(self, request: Request) -> list[int] | None:
        """The prompt's token ids, or None when they cannot be known here.

        Args:
            request: A generation request (a prompt, or messages without tools or images).
        """
        try:
            if request.prompt is not None:
                text, special = request.prompt, True
            else:
                messages = _text_only(request.messages or ())
                if self._template is None or messages is None or request.tools:
                    return None
                text = self._template.render(messages=messages, add_generation_prompt=True, **self._special)
                special = False  # the template wrote them
            return list(self._tokenizer.encode(text[: self.max_chars], add_special_tokens=special).ids)
        except Exception:  # the template refused these messages (raise_exception) or broke
            return None


__all__ = ["PromptTokens"]
