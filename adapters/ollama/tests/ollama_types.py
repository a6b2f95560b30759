"""Ollama's API contract, written for the tests from Ollama's source: every body the adapter
sends and every answer it reads is checked here.

Source: github.com/ollama/ollama at commit fb30760996871fa9460115c753afd2c60d4ab0f7
(2026-08-21, after v0.32.15), read whole:

* ``api/types.go``: the request and answer types of the routes unillm uses, every field with its
  JSON name and Go type: GenerateRequest, ChatRequest, Message, ToolCall, ToolCallFunction
  (ordered-map arguments), Tool, ToolFunction, ToolFunctionParameters, ToolProperty
  (``PropertyType``: a string or a list of them; ``Properties``: a map of ToolProperty),
  ThinkValue (``true``/``false`` or "high"/"medium"/"low"/"max"), Duration (seconds as a number,
  or a Go duration string), Options with Runner (``FromMap``: an unknown option is dropped with a
  warning, a value of the wrong JSON type is an error), EmbedRequest, PullRequest, CopyRequest,
  TokenLogprob, Logprob, Metrics, DebugInfo, GenerateResponse, ChatResponse, EmbedResponse,
  ProgressResponse, ListResponse, ListModelResponse, ModelDetails; the error body is
  StatusError's ``{"error": ...}``.
* ``server/routes.go``: GenerateHandler and ChatHandler answer 400 when ``top_logprobs`` is
  outside 0..20 and when ``raw`` comes with ``template``, ``system`` or ``context``; a model that
  can think thinks unless ``think`` is false (an unset ``think`` becomes ``true``); a truthy
  ``think`` to a model that cannot think is a 400; "max" is read as "high" by harmony models; the
  streamed content type is ``application/x-ndjson``.

Facts transcribed, not code. What matters most: **Go's JSON decoder drops unknown keys
silently** (and Ollama drops unknown ``options`` with only a server-side warning), so a key the
adapter sends that these structs lack is not a 400 but a silent drop. :func:`dropped_keys` walks
a body the way Go would and lists what it would drop; :func:`check_request` fails on any (the
test's verdict: "Ollama would drop this"), then validates the rest with Go's JSON typing (strict:
a string is no bool, a fraction is no int). The same walk keeps only what ToolFunctionParameters
and ToolProperty hold of a tool's JSON schema, so a ``$ref``, ``minimum`` or ``pattern`` sent in
a tool's parameters is seen as dropped.
"""

from __future__ import annotations

import re
import types
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, StrictStr, field_validator

NDJSON = "application/x-ndjson"
SOURCE_COMMIT = "fb30760996871fa9460115c753afd2c60d4ab0f7"
TOP_LOGPROBS_MAX = 20  # routes.go: "top_logprobs must be between 0 and 20"
THINK_LEVELS = ("high", "medium", "low", "max")  # ThinkValue.UnmarshalJSON
# time.ParseDuration: a sequence of decimal numbers, each with a unit (or a bare 0)
_GO_DURATION = re.compile(r"^[-+]?(0|(\d+(\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h))+$")


