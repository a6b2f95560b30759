"""OpenAI-shaped bodies and stream chunks built from the worker's events."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from typing import Any

from unillm_mlx.inprocess.events import Done, Event, Finish, Text
from unillm_mlx.inprocess.parsing import Job

__all__ = ["Answer", "sse"]


def sse(payload: Any) -> bytes:
    """One server-sent event carrying ``payload`` as JSON."""
    return f"data: {json.dumps(payload)}\n\n".encode()


class Answer:
    """One request's answer: the whole body (:meth:`body`) or its stream chunks (:meth:`chunks`).

    Args:
        job: The request.
        prompt_tokens: Its prompt's length, for the usage.
        model: The model name to answer with.
    """

    def __init__(self, job: Job, *, prompt_tokens: int, model: str) -> None:
        self.job, self.model, self.prompt_tokens = job, model, prompt_tokens
        self.id = f"{'chatcmpl' if job.chat else 'cmpl'}-{uuid.uuid4().hex}"
        self.created = int(time.time())
        self.texts: dict[int, list[str]] = {i: [] for i in range(job.n)}
        self.logprobs: dict[int, list[dict[str, Any]]] = {i: [] for i in range(job.n)}
        self.finish: dict[int, str] = {}
        self.completion_tokens = 0

    def feed(self, event: Event) -> None:
        """Record what ``event`` adds to the answer."""
        if isinstance(event, Text):
            self.texts[event.index].append(event.text)
            if event.logprobs:
                self.logprobs[event.index].extend(event.logprobs)
        elif isinstance(event, Finish):
            self.finish[event.index] = event.reason
            self.completion_tokens += event.completion_tokens

    def usage(self) -> dict[str, int]:
        """Prompt, completion and total tokens so far."""
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.prompt_tokens + self.completion_tokens,
        }

    def body(self) -> dict[str, Any]:
        """The whole answer's body, after every event was fed."""
        choices = []
        for i in range(self.job.n):
            text = "".join(self.texts[i])
            choice: dict[str, Any] = {"index": i, "finish_reason": self.finish.get(i, "stop")}
            if self.job.chat:
                choice["message"] = {"role": "assistant", "content": text}
            else:
                choice["text"] = text
            if self.job.logprobs:
                choice["logprobs"] = self._logprobs(self.logprobs[i])
            choices.append(choice)
        return {**self._head(False), "choices": choices, "usage": self.usage()}

    def chunks(self, event: Event) -> Iterator[dict[str, Any]]:
        """Feed ``event`` and give the stream chunks it makes (none, or one)."""
        self.feed(event)
        if isinstance(event, Text):
            yield {
                **self._head(True),
                "choices": [self._choice(event.index, event.text, None, event.logprobs)],
            }
        elif isinstance(event, Finish):
            yield {**self._head(True), "choices": [self._choice(event.index, "", event.reason, None)]}
        elif isinstance(event, Done) and self.job.include_usage:
            yield {**self._head(True), "choices": [], "usage": self.usage()}

    def _head(self, chunk: bool) -> dict[str, Any]:
        kind = "text_completion"
        if self.job.chat:
            kind = "chat.completion.chunk" if chunk else "chat.completion"
        return {"id": self.id, "object": kind, "created": self.created, "model": self.model}

    def _choice(
        self, index: int, text: str, finish: str | None, logprobs: list[dict[str, Any]] | None
    ) -> dict[str, Any]:
        choice: dict[str, Any] = {"index": index, "finish_reason": finish}
        if self.job.chat:
            choice["delta"] = {"content": text} if text else {}
        else:
            choice["text"] = text
        if logprobs:
            choice["logprobs"] = self._logprobs(logprobs)
        return choice

    def _logprobs(self, entries: list[dict[str, Any]]) -> dict[str, Any]:
        if self.job.chat:
            return {"content": entries}
        return {
            "tokens": [e["token"] for e in entries],
            "token_logprobs": [e["logprob"] for e in entries],
            "top_logprobs": [{t["token"]: t["logprob"] for t in e["top_logprobs"]} for e in entries],
        }
