"""What a caller can ask for: sampling options, output constraints, and the validated Request.

await llm.generate("Date?", output=unillm.Regex(r"\\d{4}-\\d{2}-\\d{2}"), max_tokens=12)
await llm.generate("Ok?", output=unillm.Choice(["yes", "no"]))
await llm.generate("Answer:", output=Answer)   # a pydantic model class, or a JSON-schema dict
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypedDict, Union

from pydantic import BaseModel
from typing_extensions import Required

from unillm.content import normalize_messages
from unillm.errors import InvalidOptions
from unillm.schema_refs import check_refs
from unillm.tools import Tool, ToolChoice, to_tool_choice, to_tools


@dataclass(frozen=True, slots=True)
class JsonSchema:
    """Constrain the answer to JSON that validates against ``schema``.

    ``model`` (set when built from a pydantic class) is used to parse ``Completion.parsed``.
        JsonSchema({"type": "object", "properties": {"n": {"type": "integer"}}})

    Args:
        schema: The JSON schema the answer must validate against.
        name: The schema's name where an engine sends one (OpenAI's ``json_schema.name``).
        model: The pydantic class that parses ``Completion.parsed``; None parses to plain JSON.
    """

    schema: Mapping[str, Any]
    name: str = "output"
    model: type[BaseModel] | None = field(default=None, compare=False)

    @classmethod
    def from_model(cls, model: type[BaseModel]) -> JsonSchema:
        """Build the constraint from a pydantic model class.

        Args:
            model: The pydantic class; its JSON schema is the constraint and it parses ``.parsed``.
        """
        return cls(model.model_json_schema(), name=model.__name__, model=model)


@dataclass(frozen=True, slots=True)
class Regex:
    """Constrain the answer to match ``pattern`` in full: ``Regex(r"[0-9]{3}")``.

    Args:
        pattern: The regular expression the whole answer must match (non-empty).

    Raises:
        InvalidOptions: An empty or non-string pattern.
    """

    pattern: str

    def __post_init__(self) -> None:
        if not isinstance(self.pattern, str) or not self.pattern:
            raise InvalidOptions(
                f"Regex needs a non-empty pattern string, e.g. Regex(r'[0-9]+'), got {self.pattern!r}"
            )


_REGEX_META = frozenset("\\.^$*+?{}[]()|")


@dataclass(frozen=True, slots=True)
class Choice:
    """Constrain the answer to exactly one of ``options``: ``Choice(["yes", "no"])``.

    Args:
        options: The allowed answers (non-empty strings; a bare string is refused).

    Raises:
        InvalidOptions: No options, or one that is not a string.
    """

    options: tuple[str, ...]

    def __init__(self, options: Sequence[str]) -> None:
        values = () if isinstance(options, str) else tuple(options)
        if not values:
            raise InvalidOptions("Choice needs a non-empty list of strings, e.g. Choice(['yes', 'no'])")
        if not all(isinstance(o, str) for o in values):
            raise InvalidOptions("Choice options must all be strings")
        object.__setattr__(self, "options", values)

    def as_regex(self) -> str:
        """A regex matching exactly one option, for engines without a choice field: ``(yes|no)``.

        Only regex metacharacters are escaped, so every engine's regex dialect reads it.
        """
        return (
            "("
            + "|".join("".join("\\" + c if c in _REGEX_META else c for c in o) for o in self.options)
            + ")"
        )


@dataclass(frozen=True, slots=True)
class Grammar:
    """Constrain the answer to a context-free grammar (EBNF/GBNF by default, or Lark).

    Grammar('root ::= "yes" | "no"')

    Args:
        text: The grammar itself.
        syntax: "ebnf" (EBNF/GBNF, rule ``root``) or "lark".

    Raises:
        InvalidOptions: An empty grammar or an unknown syntax.
    """

    text: str
    syntax: Literal["ebnf", "lark"] = "ebnf"

    def __post_init__(self) -> None:
        if not isinstance(self.text, str) or not self.text.strip():
            raise InvalidOptions(
                'Grammar needs the grammar\'s text, e.g. Grammar(\'root ::= "yes" | "no"\'), '
                f"got {self.text!r}"
            )
        if self.syntax not in GRAMMAR_SYNTAXES:
            raise InvalidOptions(f"Grammar syntax must be one of {GRAMMAR_SYNTAXES}, got {self.syntax!r}")


GRAMMAR_SYNTAXES: tuple[str, ...] = ("ebnf", "lark")


Constraint = Union[JsonSchema, Regex, Choice, Grammar]  # noqa: UP007 (runtime alias on 3.10)
OutputSpec = Union[Constraint, type[BaseModel], Mapping[str, Any]]  # noqa: UP007


class Message(TypedDict, total=False):
    """One chat message: ``{"role": "user", "content": "hi"}``.

    ``content`` may also be a list of parts (strings, ``unillm.Image``, OpenAI-style text and
    ``image_url`` dicts); assistant messages may carry ``tool_calls`` (``r.message()`` builds
    one), and tool results are ``{"role": "tool", "tool_call_id": call.id, "content": "..."}``.
    """

    role: Required[str]
    content: str | list[Any] | None
    tool_calls: list[Any]
    tool_call_id: str
    name: str
    reasoning: str


class Options(TypedDict, total=False):
    """Sampling and routing options accepted by ``generate`` and ``stream`` on every engine.

    Attributes:
        max_tokens: The most tokens to generate.
        temperature: Sampling temperature; 0 is greedy.
        top_p: Nucleus sampling: keep the smallest set of tokens whose probability sums to this.
        top_k: Sample among the k likeliest tokens.
        min_p: Drop tokens less likely than this fraction of the likeliest one.
        stop: A string, or strings, that end the answer (not included in it).
        seed: Seeds sampling, for repeatable answers where the engine supports it.
        presence_penalty: Penalises tokens that already appeared (OpenAI's definition).
        frequency_penalty: Penalises tokens by how often they appeared (OpenAI's definition).
        repetition_penalty: Multiplicative penalty on repeated tokens (1.0: none).
        n: How many answers (choices) to generate.
        logprobs: Return each generated token's log probability.
        top_logprobs: Also return this many likeliest alternatives per token.
        lora: The LoRA adapter to answer with (launched with it, or loaded by ``llm.loras.load``).
        priority: The request's scheduling priority, lower first (vLLM's convention); honoured by
            an engine launched with ``scheduling="priority"`` (vLLM, SGLang), refused elsewhere.
        extra_body: Engine-specific request fields, merged into the body as is.
        timeout: Seconds each wait for the next bytes may take (a stall), not the whole call;
            unset: the client's ``Timeouts.read``.
        session: A key that sends a Fleet's requests to the same replica (one LLM: ignored).
        deadline: Seconds the whole call may take, queueing and retries included; unset: no limit.
        tools: Functions the model may call: pydantic classes, Python functions or JSON-schema dicts.
        tool_choice: "auto" (default), "required", "none", or the tool (or its name) to call.
        thinking: Turn the model's thinking on or off (the chat template's ``enable_thinking``).
        thinking_budget: The most tokens the model may think for (vLLM's thinking token budget).
        reasoning_effort: How hard a reasoning model thinks: "none", "minimal", "low", "medium", "high".
        replay_reasoning: How the thoughts of earlier assistant messages go back to the engine:
            "field" (the engine's reasoning field; the chat template keeps or drops them as the
            model family documents), "inline" (in the content, between ``<think>`` markers) or
            "drop"; unset: "field" where the engine reads one, else "drop".
    """

    max_tokens: int
    temperature: float
    top_p: float
    top_k: int
    min_p: float
    stop: str | Sequence[str]
    seed: int
    presence_penalty: float
    frequency_penalty: float
    repetition_penalty: float
    n: int
    logprobs: bool
    top_logprobs: int
    lora: str
    priority: int
    extra_body: Mapping[str, Any]
    timeout: float
    session: str  # a Fleet sends requests with the same key to the same replica (one LLM: itself)
    deadline: float
    tools: Sequence[Any]
    tool_choice: Any
    thinking: bool
    thinking_budget: int
    reasoning_effort: Literal["none", "minimal", "low", "medium", "high"]
    replay_reasoning: Literal["field", "inline", "drop"]


#: unillm's sampling options, each also the field's name in an OpenAI-compatible body.
SAMPLING_FIELDS: tuple[str, ...] = (
    "max_tokens",
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "stop",
    "seed",
    "presence_penalty",
    "frequency_penalty",
    "repetition_penalty",
    "n",
    "logprobs",
    "top_logprobs",
)
_ALL_OPTIONS = frozenset(Options.__annotations__)


def to_constraint(output: OutputSpec | None) -> Constraint | None:
    """Normalise ``output=`` (pydantic class, JSON-schema dict or constraint) to a Constraint."""
    if isinstance(output, JsonSchema):
        _check_schema(output.schema)
        return output
    if output is None or isinstance(output, (Regex, Choice, Grammar)):
        return output
    if isinstance(output, type) and issubclass(output, BaseModel):
        return JsonSchema.from_model(output)
    if isinstance(output, Mapping):
        _check_schema(output)
        return JsonSchema(output)
    raise InvalidOptions(
        f"output={output!r} is not a constraint: pass a pydantic model class, a JSON-schema "
        "dict, unillm.Regex, unillm.Choice or unillm.Grammar"
    )


def check_json(value: Any, what: str) -> None:
    """Refuse ``value`` unless it is standard JSON (no NaN/Infinity, only JSON types)."""
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError) as e:
        raise InvalidOptions(
            f"{what} must be standard JSON (finite numbers, strings, lists, dicts): {e}"
        ) from None
    except RecursionError:
        raise InvalidOptions(f"{what} is nested too deeply to send as JSON") from None


def _check_schema(schema: Mapping[str, Any]) -> None:
    from jsonschema import validators
    from jsonschema.exceptions import SchemaError

    check_json(schema, "the output schema")
    try:
        validators.validator_for(schema).check_schema(schema)
    except SchemaError as e:
        raise InvalidOptions(f"output schema is not a valid JSON schema: {e.message}") from None
    except RecursionError:
        raise InvalidOptions("the output schema is nested too deeply to check") from None
    check_refs(schema, "the output schema")


@dataclass(frozen=True, slots=True)
class Request:
    """One validated request, as adapters see it. Built once per call by :func:`make_request`."""

    prompt: str | None
    messages: tuple[dict[str, Any], ...] | None
    stream: bool
    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    min_p: float | None = None
    stop: tuple[str, ...] | None = None
    seed: int | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    repetition_penalty: float | None = None
    n: int | None = None
    logprobs: bool | None = None
    top_logprobs: int | None = None
    output: Constraint | None = None
    lora: str | None = None
    priority: int | None = None
    extra_body: Mapping[str, Any] | None = None
    timeout: float | None = None
    session: str | None = None
    deadline: float | None = None
    tools: tuple[Tool, ...] | None = None
    tool_choice: ToolChoice | None = None
    thinking: bool | None = None
    thinking_budget: int | None = None
    reasoning_effort: str | None = None
    replay_reasoning: str | None = None

    def sampling(self) -> dict[str, Any]:
        """The sampling options that were set, by unified name."""
        return {k: v for k in SAMPLING_FIELDS if (v := getattr(self, k)) is not None}


_TYPES: dict[str, tuple[type, ...]] = {
    "max_tokens": (int,),
    "top_k": (int,),
    "seed": (int,),
    "n": (int,),
    "top_logprobs": (int,),
    "temperature": (int, float),
    "top_p": (int, float),
    "min_p": (int, float),
    "presence_penalty": (int, float),
    "frequency_penalty": (int, float),
    "repetition_penalty": (int, float),
    "timeout": (int, float),
    "deadline": (int, float),
    "logprobs": (bool,),
    "lora": (str,),
    "priority": (int,),
    "session": (str,),
    "thinking": (bool,),
    "thinking_budget": (int,),
    "reasoning_effort": (str,),
    "replay_reasoning": (str,),
}
_RANGES: dict[str, tuple[float, float]] = {
    "max_tokens": (1, float("inf")),
    "top_k": (-1, float("inf")),  # -1 (and 0 on most engines): no top-k limit
    "n": (1, float("inf")),
    "top_logprobs": (0, float("inf")),
    "temperature": (0, float("inf")),
    "top_p": (0, 1),
    "min_p": (0, 1),
    "presence_penalty": (-2, 2),
    "frequency_penalty": (-2, 2),
    "repetition_penalty": (0, float("inf")),
    "thinking_budget": (0, float("inf")),
    "priority": (-(2**63), 2**63 - 1),  # vLLM's bounds (a 64-bit integer)
}
REASONING_EFFORTS = ("none", "minimal", "low", "medium", "high")
REASONING_OPTIONS = ("thinking", "thinking_budget", "reasoning_effort")
#: How earlier thoughts go back to the engine (``replay_reasoning=``).
REPLAY_MODES = ("field", "inline", "drop")
_POSITIVE: dict[str, str] = {  # seconds that must be > 0, and what each one limits
    "timeout": "the longest wait for the next bytes of an answer",
    "deadline": "the whole call, queueing and retries included",
}


def check_option(key: str, value: Any) -> None:
    """Refuse one option's value of the wrong type, not finite, or out of range (``timeout=10`` passes).

    Raises:
        InvalidOptions: saying which option is wrong and what it takes.
    """
    types = _TYPES.get(key)
    if types and (not isinstance(value, types) or (bool not in types and isinstance(value, bool))):
        raise InvalidOptions(f"{key} must be {' or '.join(t.__name__ for t in types)}, got {value!r}")
    if isinstance(value, float) and not math.isfinite(value):
        raise InvalidOptions(f"{key}={value!r} is not a finite number (JSON has no {value!r})")
    if key in _POSITIVE and value <= 0:
        raise InvalidOptions(
            f"{key}={value!r} must be a positive number of seconds: it limits "
            f"{_POSITIVE[key]}; leave it unset for the default"
        )
    lo, hi = _RANGES.get(key, (None, None))
    if lo is not None and hi is not None and not lo <= value <= hi:
        raise InvalidOptions(f"{key}={value!r} is out of range [{lo}, {hi}]")


def check_lora_name(name: object) -> str:
    """Refuse a LoRA name that an engine's command line or API would read as something else.

    Names go into engine flags (``--lora-modules name=path``, ``--lora-paths a=x,b=y``), so a name
    that starts with ``-`` (a flag), or holds ``=``, ``,`` or white space (separators), is refused
    on every engine, as is an empty one.

    Args:
        name: the LoRA's name, as given at launch, when loading, or per request.

    Returns:
        The name, unchanged.

    Raises:
        InvalidOptions: the name is not a plain, non-empty string of that kind.
    """
    if not isinstance(name, str) or not name.strip():
        raise InvalidOptions(f"a LoRA name must be a non-empty string, got {name!r}")
    if name.startswith("-") or any(c in name for c in "=,") or any(c.isspace() for c in name):
        raise InvalidOptions(
            f"LoRA name {name!r} cannot be used: names go into engine flags, so they may not start "
            "with '-' or contain '=', ',' or white space. Use letters, digits, '_', '-', '.' or '/', "
            "e.g. lora={'sql': '/adapters/sql'}"
        )
    return name


def make_request(
    prompt: str | None,
    messages: Sequence[Message | Mapping[str, Any]] | None,
    output: OutputSpec | None,
    options: Mapping[str, Any],
    *,
    stream: bool,
) -> Request:
    """Validate the caller's arguments once and freeze them into a :class:`Request`."""
    if (prompt is None) == (messages is None):
        raise InvalidOptions("pass exactly one of a prompt string or messages=[...]")
    if prompt is not None and not isinstance(prompt, str):
        raise InvalidOptions(f"prompt must be a string, got {type(prompt).__name__}")
    unknown = set(options) - _ALL_OPTIONS
    if unknown:
        from difflib import get_close_matches

        hints = [
            f"{u!r} (did you mean {m[0]!r}?)" if (m := get_close_matches(u, _ALL_OPTIONS, 1)) else repr(u)
            for u in sorted(unknown)
        ]
        raise InvalidOptions(f"unknown option(s) {', '.join(hints)}; known: {sorted(_ALL_OPTIONS)}")
    values = {k: v for k, v in options.items() if v is not None}
    for key, value in values.items():
        check_option(key, value)
    if "session" in values and not values["session"]:
        raise InvalidOptions("session must be a non-empty string (e.g. a user or conversation id)")
    if "stop" in values:
        stop = values["stop"]
        if not isinstance(stop, (str, Sequence)):
            raise InvalidOptions(f"stop must be a string or a list of strings, got {stop!r}")
        stop = (stop,) if isinstance(stop, str) else tuple(stop)
        if not all(isinstance(s, str) and s for s in stop):
            raise InvalidOptions("stop must be a non-empty string or a list of them")
        values["stop"] = stop
    if "lora" in values and not values["lora"].strip():
        raise InvalidOptions(
            "lora must name an adapter (e.g. lora='sql'); leave it unset (or None) for the base model"
        )
    if "lora" in values:
        check_lora_name(values["lora"])
    if values.get("top_logprobs") is not None and not values.get("logprobs"):
        values["logprobs"] = True
    if "extra_body" in values:
        if not isinstance(values["extra_body"], Mapping):
            raise InvalidOptions("extra_body must be a mapping of extra request fields")
        check_json(values["extra_body"], "extra_body")
    constraint = to_constraint(output)
    _tool_values(values, constraint, chat=messages is not None)
    _check_reasoning(values, chat=messages is not None)
    return Request(
        prompt=prompt,
        messages=None if messages is None else normalize_messages(messages),
        stream=stream,
        output=constraint,
        **values,
    )


def _check_reasoning(values: Mapping[str, Any], *, chat: bool) -> None:
    """Refuse thinking options on a plain prompt (they act through the chat template) and an
    unknown ``reasoning_effort``."""
    effort = values.get("reasoning_effort")
    if effort is not None and effort not in REASONING_EFFORTS:
        raise InvalidOptions(f"reasoning_effort={effort!r} is not one of {', '.join(REASONING_EFFORTS)}")
    replay = values.get("replay_reasoning")
    if replay is not None and replay not in REPLAY_MODES:
        raise InvalidOptions(
            f"replay_reasoning={replay!r} is not one of {', '.join(REPLAY_MODES)} ('field': the "
            "engine's reasoning field, 'inline': in the content between <think> markers, 'drop')"
        )
    used = [k for k in REASONING_OPTIONS if k in values]
    if used and not chat:
        raise InvalidOptions(
            f"{', '.join(used)} act through the chat template: pass messages=[...] instead of a prompt"
        )


def _tool_values(values: dict[str, Any], output: Constraint | None, *, chat: bool) -> None:
    """Normalize ``tools`` and ``tool_choice`` in ``values`` (in place)."""
    if "tools" not in values:
        if "tool_choice" in values:
            raise InvalidOptions("tool_choice needs tools=[...]")
        return
    tools = values["tools"] = to_tools(values["tools"])
    values["tool_choice"] = to_tool_choice(values.get("tool_choice"), tools)
    if not chat:
        raise InvalidOptions("tools need chat messages: pass messages=[...] instead of a prompt")
    if output is not None and values["tool_choice"].mode != "none":
        raise InvalidOptions(
            "tools= and output= cannot be combined: a forced tool call is already "
            "constrained to the tool's schema; constrain either the answer or the call"
        )


#: Chat messages as callers pass them: typed :class:`Message` dicts or any mappings.
Messages = Sequence[Message | Mapping[str, Any]]