class _Go(BaseModel):
    """A Go struct as encoding/json reads it: typed strictly; unknown keys are caught by
    :func:`dropped_keys` (forbidden here too, so a model can never pass one on)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, strict=True)


Number = StrictInt | float  # a Go float32/float64 takes any JSON number
PropertyType = StrictStr | list[StrictStr]  # PropertyType: one type name or a list of them
ThinkValue = StrictBool | Literal["high", "medium", "low", "max"]


def _duration(value: Any) -> Any:
    """Duration.UnmarshalJSON: a number of seconds (negative: forever) or a Go duration string."""
    if isinstance(value, str) and not _GO_DURATION.match(value):
        raise ValueError(f"time: invalid duration {value!r}")
    return value


Duration = Number | StrictStr


class Options(_Go):
    """Options (Runner embedded). The body's ``options`` is a ``map[string]any`` read by
    ``Options.FromMap``: a key not below is dropped with a warning (dropped_keys lists it); a value
    of the wrong JSON type is an error. (Go truncates a fraction given for an int option; unillm's
    options validation never sends one, so ints are modelled as ints.)"""

    # Runner
    num_ctx: StrictInt | None = None
    num_batch: StrictInt | None = None
    num_gpu: StrictInt | None = None
    main_gpu: StrictInt | None = None
    use_mmap: StrictBool | None = None
    num_thread: StrictInt | None = None
    draft_num_predict: StrictInt | None = None
    # runtime options
    num_keep: StrictInt | None = None
    seed: StrictInt | None = None
    num_predict: StrictInt | None = None
    top_k: StrictInt | None = None
    top_p: Number | None = None
    min_p: Number | None = None
    typical_p: Number | None = None
    repeat_last_n: StrictInt | None = None
    temperature: Number | None = None
    repeat_penalty: Number | None = None
    presence_penalty: Number | None = None
    frequency_penalty: Number | None = None
    stop: list[StrictStr] | None = None


class ToolProperty(_Go):
    """ToolProperty: all Ollama keeps of one parameter's schema. ``items`` is ``any`` (kept
    whole); ``properties`` nests more ToolProperty; every other JSON-schema keyword is dropped."""

    anyOf: list[ToolProperty] | None = None
    type: PropertyType | None = None
    items: Any = None
    description: StrictStr | None = None
    enum: list[Any] | None = None
    properties: dict[str, ToolProperty] | None = None
    required: list[StrictStr] | None = None


class ToolFunctionParameters(_Go):
    """ToolFunctionParameters: the top of a tool's parameters schema (``type`` a single string)."""

    type: StrictStr
    defs: Any = Field(None, alias="$defs")
    items: Any = None
    required: list[StrictStr] | None = None
    properties: dict[str, ToolProperty] | None = None


class ToolFunction(_Go):
    name: StrictStr
    description: StrictStr | None = None
    parameters: ToolFunctionParameters


class Tool(_Go):
    type: StrictStr
    items: Any = None
    function: ToolFunction


class ToolCallFunction(_Go):
    index: StrictInt | None = None
    name: StrictStr
    arguments: dict[str, Any] | None = None  # ToolCallFunctionArguments: an ordered JSON object


class ToolCall(_Go):
    id: StrictStr | None = None
    function: ToolCallFunction


class Message(_Go):
    """Message (the role is lower-cased on decoding)."""

    role: StrictStr
    content: StrictStr = ""
    thinking: StrictStr | None = None
    images: list[StrictStr] | None = None  # ImageData ([]byte): base64 in JSON
    tool_calls: list[ToolCall] | None = None
    tool_name: StrictStr | None = None
    tool_call_id: StrictStr | None = None


class _Generation(_Go):
    """What GenerateRequest and ChatRequest share, with routes.go's checks."""

    model: StrictStr
    stream: StrictBool | None = None
    format: Literal["json", ""] | dict[str, Any] | None = None  # json.RawMessage
    keep_alive: Duration | None = None
    options: Options | None = None
    think: ThinkValue | None = None
    truncate: StrictBool | None = None
    shift: StrictBool | None = None
    debug_render_only: StrictBool | None = Field(None, alias="_debug_render_only")
    logprobs: StrictBool | None = None
    top_logprobs: StrictInt | None = Field(None, ge=0, le=TOP_LOGPROBS_MAX)  # routes.go: 400 outside

    @field_validator("keep_alive")
    @classmethod
    def _go_duration(cls, value: Any) -> Any:
        return _duration(value)


class GenerateRequest(_Generation):
    prompt: StrictStr = ""
    suffix: StrictStr = ""
    system: StrictStr = ""
    template: StrictStr = ""
    context: list[StrictInt] | None = None
    raw: StrictBool | None = None
    images: list[StrictStr] | None = None

    def route_problem(self) -> str | None:
        """routes.go's 400 for raw mode with a template, system prompt or context."""
        if self.raw and (self.template or self.system or self.context):
            return "raw mode does not support template, system, or context"
        return None


