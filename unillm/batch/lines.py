"""Batch input lines into unillm requests (pure: no I/O, nothing sent).

Two line shapes are read, and may be mixed in one file:

* OpenAI Batch: ``{"custom_id": "a", "method": "POST", "url": "/v1/chat/completions",
  "body": {...}}`` for ``/v1/chat/completions``, ``/v1/completions`` and ``/v1/embeddings``
  (the files OpenAI's batch API and ``vllm run-batch`` read). ``body.model`` is kept for the
  record only: the target serves its own model.
* Simple: ``{"prompt": "..."}`` or ``{"messages": [...]}`` with unillm options beside it
  (``max_tokens``, ``temperature``, ``lora``, ...) and an optional constraint ``"output":
  {"json_schema": {...}} | {"regex": "..."} | {"choice": [...]} | {"grammar": "...",
  "syntax": "ebnf"}``. ``custom_id`` is optional here: it defaults to ``"line-N"``.

:func:`parse_lines` checks every line (JSON, shape, options, constraints) and the ids (none
missing, none twice) before anything is sent, and raises one InvalidOptions that lists the
problems by line number.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from unillm.errors import InvalidOptions, UnillmError, clip_message
from unillm.options import SAMPLING_FIELDS, Choice, Grammar, JsonSchema, OutputSpec, Regex, make_request

Endpoint = Literal["chat", "completions", "embeddings"]
URLS: dict[str, Endpoint] = {
    "/v1/chat/completions": "chat",
    "/v1/completions": "completions",
    "/v1/embeddings": "embeddings",
}
#: OpenAI request fields with no meaning for a local engine: dropped, not sent.
_IGNORED = frozenset({"model", "user", "metadata", "store", "service_tier", "stream_options"})
#: OpenAI fields that map one-to-one onto unillm options (logprobs differ: :func:`_logprobs`).
_SAME = (*(f for f in SAMPLING_FIELDS if "logprobs" not in f), "priority", "tools", "tool_choice")
#: vLLM's constraint fields (``guided_*`` and ``structured_outputs``), by unillm constraint.
_GUIDED = {
    "guided_json": "json",
    "guided_regex": "regex",
    "guided_choice": "choice",
    "guided_grammar": "grammar",
}
_MAX_PROBLEMS = 10
#: Longest quoted value in a refusal, and longest problem line (a line can hold megabytes).
_SHOWN, _PROBLEM = 200, 600
#: Deepest nesting of lists and objects a line may have (deeper cannot be a sensible request,
#: and would overflow Python's stack in the checks and the JSON encoder downstream).
MAX_DEPTH = 100


@dataclass(frozen=True)
class BatchItem:
    """One request of a batch, validated: what to send and the id its result is filed under."""

    custom_id: str
    line: int
    endpoint: Endpoint
    prompt: str | None = None
    messages: list[dict[str, Any]] | None = None
    output: OutputSpec | None = None
    options: dict[str, Any] = field(default_factory=dict)
    texts: list[str] | None = None  # embeddings
    dimensions: int | None = None  # embeddings

    def prefix_key(self) -> str:
        """The text the request starts with, so requests sharing a prefix can be sent together."""
        if self.prompt is not None:
            return self.prompt
        if self.messages is not None:
            return json.dumps(self.messages, sort_keys=True, default=str)
        return "\x00".join(self.texts or ())


def parse_lines(lines: Iterable[str]) -> list[BatchItem]:
    """Parse and validate a whole batch input, refusing it whole if any line is wrong.

    Args:
        lines: The file's lines (blank lines are skipped).

    Returns:
        One BatchItem per request, in file order.

    Raises:
        InvalidOptions: A line that is not JSON or not a request, a bad option or constraint, a
            missing or repeated ``custom_id``, or an empty input; the message lists up to ten
            problems by line number.
    """
    items: list[BatchItem] = []
    problems: list[str] = []
    first_line: dict[str, int] = {}
    for number, text in enumerate(lines, start=1):
        if not text.strip():
            continue
        try:
            item = parse_line(text, number)
        except UnillmError as e:
            problems.append(clip_message(f"line {number}: {e}", _PROBLEM))
            continue
        if item.custom_id in first_line:
            problems.append(
                f"line {number}: custom_id {shown(item.custom_id)} repeats line "
                f"{first_line[item.custom_id]}; every request needs its own id (results are filed under it)"
            )
            continue
        first_line[item.custom_id] = number
        items.append(item)
    if problems:
        more = f" (and {len(problems) - _MAX_PROBLEMS} more)" if len(problems) > _MAX_PROBLEMS else ""
        raise InvalidOptions(
            f"the batch input has {len(problems)} bad line(s){more}; nothing was sent. Fix them and "
            "rerun:\n  " + "\n  ".join(problems[:_MAX_PROBLEMS])
        )
    if not items:
        raise InvalidOptions("the batch input has no requests (every line is blank)")
    return items


def parse_line(text: str, number: int) -> BatchItem:
    """Parse one input line (OpenAI Batch or simple form) into a validated BatchItem.

    Args:
        text: The line's JSON.
        number: Its line number (for the default id of a simple line and for messages).

    Raises:
        InvalidOptions: The line is not a valid request (any failure to read or check it).
    """
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise InvalidOptions(f"not JSON ({e.msg} at column {e.colno})") from None
    except RecursionError:
        raise InvalidOptions(f"nested too deeply (at most {MAX_DEPTH} levels of lists and objects)") from None
    if not isinstance(data, dict):
        raise InvalidOptions(f"a line must be a JSON object, got {type(data).__name__}")
    if _depth(data) > MAX_DEPTH:
        raise InvalidOptions(f"nested too deeply (at most {MAX_DEPTH} levels of lists and objects)")
    try:
        if "body" in data or "url" in data:
            return _openai_line(data, number)
        return _simple_line(data, number)
    except UnillmError:
        raise
    except Exception as e:  # a check that failed in an unforeseen way still names its line
        raise InvalidOptions(f"cannot be read as a request ({type(e).__name__}: {e})") from None


def shown(value: Any) -> str:
    """``repr(value)`` cut to a few hundred characters, for quoting input in a message."""
    return clip_message(repr(value), _SHOWN)


def _depth(value: Any) -> int:
    """How deeply lists and objects nest in a parsed JSON value (iteratively: no recursion)."""
    deepest, todo = 0, [(value, 1)]
    while todo:
        node, level = todo.pop()
        children = node.values() if isinstance(node, dict) else node if isinstance(node, list) else None
        if children is None:
            continue
        deepest = max(deepest, level)
        if deepest > MAX_DEPTH:
            break
        todo.extend((child, level + 1) for child in children)
    return deepest


def _custom_id(value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise InvalidOptions(f"custom_id must be a non-empty string, got {shown(value)}")
    return value


def _openai_line(data: dict[str, Any], number: int) -> BatchItem:
    if "custom_id" not in data:
        raise InvalidOptions("custom_id is missing (OpenAI Batch lines need one)")
    custom_id = _custom_id(data["custom_id"])
    method = data.get("method", "POST")
    if method != "POST":
        raise InvalidOptions(f"method must be POST, got {shown(method)}")
    url = data.get("url")
    endpoint = URLS.get(url) if isinstance(url, str) else None
    if endpoint is None:
        raise InvalidOptions(f"url {shown(url)} is not one unillm batch runs; use one of {sorted(URLS)}")
    body = data.get("body")
    if not isinstance(body, dict):
        raise InvalidOptions("body must be a JSON object (the request to send)")
    body = {k: v for k, v in body.items() if k not in _IGNORED}
    if body.pop("stream", False):
        raise InvalidOptions("stream=true has no place in a batch; drop it")
    if endpoint == "embeddings":
        return _embeddings(custom_id, number, body)
    messages, prompt = body.pop("messages", None), body.pop("prompt", None)
    if endpoint == "chat" and messages is None:
        raise InvalidOptions("body.messages is missing (a chat request needs messages)")
    if endpoint == "completions" and not isinstance(prompt, str):
        raise InvalidOptions(f"body.prompt must be one string (one request per line), got {shown(prompt)}")
    options: dict[str, Any] = {k: body.pop(k) for k in _SAME if k in body}
    if "max_completion_tokens" in body:
        options["max_tokens"] = body.pop("max_completion_tokens")
    _logprobs(body, options, chat=endpoint == "chat")
    output = _openai_output(body)
    extra = body.pop("extra_body", None) or {}
    if body or extra:  # engine-specific fields (ignore_eos, ...): sent as they are
        options["extra_body"] = {**extra, **body} if isinstance(extra, dict) else extra
    return _checked(BatchItem(custom_id, number, endpoint, prompt, messages, output, options))


def _logprobs(body: dict[str, Any], options: dict[str, Any], *, chat: bool) -> None:
    if "logprobs" in body:
        value = body.pop("logprobs")
        if chat or isinstance(value, bool) or value is None:
            options["logprobs"] = value
        else:  # completions: logprobs=N asks for N alternatives per token
            options["logprobs"] = True
            if value:
                options["top_logprobs"] = value
    if "top_logprobs" in body:
        options["top_logprobs"] = body.pop("top_logprobs")


def _openai_output(body: dict[str, Any]) -> OutputSpec | None:
    """The constraint of an OpenAI/vLLM body (response_format, guided_*, structured_outputs)."""
    found: list[OutputSpec] = []
    fmt = body.pop("response_format", None)
    if fmt is not None:
        kind = fmt.get("type") if isinstance(fmt, dict) else None
        if kind == "json_schema" and isinstance(fmt.get("json_schema"), dict):
            spec = fmt["json_schema"]
            found.append(JsonSchema(spec.get("schema") or {}, name=spec.get("name") or "output"))
        elif kind == "json_object":
            found.append(JsonSchema({"type": "object"}))
        elif kind != "text":
            raise InvalidOptions(f"response_format {shown(fmt)} is not text, json_object or json_schema")
    for key, kind in _GUIDED.items():
        if key in body:
            found.append(_constraint({kind: body.pop(key)}, f"body.{key}"))
    structured = body.pop("structured_outputs", None)
    if structured is not None:
        found.append(_constraint(structured, "body.structured_outputs"))
    if len(found) > 1:
        raise InvalidOptions(
            "give one constraint per request (response_format, guided_* or structured_outputs)"
        )
    return found[0] if found else None


def _constraint(spec: Any, where: str) -> OutputSpec:
    """A constraint from ``{"json"|"json_schema": {...}}``, ``{"regex": ...}``, ``{"choice": [...]}``
    or ``{"grammar": ..., "syntax": ...}``; ``where`` names the field it came from, for messages."""
    if not isinstance(spec, Mapping):
        raise InvalidOptions(
            f"{where}: a constraint is an object like {{'regex': '[0-9]+'}}, got {shown(spec)}"
        )
    keys = set(spec) - {"syntax"}
    if len(keys) != 1:
        raise InvalidOptions(
            f"{where}: a constraint names exactly one of json_schema, regex, choice, grammar; "
            f"got {shown(sorted(spec))}"
        )
    (key,) = keys
    value = spec[key]
    if key in ("json", "json_schema"):
        schema = _json_text(value, where) if isinstance(value, str) else value
        if not isinstance(schema, Mapping):
            raise InvalidOptions(f"{where} must be a JSON schema object, got {shown(value)}")
        return JsonSchema(schema)
    if key == "regex":
        return Regex(value)
    if key == "choice":
        return Choice(value)
    if key == "grammar":
        return Grammar(value, spec.get("syntax", "ebnf"))
    raise InvalidOptions(
        f"{where}: unknown constraint {shown(key)}; use json_schema, regex, choice or grammar"
    )


def _json_text(text: str, where: str) -> Any:
    """A JSON schema given as a string (vLLM's ``guided_json`` may be one), parsed."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise InvalidOptions(
            f"{where} is a string but not JSON ({e.msg} at column {e.colno}); give the schema as an object"
        ) from None
    except RecursionError:
        raise InvalidOptions(f"{where} is nested too deeply (at most {MAX_DEPTH} levels)") from None


