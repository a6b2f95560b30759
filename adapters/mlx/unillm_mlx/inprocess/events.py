"""What the worker thread tells the event loop about one request, in this order.

``Start`` (or ``Failure``), then per choice any number of ``Text`` and one ``Finish``, then
``Done``. A ``Failure`` may come at any point and is the last event.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["Done", "Event", "Failure", "Finish", "Start", "Text"]


@dataclass(frozen=True)
class Start:
    """The request is accepted and its prompt tokenized."""

    prompt_tokens: int


@dataclass(frozen=True)
class Text:
    """New text of choice ``index``, with its tokens' logprobs (OpenAI's chat entries) if asked."""

    index: int
    text: str
    logprobs: list[dict[str, Any]] | None = None


@dataclass(frozen=True)
class Finish:
    """Choice ``index`` ended ("stop" or "length") after ``completion_tokens`` tokens."""

    index: int
    reason: str
    completion_tokens: int


@dataclass(frozen=True)
class Done:
    """Every choice has finished."""


@dataclass(frozen=True)
class Failure:
    """The request failed: answered with this HTTP status and message."""

    status: int
    message: str


Event = Start | Text | Finish | Done | Failure
