"""Tools the model may call: normalized once from pydantic classes, JSON-schema definitions or
plain Python functions, and the calls it makes, validated against each tool's schema.

    def get_weather(city: str, unit: Literal["C", "F"] = "C") -> str:
        \"\"\"Current weather in a city.\"\"\"

    r = await llm.generate(messages=msgs, tools=[get_weather], tool_choice="required")
    call = r.tool_calls[0]            # call.name, call.arguments (raw JSON), call.parsed, call.error

Engines without a native way to force a call (vLLM or SGLang started without a tool parser,
MLX in-process) get ``tool_choice="required"`` or a tool's name as a JSON-schema constraint on
the answer (see :func:`forced_call_schema`); unillm turns the constrained text back into a call
(:func:`calls_from_forced_text`, :class:`ForcedCallStream`), so the caller sees the same
``tool_calls`` either way.
"""

from __future__ import annotations

import inspect
import json
import re
import typing
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, TypeAdapter, ValidationError, create_model

from unillm.errors import InvalidOptions
from unillm.results import ToolCall, ToolCallDelta
from unillm.schema_refs import check_refs, local_validator

__all__ = [
    "ForcedCallStream",
    "Tool",
    "ToolCallAccumulator",
    "ToolChoice",
    "calls_from_forced_text",
    "forced_call_schema",
    "to_tool_choice",
    "to_tools",
    "validate_call",
]

_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_MODES = ("auto", "required", "none")
ToolSpec = type[BaseModel] | Mapping[str, Any] | Callable[..., Any]


@dataclass(frozen=True, slots=True)
class Tool:
    """One function the model may call: name, description and the JSON schema of its arguments.

    ``model`` validates the arguments: the pydantic class itself, or one built from a function's
    signature; ``returns_model`` is True when calls should carry that model instance (the tool was
    a pydantic class) rather than a dict of its fields.

        Tool.from_spec(get_weather).to_openai()

    Args:
        name: The function's name, as the model calls it.
        parameters: The JSON schema of its arguments.
        description: What it does, for the model; None sends none.
        model: The pydantic class that validates the arguments; None leaves them a dict.
        returns_model: Calls carry a ``model`` instance instead of a dict.
        function: The Python function it was built from, if any.
        renamed: ``model`` field -> the function's parameter name, for parameters whose names
            pydantic cannot take as fields (a leading ``_``); the schema shows the parameter name.
    """

    name: str
    parameters: Mapping[str, Any]
    description: str | None = None
    model: type[BaseModel] | None = field(default=None, compare=False)
    returns_model: bool = False
    function: Callable[..., Any] | None = field(default=None, compare=False)
    renamed: Mapping[str, str] = field(default_factory=dict, compare=False)

    @classmethod
    def from_spec(cls, spec: ToolSpec) -> Tool:
        """A tool from a pydantic class, an OpenAI or bare JSON definition, or a typed function.

        Args:
            spec: A pydantic class, an OpenAI or bare JSON-schema definition, a typed function, or a
                Tool (returned as is).

        Raises:
            InvalidOptions: A spec of none of those kinds.
        """
        if isinstance(spec, Tool):
            return spec
        if isinstance(spec, type) and issubclass(spec, BaseModel):
            schema = _schema_of(spec, spec.__name__, {k: f.annotation for k, f in spec.model_fields.items()})
            description = schema.pop("description", None) or None
            return cls(_name(spec.__name__), schema, description, spec, returns_model=True)
        if isinstance(spec, Mapping):
            return _from_definition(spec)
        if callable(spec):
            return _from_function(spec)
        raise InvalidOptions(
            f"tools=[...] takes pydantic model classes, JSON-schema function definitions or typed "
            f"functions, not {spec!r}"
        )

    def to_openai(self) -> dict[str, Any]:
        """The OpenAI ``{"type": "function", "function": {...}}`` definition."""
        function: dict[str, Any] = {"name": self.name, "parameters": dict(self.parameters)}
        if self.description:
            function["description"] = self.description
        return {"type": "function", "function": function}


