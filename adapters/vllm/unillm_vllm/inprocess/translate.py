"""OpenAI request bodies into worker jobs, worker results into OpenAI answer bodies (pure).

The adapter builds the same body for in-process vLLM as for vLLM's server
(:meth:`VLLMAdapter.build`); :func:`job` turns it into what the worker hands to vLLM's engine
(the prompt or messages, and ``SamplingParams`` fields under vLLM's own names), refusing every
field the worker cannot honour. :func:`answer_body` turns the worker's result back into the
``chat.completion`` / ``text_completion`` body vLLM's server would have sent, so the adapter's
``parse`` and the batch output lines are the same as over HTTP.

    job("/v1/completions", {"model": "m", "prompt": "Hi", "max_tokens": 4}, "r1")
    # {"id": "r1", "prompt": "Hi", "params": {"max_tokens": 4}}
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from unillm.adapter import SAMPLING_FIELDS

__all__ = ["CHAT_PATH", "COMPLETIONS_PATH", "IN_PROCESS_SUFFIX", "Refused", "answer_body", "job"]

#: What vLLM's version gets in process: the adapter's capabilities for the in-process mode.
IN_PROCESS_SUFFIX = "+in-process"
CHAT_PATH = "/v1/chat/completions"
COMPLETIONS_PATH = "/v1/completions"

#: Body fields that are ``SamplingParams`` fields of the same name and meaning.
SAMPLING = frozenset(
    {
        # unillm's sampling options but the logprobs (not taken in process: see _NOT_TAKEN)
        *(name for name in SAMPLING_FIELDS if "logprobs" not in name),
        # vLLM's own sampling fields, which its server also reads from the body (extra_body=)
        "ignore_eos",
        "min_tokens",
        "stop_token_ids",
        "skip_special_tokens",
        "spaces_between_special_tokens",
        "include_stop_str_in_output",
        "bad_words",
        "allowed_token_ids",
    }
)
#: The constraints vLLM's ``StructuredOutputsParams`` takes (one per request).
CONSTRAINTS = frozenset({"json", "regex", "choice", "grammar"})
#: Why a field the server reads is not taken in process, and what to do instead.
_NOT_TAKEN = {
    "stream": "answers are whole in process (a batch writes whole answers)",
    "logprobs": "the in-process worker returns no logprobs",
    "top_logprobs": "the in-process worker returns no logprobs",
    "tools": "the in-process worker runs no tool-call parser",
    "tool_choice": "the in-process worker runs no tool-call parser",
}


class Refused(ValueError):
    """A body field, message or value the in-process worker cannot honour (with what to do)."""


def job(path: str, body: Mapping[str, Any], request_id: str) -> dict[str, Any]:
    """The worker job for one request body (as the adapter built it for vLLM's server).

    Args:
        path: The route the adapter chose (chat or completions).
        body: The JSON body vLLM's server would have received.
        request_id: The id the result comes back under.

    Returns:
        ``{"id", "prompt" | "messages", "params", "structured_outputs"?, "chat_template_kwargs"?}``.

    Raises:
        Refused: A route, field or message content the in-process worker does not take.
    """
    if path not in (CHAT_PATH, COMPLETIONS_PATH):
        raise Refused(f"in-process vLLM serves {CHAT_PATH} and {COMPLETIONS_PATH}, not {path}")
    chat = path == CHAT_PATH
    out: dict[str, Any] = {"id": request_id}
    params: dict[str, Any] = {}
    for key, value in body.items():
        if key == "model":
            continue  # the worker serves one model; discovery named it
        if key in SAMPLING:
            params[key] = value
        elif key == "messages" and chat:
            out["messages"] = [_message(m) for m in value]
        elif key == "prompt" and not chat:
            if not isinstance(value, str):
                raise Refused("in-process vLLM takes one text prompt per request")
            out["prompt"] = value
        elif key == "chat_template_kwargs" and chat:
            out["chat_template_kwargs"] = dict(value)
        elif key == "structured_outputs":
            out["structured_outputs"] = _constraint(value)
        else:
            why = _NOT_TAKEN.get(key, "the in-process worker has no such field")
            raise Refused(f"in-process vLLM does not take {key!r}: {why}; launch vLLM as a server for it")
    if "messages" not in out and "prompt" not in out:
        raise Refused("the request has no " + ("messages" if chat else "prompt"))
    out["params"] = params
    return out


def _message(message: Any) -> dict[str, Any]:
    """A chat message for the chat template: text content parts joined, images refused."""
    if not isinstance(message, Mapping):
        raise Refused("each message must be an object")
    content = message.get("content")
    if not isinstance(content, list):
        return dict(message)
    texts = []
    for part in content:
        if not isinstance(part, Mapping) or part.get("type") != "text":
            kind = part.get("type") if isinstance(part, Mapping) else type(part).__name__
            raise Refused(f"in-process vLLM takes text content only, not {kind!r} parts")
        texts.append(str(part.get("text", "")))
    return {**message, "content": "".join(texts)}


def _constraint(value: Any) -> dict[str, Any]:
    if not isinstance(value, Mapping) or len(value) != 1 or not set(value) <= CONSTRAINTS:
        raise Refused(f"in-process vLLM takes one structured output of {sorted(CONSTRAINTS)}")
    return dict(value)


def answer_body(path: str, model: str, result: Mapping[str, Any]) -> dict[str, Any]:
    """The OpenAI answer vLLM's server would send for the worker's ``result``.

    Args:
        path: The request's route (chat or completions).
        model: The served model's name.
        result: The worker's line: ``{"id", "prompt_tokens", "outputs": [{"index", "text",
            "tokens", "finish_reason"}]}``.

    Returns:
        A ``chat.completion`` or ``text_completion`` body, usage included.
    """
    chat = path == CHAT_PATH
    outputs = result["outputs"]
    choices = [_choice(o, chat) for o in outputs]
    prompt = int(result["prompt_tokens"])
    generated = sum(int(o["tokens"]) for o in outputs)
    return {
        "id": f"{'chatcmpl' if chat else 'cmpl'}-{result['id']}",
        "object": "chat.completion" if chat else "text_completion",
        "created": int(time.time()),
        "model": model,
        "choices": choices,
        "usage": {
            "prompt_tokens": prompt,
            "completion_tokens": generated,
            "total_tokens": prompt + generated,
        },
    }


def _choice(output: Mapping[str, Any], chat: bool) -> dict[str, Any]:
    reason = output.get("finish_reason")
    if chat:
        message = {"role": "assistant", "content": output["text"]}
        return {"index": output["index"], "message": message, "logprobs": None, "finish_reason": reason}
    return {"index": output["index"], "text": output["text"], "logprobs": None, "finish_reason": reason}