class ChatRequest(_Generation):
    messages: list[Message] = []
    tools: list[Tool] | None = None

    def route_problem(self) -> str | None:
        return None


class EmbedRequest(_Go):
    model: StrictStr
    input: StrictStr | list[StrictStr] | list[StrictInt] | list[list[StrictInt]]
    keep_alive: Duration | None = None
    truncate: StrictBool | None = None
    dimensions: StrictInt | None = None
    options: Options | None = None

    @field_validator("keep_alive")
    @classmethod
    def _go_duration(cls, value: Any) -> Any:
        return _duration(value)


class PullRequest(_Go):
    model: StrictStr = ""
    insecure: StrictBool | None = None  # deprecated: ignored
    username: StrictStr | None = None  # deprecated: ignored
    password: StrictStr | None = None  # deprecated: ignored
    stream: StrictBool | None = None
    name: StrictStr | None = None  # deprecated: use model


class CopyRequest(_Go):
    source: StrictStr
    destination: StrictStr


class TokenLogprob(_Go):
    token: StrictStr
    logprob: Number
    bytes: list[StrictInt] | None = None


class Logprob(TokenLogprob):
    top_logprobs: list[TokenLogprob] | None = None


class DebugInfo(_Go):
    rendered_template: StrictStr
    image_count: StrictInt | None = None


class Metrics(_Go):
    """Metrics (durations in nanoseconds)."""

    total_duration: StrictInt | None = None
    load_duration: StrictInt | None = None
    prompt_eval_count: StrictInt | None = None
    prompt_eval_duration: StrictInt | None = None
    eval_count: StrictInt | None = None
    eval_duration: StrictInt | None = None


class _Answer(Metrics):
    """What GenerateResponse and ChatResponse share (created_at: an RFC 3339 time)."""

    model: StrictStr
    remote_model: StrictStr | None = None
    remote_host: StrictStr | None = None
    created_at: StrictStr
    done: StrictBool
    done_reason: StrictStr | None = None
    debug_info: DebugInfo | None = Field(None, alias="_debug_info")
    logprobs: list[Logprob] | None = None


class GenerateResponse(_Answer):
    response: StrictStr
    thinking: StrictStr | None = None
    context: list[StrictInt] | None = None
    tool_calls: list[ToolCall] | None = None


class ChatResponse(_Answer):
    message: Message


class EmbedResponse(_Go):
    model: StrictStr
    embeddings: list[list[Number]]
    total_duration: StrictInt | None = None
    load_duration: StrictInt | None = None
    prompt_eval_count: StrictInt | None = None


class ProgressResponse(_Go):
    status: StrictStr
    digest: StrictStr | None = None
    total: StrictInt | None = None
    completed: StrictInt | None = None


class ModelDetails(_Go):
    parent_model: StrictStr = ""
    format: StrictStr = ""
    family: StrictStr = ""
    families: list[StrictStr] | None = None
    parameter_size: StrictStr = ""
    quantization_level: StrictStr = ""
    context_length: StrictInt | None = None
    embedding_length: StrictInt | None = None


class ListModelResponse(_Go):
    name: StrictStr
    model: StrictStr
    remote_model: StrictStr | None = None
    remote_host: StrictStr | None = None
    modified_at: StrictStr
    size: StrictInt
    digest: StrictStr
    details: ModelDetails | None = None
    capabilities: list[StrictStr] | None = None


class ListResponse(_Go):
    models: list[ListModelResponse]


class ErrorResponse(_Go):
    error: StrictStr


REQUESTS: dict[str, type[_Go]] = {
    "/api/generate": GenerateRequest,
    "/api/chat": ChatRequest,
    "/api/embed": EmbedRequest,
    "/api/pull": PullRequest,
    "/api/copy": CopyRequest,
}
ANSWERS: dict[str, type[_Go]] = {
    "/api/generate": GenerateResponse,
    "/api/chat": ChatResponse,
    "/api/embed": EmbedResponse,
    "/api/pull": ProgressResponse,
    "/api/tags": ListResponse,
}