@dataclass(frozen=True, slots=True)
class ToolChoice:
    """How the model may use the tools: ``auto``, ``required``, ``none`` or ``named`` (``name``)."""

    mode: Literal["auto", "required", "none", "named"]
    name: str | None = None

    @property
    def forces_call(self) -> bool:
        """True for ``required`` and a named tool: the answer must be a call."""
        return self.mode in ("required", "named")

    def to_openai(self) -> str | dict[str, Any]:
        """The OpenAI ``tool_choice`` value."""
        if self.mode == "named":
            return {"type": "function", "function": {"name": self.name}}
        return self.mode


def to_tools(specs: Any) -> tuple[Tool, ...]:
    """Normalize ``tools=[...]``; names must be unique."""
    if isinstance(specs, (str, bytes, Mapping)) or not isinstance(specs, Iterable):
        raise InvalidOptions("tools must be a list, e.g. tools=[MyArgs, get_weather]")
    tools = tuple(Tool.from_spec(s) for s in specs)
    if not tools:
        raise InvalidOptions("tools=[] is empty: pass at least one tool, or leave tools out")
    seen: set[str] = set()
    for t in tools:
        if t.name in seen:
            raise InvalidOptions(f"two tools are named {t.name!r}; tool names must be unique")
        seen.add(t.name)
        check_refs(t.parameters, f"tool {t.name!r}")
    return tools


def to_tool_choice(choice: Any, tools: Sequence[Tool]) -> ToolChoice:
    """Normalize ``tool_choice``: "auto" (default), "required", "none", a tool name, an OpenAI
    ``{"type": "function", "function": {"name": ...}}``, or the tool itself (class or function)."""
    if choice is None:
        return ToolChoice("auto")
    name: Any = None
    if isinstance(choice, str):
        if choice in _MODES:
            return ToolChoice(choice)  # type: ignore[arg-type]
        name = choice
    elif isinstance(choice, Mapping):
        function = choice.get("function")
        name = function.get("name") if isinstance(function, Mapping) else choice.get("name")
    else:
        name = next((t.name for t in tools if choice is t.model or choice is t.function), None)
    known = [t.name for t in tools]
    if not isinstance(name, str) or name not in known:
        raise InvalidOptions(
            f"tool_choice={choice!r} is not 'auto', 'required', 'none' or the name of a tool in "
            f"tools ({', '.join(known)})"
        )
    return ToolChoice("named", name)


def validate_call(call_id: str, name: str, arguments: str, tools: Sequence[Tool]) -> ToolCall:
    """A :class:`ToolCall` with ``parsed`` set, or ``error`` saying why the arguments are invalid."""
    tool = next((t for t in tools if t.name == name), None)
    if tool is None:
        return ToolCall(
            id=call_id,
            name=name,
            arguments=arguments,
            error=f"the engine called {name!r}, which is not one of the tools offered",
        )
    try:
        value = json.loads(arguments or "{}")
    except json.JSONDecodeError as e:
        return ToolCall(
            id=call_id,
            name=name,
            arguments=arguments,
            error=f"the arguments are not valid JSON ({e.msg} at {e.pos})",
        )
    except RecursionError:
        return ToolCall(id=call_id, name=name, arguments=arguments, error=_TOO_DEEP)
    if tool.model is not None:
        try:
            instance = tool.model.model_validate(value)
        except ValidationError as e:
            return ToolCall(id=call_id, name=name, arguments=arguments, error=_first_error(e))
        parsed: Any = (
            instance
            if tool.returns_model
            else {tool.renamed.get(k, k): getattr(instance, k) for k in type(instance).model_fields}
        )
        return ToolCall(id=call_id, name=name, arguments=arguments, parsed=parsed)
    from referencing.exceptions import Unresolvable  # on first use: ``connect`` loads none of it

    try:
        problem = next(iter(local_validator(tool.parameters).iter_errors(value)), None)
    except RecursionError:
        return ToolCall(id=call_id, name=name, arguments=arguments, error=_TOO_DEEP)
    except Unresolvable as e:  # refused before sending by to_tools; here for Tools used directly
        return ToolCall(
            id=call_id,
            name=name,
            arguments=arguments,
            error=f"the tool's schema has a $ref unillm cannot resolve: {e}",
        )
    if problem is not None:
        return ToolCall(
            id=call_id,
            name=name,
            arguments=arguments,
            error=f"the arguments do not validate: {problem.message}",
        )
    return ToolCall(id=call_id, name=name, arguments=arguments, parsed=value)


