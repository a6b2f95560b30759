"""A vLLM look-alike that honours the options the probe measures (or ignores those named).

    with HonestServer(ignore={"seed"}) as server:   # drops "seed" from every body, silently
        report = await unillm.probe(unillm.connect("vllm", server.url))

Answers are words drawn from a small vocabulary by a generator seeded from the request (fixed at
temperature 0, from ``seed`` when given, changed by a penalty or a LoRA), so each option has an
effect the probe can see. Streams are the base server's.
"""

from __future__ import annotations

import json
import random
import time
import uuid
from typing import Any

from unillm.testing.fault_server import FaultServer
from unillm.testing.probing import regex_answer

WORDS = ("the", " cat", " sat", " on", " a", " mat", " dog", " ran", " far", ".")


class HonestServer(FaultServer):
    """The fault server's wire, answering by the request's options."""

    def __init__(
        self,
        *,
        ignore: set[str] | frozenset[str] = frozenset(),
        thinks_by_default: bool = False,
        **kwargs: Any,
    ) -> None:
        """``ignore``: body keys dropped silently, and two pseudo-keys: "lora" (a LoRA answers as
        the base) and "reasoning_parser" (the thinking stays in the text, in think tags)."""
        super().__init__(**kwargs)
        self.ignore, self.thinks_by_default = set(ignore), thinks_by_default

    async def _stream(self, request: Any, body: dict[str, Any], *args: Any, **kwargs: Any) -> bool:
        kept = {k: v for k, v in body.items() if k not in self.ignore}
        return await super()._stream(request, kept, *args, **kwargs)

    def _completion(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        body = {k: v for k, v in body.items() if k not in self.ignore}
        n = int(body.get("n") or 1)
        choices = [self._choice(body, i) for i in range(n)]
        tokens = sum(c.pop("_tokens") for c in choices)
        return {
            "id": f"chatcmpl-{uuid.uuid4().hex}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model"),
            "choices": choices,
            "usage": {"prompt_tokens": 9, "completion_tokens": tokens, "total_tokens": 9 + tokens},
        }

    def _rng(self, body: dict[str, Any], index: int) -> random.Random:
        if body.get("temperature") == 0:
            key = "greedy"
        elif body.get("seed") is not None:
            key = f"seed {body['seed']} {index}"
        else:
            key = uuid.uuid4().hex
        penalties = [
            f"{k}={body[k]}"
            for k in ("presence_penalty", "frequency_penalty", "repetition_penalty")
            if k in body
        ]
        model = self.model if "lora" in self.ignore else body.get("model")
        return random.Random(f"{key} {penalties} {model}")

    def _choice(self, body: dict[str, Any], index: int) -> dict[str, Any]:
        rng, limit = self._rng(body, index), int(body.get("max_tokens") or 16)
        message: dict[str, Any] = {
            "role": "assistant",
            "content": None,
            "tool_calls": [],
            "reasoning_content": None,
        }
        constrained = _constrained(body.get("structured_outputs") or _response_format(body))
        tool = body.get("tool_choice")
        if constrained is not None:
            message["content"], finish, count = constrained, "stop", 4
        elif isinstance(tool, dict) or tool in ("required", "auto") or (body.get("tools") and tool is None):
            name = (
                tool["function"]["name"] if isinstance(tool, dict) else body["tools"][0]["function"]["name"]
            )
            call = {
                "id": "call-1",
                "type": "function",
                "function": {"name": name, "arguments": '{"city": "Paris"}'},
            }
            message["tool_calls"], finish, count = [call], "tool_calls", 6
        else:
            pieces = [rng.choice(WORDS) for _ in range(limit)]
            text, finish, count = "".join(pieces), "length", limit
            for word in body.get("stop") or ():
                if word in text:
                    text, finish, count = text[: text.find(word)], "stop", limit // 2
            message["content"] = text
            if (body.get("chat_template_kwargs") or {}).get("enable_thinking", self.thinks_by_default):
                if "reasoning_parser" in self.ignore:
                    message["content"] = f"<think>Let me think.</think>{text}"
                else:
                    message["reasoning_content"] = "Let me think."
            choice_logprobs = _logprobs(pieces[:count], body) if body.get("logprobs") else None
        return {
            "index": index,
            "message": message,
            "logprobs": choice_logprobs if constrained is None and message["content"] is not None else None,
            "finish_reason": finish,
            "_tokens": count,
        }


def _logprobs(pieces: list[str], body: dict[str, Any]) -> dict[str, Any]:
    top = int(body.get("top_logprobs") or 0)
    return {
        "content": [
            {
                "token": p,
                "logprob": -0.5,
                "bytes": list(p.encode()),
                "top_logprobs": [
                    {"token": w, "logprob": -1.0, "bytes": list(w.encode())} for w in WORDS[:top]
                ],
            }
            for p in pieces
        ]
    }


def _response_format(body: dict[str, Any]) -> dict[str, Any]:
    """``response_format`` (OpenAI's json_schema; trtllm-serve's regex and ebnf too) as vLLM's
    structured_outputs field."""
    fmt = body.get("response_format") or {}
    kind = fmt.get("type")
    if kind == "json_schema":
        return {"json": fmt["json_schema"]["schema"]}
    return {"regex": fmt["regex"]} if kind == "regex" else {"grammar": fmt["ebnf"]} if kind == "ebnf" else {}


def _constrained(spec: dict[str, Any]) -> str | None:
    """A valid answer for vLLM's ``structured_outputs`` (json, regex, choice, grammar)."""
    if "json" in spec:
        schema = spec["json"] if isinstance(spec["json"], dict) else json.loads(spec["json"])
        properties = schema.get("properties", {})
        if "city" in properties:  # a named tool's arguments
            return json.dumps({"city": "Paris"})
        name = properties.get("name", {}).get("const")  # tool_choice="required": name and arguments
        return json.dumps(
            {"name": name, "arguments": {"city": "Paris"}} if name else {"name": "cat", "age": 3}
        )
    if "regex" in spec:
        return regex_answer(spec["regex"]) or "abc 12"
    if "choice" in spec:
        return str(spec["choice"][0])
    if "grammar" in spec:
        return "yes 1"
    return None
