"""Generated tokens to answer text: decoded as vLLM does, and cut at the first stop string."""

from __future__ import annotations

from typing import Any

__all__ = ["Detokenizer", "StopText"]


class Detokenizer:
    """Generated tokens to text the way vLLM does it, so every engine answers the same text.

    Each new token is decoded after the last few tokens before it (the prompt's, at first) and
    only the new characters are kept: a first token's leading space stays (mlx-lm's streaming
    detokenizers trim it), and a character split across tokens waits for its last byte.

    Args:
        tokenizer: The model's tokenizer.
        prompt: The prompt's token ids.
    """

    CONTEXT = 5  # prompt tokens decoded ahead of the first generated one (vLLM uses 5 too)

    def __init__(self, tokenizer: Any, prompt: list[int]) -> None:
        self._tokenizer = tokenizer
        self._ids = list(prompt[-self.CONTEXT :])
        self._prefix, self._read = 0, len(self._ids)

    def add(self, token: int) -> str:
        """The text that ``token`` completes ("" while a character is still incomplete)."""
        self._ids.append(token)
        return self._new_text(final=False)

    def flush(self) -> str:
        """Whatever is held back, at the end of the answer."""
        return self._new_text(final=True)

    def _decode(self, ids: list[int]) -> str:
        return str(self._tokenizer.decode(ids, skip_special_tokens=True, clean_up_tokenization_spaces=False))

    def _new_text(self, *, final: bool) -> str:
        if self._read == len(self._ids):
            return ""
        before = self._decode(self._ids[self._prefix : self._read])
        after = self._decode(self._ids[self._prefix :])
        if len(after) <= len(before) or (after.endswith("\ufffd") and not final):
            return ""
        self._prefix, self._read = self._read, len(self._ids)
        return after[len(before) :]


class StopText:
    """Cuts the text at the first stop string, holding back what could be the start of one.

    Args:
        stops: The stop strings (none: text passes through).
    """

    def __init__(self, stops: tuple[str, ...]) -> None:
        self._stops, self._pending = stops, ""

    def feed(self, text: str) -> tuple[str, bool]:
        """The text that is safe to send, and whether a stop string was met (the answer ends)."""
        if not self._stops:
            return text, False
        buf = self._pending + text
        cut = min((i for s in self._stops if (i := buf.find(s)) >= 0), default=-1)
        if cut >= 0:
            self._pending = ""
            return buf[:cut], True
        keep = max((k for s in self._stops for k in range(1, len(s)) if buf.endswith(s[:k])), default=0)
        self._pending = buf[len(buf) - keep :] if keep else ""
        return buf[: len(buf) - keep], False

    def flush(self) -> str:
        """What was held back, at the end of the answer."""
        tail, self._pending = self._pending, ""
        return tail