_TOO_DEEP = "the arguments are nested too deeply to read"


def new_call_id() -> str:
    """A call id for engines (or emulation) that do not send one."""
    return f"call_{uuid.uuid4().hex[:24]}"


class ToolCallAccumulator:
    """Joins streamed :class:`ToolCallDelta` s into whole calls (one accumulator per choice).

    acc = ToolCallAccumulator(tools)
    async for d in llm.stream(..., tools=tools): acc.add(d.tool_calls)
    acc.calls()   # == the non-streamed answer's tool_calls

    Args:
        tools: The tools the request offered; their schemas check the finished arguments.
    """

    def __init__(self, tools: Sequence[Tool] = ()) -> None:
        self._tools = tuple(tools)
        self._parts: dict[int, list[str]] = {}
        self._names: dict[int, str] = {}
        self._ids: dict[int, str] = {}

    def add(self, deltas: Iterable[ToolCallDelta] | None) -> None:
        """Take the tool-call deltas of one stream delta (None: nothing).

        Args:
            deltas: One delta's ``tool_calls``; None (no tool call in this delta) is ignored.
        """
        for d in deltas or ():
            self._parts.setdefault(d.index, [])
            if d.id:
                self._ids.setdefault(d.index, d.id)
            if d.name:
                self._names.setdefault(d.index, d.name)
            if d.arguments:
                self._parts[d.index].append(d.arguments)

    def calls(self) -> list[ToolCall]:
        """The calls so far, validated against the tools."""
        return [
            validate_call(
                self._ids.get(i) or new_call_id(),
                self._names.get(i, ""),
                "".join(self._parts[i]),
                self._tools,
            )
            for i in sorted(self._parts)
        ]


# -- forcing a call with a JSON-schema constraint (engines without native forced calls) ----------
def forced_call_schema(tools: Sequence[Tool], choice: ToolChoice) -> dict[str, Any]:
    """The JSON schema that forces a call: a named tool's arguments, or for ``required`` one
    object ``{"name": <tool>, "arguments": {...}}`` per tool (the answer is one call).

    Args:
        tools: The tools the request offers.
        choice: The forced choice (``required`` or a tool's name).
    """
    if choice.mode == "named":
        tool = next(t for t in tools if t.name == choice.name)
        return _object_schema(tool.parameters)
    variants = [
        {
            "type": "object",
            "properties": {"name": {"const": t.name}, "arguments": _object_schema(t.parameters)},
            "required": ["name", "arguments"],
            "additionalProperties": False,
        }
        for t in tools
    ]
    return variants[0] if len(variants) == 1 else {"anyOf": variants}


def calls_from_forced_text(text: str, choice: ToolChoice, tools: Sequence[Tool]) -> list[ToolCall]:
    """The call a forced (constrained) answer spells: its arguments, or ``{"name", "arguments"}``.

    Args:
        text: The answer's text (constrained by :func:`forced_call_schema`).
        choice: The forced choice the constraint was built for.
        tools: The tools the request offered; their schemas check the arguments.
    """
    if choice.mode == "named":
        assert choice.name is not None
        return [validate_call(new_call_id(), choice.name, text.strip(JSON_WHITESPACE), tools)]
    match = _HEAD.match(text)
    if match is None:
        return [
            ToolCall(
                id=new_call_id(),
                name="",
                arguments=text,
                error='the answer is not a {"name": ..., "arguments": ...} call (cut by max_tokens?)',
            )
        ]
    name = json.loads(f'"{match[1]}"')
    arguments = _TAIL.sub("", text[match.end() :], count=1)
    return [validate_call(new_call_id(), name, arguments, tools)]


#: What JSON allows around a value (str.strip would also take U+2028 and the like off a cut string).
JSON_WHITESPACE = " \t\n\r"
_HEAD = re.compile(r'\s*\{\s*"name"\s*:\s*"((?:[^"\\]|\\.)*)"\s*,\s*"arguments"\s*:\s*')
_TAIL = re.compile(r"\s*}\s*$")
_HELD = re.compile(r"[\s}]*$")