def _simple_line(data: dict[str, Any], number: int) -> BatchItem:
    options = dict(data)
    custom_id = _custom_id(options.pop("custom_id")) if "custom_id" in options else f"line-{number}"
    prompt, messages = options.pop("prompt", None), options.pop("messages", None)
    if (prompt is None) == (messages is None):
        raise InvalidOptions(
            'give "prompt" or "messages" (the simple form), or "custom_id", "url" and "body" (OpenAI Batch)'
        )
    output = _constraint(options.pop("output"), "output") if options.get("output") is not None else None
    options.pop("output", None)
    endpoint: Endpoint = "chat" if messages is not None else "completions"
    return _checked(BatchItem(custom_id, number, endpoint, prompt, messages, output, options))


def _embeddings(custom_id: str, number: int, body: dict[str, Any]) -> BatchItem:
    texts = body.pop("input", None)
    texts = [texts] if isinstance(texts, str) else texts
    if not isinstance(texts, list) or not texts or not all(isinstance(t, str) for t in texts):
        raise InvalidOptions("body.input must be a string or a non-empty list of strings")
    dimensions = body.pop("dimensions", None)
    if dimensions is not None and (
        isinstance(dimensions, bool) or not isinstance(dimensions, int) or dimensions < 1
    ):
        raise InvalidOptions(f"body.dimensions must be a positive integer, got {shown(dimensions)}")
    body.pop("encoding_format", None)  # vectors are written as JSON numbers
    if body:
        raise InvalidOptions(f"embeddings take input and dimensions only; drop {shown(sorted(body))}")
    return BatchItem(custom_id, number, "embeddings", texts=texts, dimensions=dimensions)


def _checked(item: BatchItem) -> BatchItem:
    """Validate the request as generate() would, so a bad option fails before anything is sent."""
    make_request(item.prompt, item.messages, item.output, item.options, stream=False)
    return item