class DroppedKeys(ValueError):
    """Keys of a request body Ollama's Go decoder would drop silently."""

    def __init__(self, path: str, keys: list[str]) -> None:
        self.keys = keys
        super().__init__(
            f"{path}: Ollama would drop {', '.join(keys)} (Go's JSON decoder ignores keys its "
            "structs lack, unknown options only log a warning): the option would be lost silently"
        )


def dropped_keys(model: Any, data: Any, where: str = "") -> list[str]:
    """The keys of ``data`` (dotted paths) that decoding it into ``model`` as Go does would drop.

    Args:
        model: A contract model class or a typing annotation made of them.
        data: The decoded JSON.
        where: The path of ``data`` in the body, as a prefix.
    """
    origin, args = get_origin(model), get_args(model)
    if origin is Annotated:
        return dropped_keys(args[0], data, where)
    if origin in (Union, types.UnionType):
        fitting = [a for a in args if _fits(a, data)]
        return dropped_keys(fitting[0], data, where) if fitting else []
    if origin is list and isinstance(data, list):
        return [k for i, item in enumerate(data) for k in dropped_keys(args[0], item, f"{where}{i}.")]
    if origin is dict and isinstance(data, dict):
        return [k for key, v in data.items() for k in dropped_keys(args[1], v, f"{where}{key}.")]
    if isinstance(model, type) and issubclass(model, BaseModel) and isinstance(data, dict):
        fields = {(f.alias or name): f for name, f in model.model_fields.items()}
        out = []
        for key, value in data.items():
            field = fields.get(key)
            if field is None:
                out.append(f"{where}{key}")
            else:
                out += dropped_keys(field.annotation, value, f"{where}{key}.")
        return out
    return []


def _fits(model: Any, data: Any) -> bool:
    origin = get_origin(model) or model
    if isinstance(origin, type) and issubclass(origin, BaseModel):
        return isinstance(data, dict)
    if origin is list:
        return isinstance(data, list)
    if origin is dict:
        return isinstance(data, dict)
    return data is not None and not isinstance(data, (dict, list))


def decode(path: str, body: Any) -> tuple[_Go, list[str]]:
    """``body`` as Ollama's handler for ``path`` reads it: the keys Go would drop, taken out and
    listed, and the rest validated (pydantic ValidationError: what Ollama answers 400 to).

    Args:
        path: The route (``/api/chat``, ...).
        body: The decoded JSON body.
    """
    model = REQUESTS[path]
    dropped = dropped_keys(model, body)
    request = model.model_validate(_without(body, dropped))
    return request, dropped


def _without(data: Any, dropped: list[str]) -> Any:
    """``data`` without the dotted ``dropped`` paths (a copy)."""
    tree: dict[str, Any] = {}
    for path in dropped:
        node = tree
        *parents, leaf = path.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = None

    def strip(value: Any, node: dict[str, Any]) -> Any:
        if isinstance(value, dict):
            return {
                k: v if k not in node else strip(v, node[k])
                for k, v in value.items()
                if not (k in node and node[k] is None)
            }
        if isinstance(value, list):
            return [strip(v, node[str(i)]) if str(i) in node else v for i, v in enumerate(value)]
        return value

    return strip(data, tree)


def check_request(path: str, body: Any) -> _Go:
    """``body`` held to Ollama's request type for ``path``: DroppedKeys when Go would drop a key,
    pydantic ValidationError when Ollama answers 400.

    Args:
        path: The route.
        body: The decoded JSON body.
    """
    request, dropped = decode(path, body)
    if dropped:
        raise DroppedKeys(path, dropped)
    problem = getattr(request, "route_problem", lambda: None)()
    if problem:
        raise ValueError(f"{path}: Ollama answers 400: {problem}")
    return request


def check_answer(path: str, body: Any) -> BaseModel:
    """An answer (or one stream line) validated as Ollama's response type for ``path``."""
    if isinstance(body, dict) and "error" in body:
        return ErrorResponse.model_validate(body)
    return ANSWERS[path].model_validate(body)