class ForcedCallStream:
    """Turns the streamed text of a forced answer into tool-call deltas as it arrives.

    A named tool's text is its arguments, passed on as they come (whitespace around them dropped,
    as the whole answer's are). For ``required`` the text is
    ``{"name": "...", "arguments": {...}}``: the name is sent once known, then the arguments,
    holding back the closing brace of the wrapper until the stream ends.

    Args:
        choice: The forced choice (``required`` or a tool's name) the stream answers.
    """

    def __init__(self, choice: ToolChoice) -> None:
        self._choice = choice
        self._buffer = ""
        self._id = new_call_id()
        self._started = False
        self._sent = 0  # characters of the arguments already sent (required mode)
        self._head_end: int | None = None

    def feed(self, text: str) -> list[ToolCallDelta]:
        """Deltas for the next piece of answer text.

        Args:
            text: The next streamed piece of the answer.
        """
        if self._choice.mode == "named":  # the arguments, as the whole answer strips them
            out = []
            if not self._started:
                self._started = True
                out.append(ToolCallDelta(index=0, id=self._id, name=self._choice.name, arguments=""))
            self._buffer += text
            if not self._sent:  # nothing sent yet: leading whitespace is not part of them
                self._buffer = self._buffer.lstrip(JSON_WHITESPACE)
            arguments = self._buffer.rstrip(JSON_WHITESPACE)  # trailing whitespace waits for more
            if arguments:
                out.append(ToolCallDelta(index=0, arguments=arguments))
                self._sent += len(arguments)
                self._buffer = self._buffer[len(arguments) :]
            return [_merge(out)] if out else []
        self._buffer += text
        out = []
        if self._head_end is None:
            match = _HEAD.match(self._buffer)
            if match is None or match.end() == len(self._buffer):  # more whitespace may follow
                return []
            self._head_end = match.end()
            out.append(ToolCallDelta(index=0, id=self._id, name=json.loads(f'"{match[1]}"'), arguments=""))
        body = self._buffer[self._head_end :]
        ready = len(body) - len(_HELD.search(body)[0])  # type: ignore[index]
        if ready > self._sent:
            out.append(ToolCallDelta(index=0, arguments=body[self._sent : ready]))
            self._sent = ready
        return [_merge(out)] if out else []

    def finish(self) -> list[ToolCallDelta]:
        """What was held back, without the wrapper's closing brace."""
        if self._choice.mode == "named" or self._head_end is None:
            return []
        body = _TAIL.sub("", self._buffer[self._head_end :], count=1)
        rest = body[self._sent :]
        self._sent = len(body)
        return [ToolCallDelta(index=0, arguments=rest)] if rest else []


def _merge(deltas: list[ToolCallDelta]) -> ToolCallDelta:
    first = deltas[0]
    return ToolCallDelta(
        index=first.index, id=first.id, name=first.name, arguments="".join(d.arguments for d in deltas)
    )


# -- building tools -----------------------------------------------------------------------------
def _name(name: Any) -> str:
    if not isinstance(name, str) or not _NAME.match(name):
        raise InvalidOptions(f"tool name {name!r} must be 1-64 letters, digits, '_' or '-'")
    return name


def _object_schema(schema: Mapping[str, Any]) -> dict[str, Any]:
    return dict(schema) if schema else {"type": "object", "properties": {}}


def _from_definition(spec: Mapping[str, Any]) -> Tool:
    function = spec.get("function") if spec.get("type") == "function" else spec
    if not isinstance(function, Mapping) or "name" not in function:
        raise InvalidOptions(
            'a tool definition needs {"type": "function", "function": {"name": ..., "parameters": '
            f'{{...}}}}}} or {{"name": ..., "parameters": {{...}}}}, got {spec!r}'
        )
    parameters = function.get("parameters") or {"type": "object", "properties": {}}
    if not isinstance(parameters, Mapping):
        raise InvalidOptions(f"tool {function['name']!r}: parameters must be a JSON schema object")
    from jsonschema import validators
    from jsonschema.exceptions import SchemaError

    try:
        validators.validator_for(parameters).check_schema(parameters)
    except SchemaError as e:
        raise InvalidOptions(
            f"tool {function['name']!r}: parameters are not a valid JSON schema: {e.message}"
        ) from None
    except RecursionError:
        raise InvalidOptions(
            f"tool {function['name']!r}: parameters are nested too deeply to check"
        ) from None
    description = function.get("description")
    return Tool(
        _name(function["name"]),
        dict(parameters),
        description if isinstance(description, str) and description else None,
    )


def _from_function(fn: Callable[..., Any]) -> Tool:
    name = getattr(fn, "__name__", None)
    try:
        signature = inspect.signature(fn)
        hints = typing.get_type_hints(fn, include_extras=True)  # Annotated[..., Field(...)] kept
    except (TypeError, ValueError, NameError) as e:
        raise InvalidOptions(f"tool {name!r}: cannot read its signature ({e})") from None
    fields: dict[str, Any] = {}
    renamed: dict[str, str] = {}
    for p in signature.parameters.values():
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            raise InvalidOptions(
                f"tool {name!r}: *args/**kwargs cannot become a JSON schema; name every parameter"
            )
        if p.name not in hints:
            raise InvalidOptions(
                f"tool {name!r}: parameter {p.name!r} needs a type hint (e.g. {p.name}: str)"
            )
        hint, key = hints[p.name], p.name
        if key.startswith("_"):  # pydantic keeps such names private: a field under another name
            key = _free_key(p.name, signature.parameters)
            renamed[key], hint = p.name, Annotated[hint, Field(alias=p.name)]
        fields[key] = (hint, ... if p.default is p.empty else p.default)
    tool = _name(name)
    hinted = {p: hints[p] for p in signature.parameters}
    model = _built(lambda: create_model(tool, **fields), tool, hinted)
    schema = _schema_of(model, tool, hinted)
    doc = inspect.getdoc(fn)
    description = doc.split("\n\n", 1)[0].strip() if doc else None
    return Tool(tool, schema, description or None, model, returns_model=False, function=fn, renamed=renamed)


def _free_key(name: str, taken: Mapping[str, Any]) -> str:
    """A field name for parameter ``name`` (leading ``_``) that no other parameter has."""
    key = f"arg{name}"
    while key in taken:
        key += "_"
    return key


def _schema_of(model: type[BaseModel], tool: str, hints: Mapping[str, Any]) -> dict[str, Any]:
    """The JSON schema of a tool's arguments model, without its title."""
    schema = dict(_built(model.model_json_schema, tool, hints))
    schema.pop("title", None)
    return schema


def _built(make: Callable[[], Any], tool: str, hints: Mapping[str, Any]) -> Any:
    """``make()``, its failure an InvalidOptions naming the parameter whose type hint caused it.

    Any exception: a type's own schema hooks may raise anything, and the caller gets one error.
    """
    try:
        return make()
    except Exception as e:
        why = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        for parameter, hint in hints.items():
            if not _has_schema(hint):
                raise InvalidOptions(
                    f"tool {tool!r}: parameter {parameter!r} has a type ({_hint_name(hint)}) that "
                    f"cannot become a JSON schema ({why}); use JSON types (str, int, float, bool, "
                    "lists, dicts, Literal, pydantic models)"
                ) from None
        raise InvalidOptions(f"tool {tool!r}: its arguments cannot become a JSON schema ({why})") from None


def _has_schema(hint: Any) -> bool:
    try:
        TypeAdapter(hint).json_schema()
    except Exception:  # the same reasons as in _built
        return False
    return True


def _hint_name(hint: Any) -> str:
    if isinstance(hint, type):
        return (
            hint.__qualname__ if hint.__module__ == "builtins" else f"{hint.__module__}.{hint.__qualname__}"
        )
    return repr(hint)


def _first_error(e: ValidationError) -> str:
    err = e.errors()[0]
    where = ".".join(map(str, err["loc"])) or "arguments"
    return f"the arguments do not validate: {where}: {err['msg']}"
