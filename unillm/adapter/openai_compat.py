"""The OpenAI-compatible wire mapping every engine shares, written once.

Engine adapters subclass :class:`OpenAICompatAdapter` and override only what differs:
where constraints go, which extra sampling fields exist, how LoRA is named.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

from unillm.adapter.base import Adapter, EngineInfo, HttpCall
from unillm.adapter.http_errors import error_for_status, error_message, raise_stream_error
from unillm.adapter.reasoning import (
    ReasoningSplitter,
    answer_parts,
    check_constraint_after_thinking,
    reasoning_field,
    replay_messages,
    thinking_fields,
)
from unillm.adapter.sampling import sampling_fields
from unillm.capabilities import Feature
from unillm.embeddings import EmbedBatch, EmbedRequest, TokenizeRequest, float_vectors
from unillm.errors import (
    SHAPE_ERRORS,
    MalformedResponse,
    UnillmError,
    UnsupportedFeature,
    clip_message,
    malformed,
)
from unillm.options import Choice, Constraint, Grammar, JsonSchema, Regex, Request
from unillm.results import (
    Completion,
    CompletionChoice,
    Delta,
    LoraInfo,
    Timings,
    TokenLogprob,
    Tokens,
    ToolCall,
    ToolCallDelta,
    TopLogprob,
    Usage,
)
from unillm.tools import (
    ForcedCallStream,
    Tool,
    ToolChoice,
    calls_from_forced_text,
    forced_call_schema,
    new_call_id,
    validate_call,
)

_Choice = CompletionChoice[Any]  # parametrise once: pydantic rebuilds collected generics
_Completion = Completion[Any]
CHAT_PATH = "/v1/chat/completions"
COMPLETIONS_PATH = "/v1/completions"
EMBEDDINGS_PATH = "/v1/embeddings"
TOKENIZE_PATH = "/tokenize"
_ZERO = Timings(total_s=0.0)


class OpenAICompatAdapter(Adapter):
    """Shared mapping for engines that speak the OpenAI completions and chat APIs."""

    #: Non-OpenAI sampling options the engine reads under unillm's names (e.g. EXTRA_SAMPLING).
    extra_sampling_fields: ClassVar[tuple[str, ...]] = ()
    #: The thinking options (``thinking``, ``thinking_budget``, ``reasoning_effort``) the engine
    #: reads; the others are refused before sending.
    thinking_options: ClassVar[tuple[str, ...]] = ()
    #: Whether the server applies ``output=`` and forced tool calls to the answer after the
    #: thought (True: launched with a reasoning parser), from the first token (False), or unknown
    #: (None: connected). ``thinking=True`` with a constraint is refused when False.
    constrains_after_thinking: bool | None = None
    #: Whether the server schedules by ``priority`` lower first (True: launched with
    #: ``scheduling="priority"``), in arrival order (False), or unknown (None: connected).
    #: ``priority=`` is refused when False: the engine would take the field and ignore it.
    priority_scheduling: bool | None = None

    # -- hooks for subclasses ------------------------------------------------------------
    def model_field(self, request: Request, info: EngineInfo) -> str:
        """The ``model`` field: the served model, or the LoRA name when one is asked for.

        Args:
            request: The validated request (prompt or messages, options, output constraint).
            info: What discovery learnt about the engine (model, version, limits).
        """
        return request.lora or info.model

    def constraint_fields(self, output: Constraint, info: EngineInfo) -> dict[str, Any]:
        """Body fields that enforce ``output`` (capabilities have already been checked).

        Args:
            output: The constraint to enforce (JsonSchema, Regex, Choice or Grammar).
            info: What discovery learnt about the engine (model, version, limits).
        """
        raise NotImplementedError

    def extra_sampling(self, request: Request) -> dict[str, Any]:
        """Body fields for non-OpenAI sampling options (default: ``extra_sampling_fields``).

        Args:
            request: The validated request (prompt or messages, options, output constraint).
        """
        return sampling_fields(request, self.extra_sampling_fields) if self.extra_sampling_fields else {}

    def forces_by_constraint(self, request: Request, info: EngineInfo) -> bool:
        """True when a forced call (``required`` / a name) goes out as a JSON-schema constraint
        that unillm turns back into a call, because the engine cannot force calls itself.

        Args:
            request: The validated request (prompt or messages, options, output constraint).
            info: What discovery learnt about the engine (model, version, limits).
        """
        return False

    def forced_call_after_a_thought(self, request: Request) -> bool:
        """True when a forced call (``required`` / a name) may follow a thought on a server whose
        reasoning parser ends the thought (``constrains_after_thinking``) and thinking is not off.

        vLLM's and SGLang's own forcing did not hold there (``benchmarks/agents.py``: 118 of 200
        forced calls valid after a thought on vLLM 0.32, 0 of 50 on SGLang 0.5.23), while a JSON
        schema binds the answer after the thought (every one valid): their adapters force such a
        call by constraint (:meth:`forces_by_constraint`).

        Args:
            request: The validated request.
        """
        choice = request.tool_choice
        return (
            self.constrains_after_thinking is True
            and choice is not None
            and choice.forces_call
            and request.thinking is not False
        )

    def no_tool_parser(self, info: EngineInfo, why: str, forced_with: str) -> UnsupportedFeature:
        """The refusal of ``tool_choice="auto"`` on a server started without a tool parser (it
        cannot read calls out of free text): launch with one, or force the call.

        Args:
            info: What discovery learnt about the engine (its version is named).
            why: What the server does without a parser (answers 400, answers with text).
            forced_with: How unillm forces a required or named call there ("a JSON schema").
        """
        return UnsupportedFeature(
            self.name,
            Feature.TOOL_CHOICE_AUTO.value,
            version=info.version,
            why=why,
            alternative="Launch with tool_parser='hermes' (or your model's parser), or pass "
            f"tool_choice='required' or a tool's name, which unillm forces with {forced_with}",
        )

    def tool_fields(self, request: Request, info: EngineInfo) -> dict[str, Any]:
        """Body fields for ``tools`` / ``tool_choice`` (capabilities have already been checked).

        Args:
            request: The validated request (prompt or messages, options, output constraint).
            info: What discovery learnt about the engine (model, version, limits).
        """
        if not request.tools or request.tool_choice is None:
            return {}
        tools = [t.to_openai() for t in request.tools]
        choice = request.tool_choice
        if self.forces_by_constraint(request, info):
            schema = JsonSchema(forced_call_schema(request.tools, choice), name="tool_call")
            return {"tools": tools, "tool_choice": "none", **self.constraint_fields(schema, info)}
        return {"tools": tools, "tool_choice": choice.to_openai()}

    # -- requests --------------------------------------------------------------------------
    def build(self, request: Request, info: EngineInfo) -> HttpCall:
        check_constraint_after_thinking(
            request, self.name, self.constrains_after_thinking, version=info.version
        )
        check_priority(request, self.name, self.priority_scheduling, version=info.version)
        chat = request.messages is not None
        body: dict[str, Any] = {"model": self.model_field(request, info)}
        if chat:
            body["messages"] = replay_messages(
                request.messages or (),
                request.replay_reasoning,
                self.replay_field(info),
                engine=self.name,
                version=info.version,
            )
        else:
            body["prompt"] = request.prompt
        for key in (
            "max_tokens",
            "temperature",
            "top_p",
            "seed",
            "presence_penalty",
            "frequency_penalty",
            "n",
            "priority",  # vLLM's and SGLang's field; engines without one refuse it (capabilities)
        ):
            value = getattr(request, key)
            if value is not None:
                body[key] = value
        if request.stop is not None:
            body["stop"] = list(request.stop)
        if request.logprobs:
            if chat:
                body["logprobs"] = True
                if request.top_logprobs is not None:
                    body["top_logprobs"] = request.top_logprobs
            else:
                body["logprobs"] = request.top_logprobs or 0
        body.update(self.extra_sampling(request))
        if request.output is not None:
            body.update(self.constraint_fields(request.output, info))
        body.update(self.tool_fields(request, info))
        body.update(thinking_fields(request, self.name, self.thinking_options))
        if request.stream:
            body["stream"] = True
            body["stream_options"] = {"include_usage": True}
        if request.extra_body:
            body.update(request.extra_body)
        return HttpCall("POST", CHAT_PATH if chat else COMPLETIONS_PATH, body, request.stream)

    # -- answers ---------------------------------------------------------------------------
    def parse(
        self, body: Any, request: Request, info: EngineInfo, call: HttpCall | None = None
    ) -> Completion[Any]:
        forced = request.tool_choice if self.forces_by_constraint(request, info) else None
        chat = is_chat(call, request)
        try:
            raw_choices = choices_of(body, self.name)
            choices = []
            for i, c in enumerate(raw_choices):
                text = (
                    answer_text(
                        (c["message"] or {}).get("content"), self.name, "message content", nullable=True
                    )
                    if chat
                    else answer_text(c["text"], self.name, "choice text")
                )
                choice = _Choice(
                    index=c.get("index", i),
                    text=text,
                    finish_reason=c.get("finish_reason"),
                    logprobs=parse_logprobs(c.get("logprobs")),
                )
                if chat:  # the thought first: a call forced by a constraint is read from the answer
                    with_reasoning(choice, reasoning_field(c["message"]))
                message = c.get("message") or {}
                choices.append(with_tool_calls(choice, message.get("tool_calls"), request.tools, forced))
            choices.sort(key=lambda c: c.index)
            return _Completion(
                choices=choices,
                usage=parse_usage(body.get("usage")),
                timings=_ZERO,
                engine=self.name,
                engine_version=info.version,
                model=body.get("model") or info.model,
                id=body.get("id") if isinstance(body.get("id"), str) else None,
            )
        except UnillmError:
            raise
        except SHAPE_ERRORS as e:
            raise malformed(self.name, "completion body", e) from e

    def decoder(
        self, request: Request, info: EngineInfo, call: HttpCall | None = None
    ) -> OpenAIStreamDecoder:
        forced = request.tool_choice if self.forces_by_constraint(request, info) else None
        return OpenAIStreamDecoder(self.name, forced=forced, chat=is_chat(call, request))

    def parse_error(
        self, status: int, body: bytes, request: Request | None, info: EngineInfo | None
    ) -> UnillmError:
        message = error_message(body)
        return error_for_status(self.name, status, message, request)


def structured_output(output: Constraint, *, lark_key: str = "grammar") -> tuple[str, Any]:
    """The key and value of ``output`` in vLLM's ``structured_outputs`` layout (``json``,
    ``regex``, ``choice``, ``grammar``; a Lark grammar under ``lark_key``), which unillm's
    in-process engines read too::

        key, value = structured_output(unillm.Regex("a+"))    # ("regex", "a+")

    Args:
        output: The constraint to send (JsonSchema, Regex, Choice or Grammar).
        lark_key: The key a Lark grammar goes under.

    Returns:
        The ``structured_outputs`` key and its value.
    """
    if isinstance(output, JsonSchema):
        return "json", dict(output.schema)
    if isinstance(output, Regex):
        return "regex", output.pattern
    if isinstance(output, Choice):
        return "choice", list(output.options)
    assert isinstance(output, Grammar)
    return (lark_key if output.syntax == "lark" else "grammar"), output.text


class RuntimeLoraEndpoints:
    """Runtime LoRA calls in vLLM's layout (``/v1/load_lora_adapter`` ...; adapters listed in
    ``/v1/models`` with a ``parent``), also served by unillm's in-process engines."""

    name: ClassVar[str]

    def load_lora(self, name: str, path: str) -> HttpCall:
        """The vLLM-style ``POST /v1/load_lora_adapter`` call.

        Args:
            name: The name requests will use (``lora=name``).
            path: The adapter's folder on the engine's host.
        """
        return HttpCall("POST", "/v1/load_lora_adapter", {"lora_name": name, "lora_path": path})

    def unload_lora(self, name: str) -> HttpCall:
        """The vLLM-style ``POST /v1/unload_lora_adapter`` call.

        Args:
            name: The adapter's name, as loaded.
        """
        return HttpCall("POST", "/v1/unload_lora_adapter", {"lora_name": name})

    def list_loras(self) -> HttpCall:
        return HttpCall("GET", "/v1/models")

    def parse_loras(self, body: Any) -> list[LoraInfo]:
        """The adapters in a ``/v1/models`` answer (the cards with a ``parent``).

        Args:
            body: The decoded ``/v1/models`` answer.

        Raises:
            MalformedResponse: The answer does not have the OpenAI models layout.
        """
        try:
            return [
                LoraInfo(name=m["id"], path=m.get("root"))
                for m in (body or {}).get("data", [])
                if m.get("parent")
            ]
        except SHAPE_ERRORS as e:
            raise malformed(self.name, "/v1/models answer", e) from e


class OpenAIEmbeddings:
    """Embeddings through the OpenAI ``/v1/embeddings`` API (vLLM's pooling runner, SGLang)."""

    name: ClassVar[str]

    def embed_call(self, request: EmbedRequest, info: EngineInfo) -> HttpCall:
        """The ``POST /v1/embeddings`` call for one batch (float encoding).

        Args:
            request: One batch of texts to embed, with the requested dimensions.
            info: What discovery learnt about the engine (model, version, limits).
        """
        body: dict[str, Any] = {"model": info.model, "input": list(request.texts), "encoding_format": "float"}
        if request.dimensions is not None:
            body["dimensions"] = request.dimensions
        return HttpCall("POST", EMBEDDINGS_PATH, body)

    def parse_embeddings(self, body: Any, request: EmbedRequest, info: EngineInfo) -> EmbedBatch:
        """The vectors, in input order, and the prompt tokens of a ``/v1/embeddings`` answer.

        Args:
            body: The engine's decoded JSON answer.
            request: One batch of texts to embed, with the requested dimensions.
            info: What discovery learnt about the engine (model, version, limits).

        Raises:
            MalformedResponse: Indices missing or repeated, or rows that are not number lists.
        """
        try:
            data = body["data"]
            indices = [d["index"] for d in data]
            if any(type(i) is not int for i in indices) or sorted(indices) != list(range(len(data))):
                raise MalformedResponse(
                    f"{self.name}: embedding indices {clip_message(str(indices), 200)} are not "
                    f"0 to {len(data) - 1}, each once (a vector would be lost or misplaced)"
                )
            data = sorted(data, key=lambda d: d["index"])
            vectors = float_vectors([d["embedding"] for d in data], self.name)
            usage = parse_usage(body.get("usage"))
        except UnillmError:
            raise
        except SHAPE_ERRORS as e:
            raise malformed(self.name, "embeddings body", e) from e
        return EmbedBatch(vectors=vectors, prompt_tokens=usage.prompt_tokens)


class TokenizeEndpoint:
    """Token counting through vLLM's ``/tokenize`` layout (also SGLang's, and unillm's in-process MLX)."""

    name: ClassVar[str]
    replay_field: Callable[[EngineInfo], str | None]  # the adapter's (Adapter.replay_field)

    def tokenize_call(self, request: TokenizeRequest, info: EngineInfo) -> HttpCall:
        """The ``POST /tokenize`` call (messages rendered with the generation prompt).

        Args:
            request: The text or chat messages to tokenize.
            info: What discovery learnt about the engine (model, version, limits).
        """
        body: dict[str, Any] = {"model": info.model}
        if request.messages is not None:
            messages = replay_messages(
                request.messages,
                request.replay_reasoning,
                self.replay_field(info),
                engine=self.name,
                version=info.version,
            )
            body.update(messages=messages, add_generation_prompt=True)
            if request.tools:
                body["tools"] = [t.to_openai() for t in request.tools]
        else:
            body["prompt"] = request.text
        return HttpCall("POST", TOKENIZE_PATH, body)

    def parse_tokens(self, body: Any, request: TokenizeRequest, info: EngineInfo) -> Tokens:
        """The token ids (and ``max_model_len``) of a ``/tokenize`` answer.

        Args:
            body: The engine's decoded JSON answer.
            request: The text or chat messages to tokenize.
            info: What discovery learnt about the engine (model, version, limits).

        Raises:
            MalformedResponse: The answer has no ``tokens`` list.
        """
        try:
            ids, limit = body["tokens"], body.get("max_model_len")
            return Tokens(ids=ids, max_model_len=limit, engine=self.name, model=info.model)
        except SHAPE_ERRORS as e:
            raise malformed(self.name, "tokenize body", e) from e


class OpenAIStreamDecoder:
    """Decodes OpenAI-style SSE chunks (chat or completions) into deltas.

    ``forced`` (a forced tool choice the engine received as a JSON-schema constraint) turns the
    streamed text into tool-call deltas. ``chat`` says which API streams (chat: ``delta``
    objects; completions: ``text``); None reads it from each chunk.

    Args:
        engine: The adapter's name, for error messages.
        forced: The forced tool choice sent as a JSON-schema constraint; None: none.
        chat: True for the chat API, False for completions; None reads it from each chunk.
    """

    __slots__ = ("_chat", "_engine", "_finish", "_forced", "_forced_choice", "_reasoning", "_tools", "done")

    def __init__(self, engine: str, *, forced: ToolChoice | None = None, chat: bool | None = None) -> None:
        self._engine = engine
        self._chat = chat
        self._finish: dict[int, str] = {}
        self._tools = ToolDeltas()
        self._forced: dict[int, ForcedCallStream] | None = {} if forced is not None else None
        self._forced_choice = forced
        self._reasoning = StreamedReasoning()
        self.done = False

    def feed(self, data: str) -> list[Delta]:
        """Decode one SSE event's data; ``[DONE]`` ends the stream.

        Args:
            data: One SSE event's ``data`` payload.

        Returns:
            The deltas it carries (possibly none).

        Raises:
            EngineError: The event reports an engine error (MalformedResponse: it is not a chunk).
        """
        if data == "[DONE]":
            self.done = True
            return []
        chunk = decode_event(self._engine, data)
        raise_stream_error(self._engine, chunk)
        try:
            return self._deltas(chunk)
        except UnillmError:
            raise
        except SHAPE_ERRORS as e:
            raise malformed(self._engine, "stream chunk", e) from e

    def _deltas(self, chunk: dict[str, Any]) -> list[Delta]:
        deltas = []
        for c in chunk.get("choices") or ():
            index = c.get("index", 0)
            delta = c.get("delta") if self._chat is not False else None
            finish = c.get("finish_reason")
            thought = ""
            if delta is not None:
                text = answer_text(delta.get("content"), self._engine, "delta content", nullable=True)
                calls = self._tools.feed(index, delta.get("tool_calls"))
                # the thought first: a call forced by a constraint is read from the answer
                thought, text = self._reasoning.feed(index, text, reasoning_field(delta), last=bool(finish))
            else:
                text, calls = answer_text(c.get("text", ""), self._engine, "choice text"), None
            if self._forced is not None:
                assert self._forced_choice is not None
                stream = self._forced.setdefault(index, ForcedCallStream(self._forced_choice))
                calls = (calls or []) + stream.feed(text) + (stream.finish() if finish else [])
                calls, text = calls or None, ""
                if calls:
                    self._tools.seen.add(index)
            if finish:
                finish = self._tools.finish_reason(index, finish)
                self._finish[index] = finish
            said = choice_delta(index, text, thought, finish, parse_logprobs(c.get("logprobs")), calls)
            if said is not None:
                deltas.append(said)
        usage = chunk.get("usage")
        if usage and not chunk.get("choices"):
            deltas.append(Delta(finish_reason=self._finish.get(0), usage=parse_usage(usage)))
        return deltas


class ToolDeltas:
    """Normalizes streamed OpenAI ``tool_calls`` deltas: each call's first delta carries its id
    (made up when the engine sends none) and name, later ones only argument fragments."""

    __slots__ = ("_started", "seen")

    def __init__(self) -> None:
        self._started: set[tuple[int, int]] = set()
        self.seen: set[int] = set()  # choices that produced tool calls

    def feed(self, choice: int, raw: Any) -> list[ToolCallDelta] | None:
        """Deltas for one chunk's ``delta.tool_calls`` of choice ``choice`` (None: no calls).

        Args:
            choice: The choice's index.
            raw: The chunk's ``delta.tool_calls`` as the engine sent it.
        """
        if not raw:
            return None
        out = []
        for position, call in enumerate(raw):
            index = call.get("index", position)
            function = call.get("function") or {}
            arguments = function.get("arguments") or ""
            if not isinstance(arguments, str):
                arguments = json.dumps(arguments)
            key = (choice, index)
            if key in self._started:
                if arguments:
                    out.append(ToolCallDelta(index=index, arguments=arguments))
                continue
            self._started.add(key)
            out.append(
                ToolCallDelta(
                    index=index,
                    id=call.get("id") or new_call_id(),
                    name=function.get("name") or "",
                    arguments=arguments,
                )
            )
        self.seen.add(choice)
        return out or None

    def finish_reason(self, choice: int, finish: str) -> str:
        """``"tool_calls"`` for a choice that called tools and stopped (engines differ here).

        Args:
            choice: The choice's index.
            finish: The finish reason the engine sent.
        """
        return "tool_calls" if choice in self.seen and finish == "stop" else finish


def choice_delta(
    index: int,
    text: str,
    reasoning: str,
    finish: str | None,
    logprobs: list[TokenLogprob] | None,
    calls: list[ToolCallDelta] | None,
) -> Delta | None:
    """One streamed choice's delta; None when the chunk says nothing for it (no text, thought,
    finish reason, logprobs or call).

    Args:
        index: The choice's index.
        text: The answer's new text.
        reasoning: The thought's new text.
        finish: The unified finish reason, once the choice ends.
        logprobs: The new tokens' logprobs.
        calls: The tool-call pieces the chunk adds.
    """
    if not (text or reasoning or finish or logprobs or calls):
        return None
    return Delta(
        index=index, text=text, reasoning=reasoning, finish_reason=finish, logprobs=logprobs, tool_calls=calls
    )


def with_tool_calls(
    choice: CompletionChoice[Any], raw: Any, tools: tuple[Tool, ...] | None, forced: ToolChoice | None = None
) -> CompletionChoice[Any]:
    """``choice`` with its tool calls: from the engine's ``tool_calls``, or (``forced``) from the
    text of an answer constrained to a call; the finish reason of a call is ``"tool_calls"``.

    Args:
        choice: The parsed choice, without tool calls yet.
        raw: The engine's ``message.tool_calls`` (None: none).
        tools: The tools the request offered; their schemas check the arguments.
        forced: The forced tool choice sent as a constraint; None reads ``raw``.
    """
    calls: list[ToolCall] = []
    if forced is not None and tools:
        calls, choice.text = calls_from_forced_text(choice.text, forced, tools), ""
    elif raw:
        for call in raw:
            function = call.get("function") or {}
            arguments = function.get("arguments")
            if not isinstance(arguments, str):
                arguments = json.dumps(arguments if arguments is not None else {})
            calls.append(
                validate_call(
                    call.get("id") or new_call_id(), str(function.get("name") or ""), arguments, tools or ()
                )
            )
    if calls:
        choice.tool_calls = calls
        if choice.finish_reason == "stop":
            choice.finish_reason = "tool_calls"
    return choice


def with_reasoning(choice: CompletionChoice[Any], parsed: str | None) -> CompletionChoice[Any]:
    """``choice`` with its thought apart from its answer: the engine's reasoning field
    (``parsed``), else the thought split off the text by the chat template's markers.

    Args:
        choice: The parsed choice, its text still whole.
        parsed: The engine's reasoning field; None: the engine sent none.
    """
    choice.reasoning, choice.text = answer_parts(choice.text, parsed)
    return choice


class StreamedReasoning:
    """Per choice of one stream: the engine's reasoning field passed on, or (no field) the
    thought split off the text, a marker split across chunks held back."""

    __slots__ = ("_splitters",)

    def __init__(self) -> None:
        self._splitters: dict[int, ReasoningSplitter] = {}

    def feed(
        self, index: int, text: str, parsed: str | None = None, *, last: bool = False
    ) -> tuple[str, str]:
        """``(reasoning, answer)`` to send on for one chunk of choice ``index``.

        Args:
            index: The choice's index.
            text: The chunk's answer text as the engine sent it.
            parsed: The chunk's reasoning field; None: it had none.
            last: The chunk ends the choice (it carries the finish reason): what was held back
                is sent on too.
        """
        splitter = self._splitters.setdefault(index, ReasoningSplitter())
        field = splitter.parsed(parsed) if parsed else ""
        thought, answer = splitter.feed(text) if text else ("", "")
        if last:
            held_thought, held_answer = self._splitters.pop(index).finish()
            thought, answer = thought + held_thought, answer + held_answer
        return field + thought, answer


def choices_of(body: Any, engine: str) -> list[Any]:
    """The ``choices`` list of an OpenAI-layout answer; MalformedResponse when it has none.

    Args:
        body: The engine's decoded JSON answer.
        engine: The adapter's name, for the error message.

    Raises:
        MalformedResponse: ``choices`` is not a non-empty list.
    """
    choices = body["choices"]
    if not isinstance(choices, list) or not choices:
        raise MalformedResponse(
            f"{engine}: the answer holds no choices (choices={clip_message(repr(choices), 100)})"
        )
    return choices


def answer_text(value: Any, engine: str, where: str, *, nullable: bool = False) -> str:
    """The text field of an answer as a string, ``null`` as "" where the wire allows it (a chat
    message's or delta's ``content``: a message with tool calls, a role-only delta)::

        answer_text(message.get("content"), "vllm", "message content", nullable=True)

    Args:
        value: The field as the engine sent it.
        engine: The adapter's name, for the error message.
        where: The field, for the error message (e.g. "choice text").
        nullable: ``null`` is no text ("") rather than malformed.

    Raises:
        MalformedResponse: The field is no string (nor ``null`` where allowed): a number, an
            object or a list, which would otherwise reach the caller as its Python repr.
    """
    if isinstance(value, str):
        return value
    if value is None and nullable:
        return ""
    raise MalformedResponse(f"{engine}: the answer's {where} is {_json_kind(value)}, not text")


def _json_kind(value: Any) -> str:
    """What a decoded JSON value is, in JSON's words."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, dict):
        return "an object"
    return "a list" if isinstance(value, list) else type(value).__name__


def check_priority(request: Request, engine: str, scheduled: bool | None, *, version: str | None) -> None:
    """Refuse ``priority=`` on a server known not to schedule by it (lower first).

    Args:
        request: The validated request.
        engine: The adapter's name, for the refusal.
        scheduled: True: the server schedules by priority, lower first; False: it does not (it
            would take the field and serve in arrival order); None: unknown, nothing refused.
        version: The engine's version, for the refusal.

    Raises:
        UnsupportedFeature: ``priority`` is set and ``scheduled`` is False.
    """
    if request.priority is None or scheduled is not False:
        return
    raise UnsupportedFeature(
        engine,
        Feature.PRIORITY.value,
        version=version,
        why="this server does not schedule by priority, lower values first (it would ignore it)",
        alternative="Launch it with scheduling='priority' (unillm.launch), or drop priority=",
    )


def decode_event(engine: str, data: str) -> dict[str, Any]:
    """One SSE ``data`` payload as a JSON object, or MalformedResponse naming the engine.

    Args:
        engine: The adapter's name, for the error message.
        data: One SSE event's ``data`` payload.

    Raises:
        MalformedResponse: The payload is not a JSON object.
    """
    try:
        event = json.loads(data)
    except (json.JSONDecodeError, RecursionError):
        raise MalformedResponse(f"{engine}: stream event is not JSON: {data[:200]!r}") from None
    if not isinstance(event, dict):
        raise MalformedResponse(f"{engine}: stream event is not an object: {data[:200]!r}")
    return event


def is_chat(call: HttpCall | None, request: Request) -> bool:
    """True when the answer comes from the chat API: the path of ``call`` says (the route the
    adapter took), else whether ``request`` carries messages."""
    if call is not None:
        return call.path.endswith(CHAT_PATH)
    return request.messages is not None


def parse_usage(usage: Mapping[str, Any] | None) -> Usage:
    """Usage from an OpenAI ``usage`` object (absent counts as zero): reasoning tokens from
    ``completion_tokens_details`` and cached prompt tokens from ``prompt_tokens_details``, where
    the engine reports them (else None).

    Args:
        usage: The answer's ``usage`` object; None or empty gives zero counts.

    Raises:
        pydantic.ValidationError: A count of the wrong type or below zero (the caller turns it
            into a MalformedResponse).
    """
    if not usage:
        return Usage()
    return Usage(
        prompt_tokens=usage.get("prompt_tokens") or 0,
        completion_tokens=usage.get("completion_tokens") or 0,
        total_tokens=usage.get("total_tokens"),
        reasoning_tokens=_detail(usage, "completion_tokens_details", "reasoning_tokens"),
        cached_tokens=_detail(usage, "prompt_tokens_details", "cached_tokens"),
    )


def _detail(usage: Mapping[str, Any], details: str, count: str) -> Any:
    """``usage[details][count]`` as sent (None when either is absent or null), for Usage to check."""
    found = usage.get(details)
    if found is None:
        return None
    if not isinstance(found, Mapping):
        raise TypeError(f"usage.{details} is {type(found).__name__}, not an object")
    return found.get(count)


def parse_logprobs(raw: Any) -> list[TokenLogprob] | None:
    """Token logprobs from either the chat (``content`` list) or completions layout.

    Args:
        raw: The choice's ``logprobs`` (chat or completions layout); None or empty gives None.
    """
    if not raw:
        return None
    if "content" in raw:
        return [
            TokenLogprob(
                token=t["token"],
                logprob=_finite(t["logprob"]),
                top=[
                    TopLogprob(token=a["token"], logprob=_finite(a["logprob"]))
                    for a in t.get("top_logprobs") or ()
                ],
            )
            for t in raw["content"] or ()
        ]
    tops = raw.get("top_logprobs") or [None] * len(raw["tokens"])
    return [
        TokenLogprob(
            token=tok,
            logprob=_finite(lp),
            top=[TopLogprob(token=k, logprob=_finite(v)) for k, v in (top or {}).items()],
        )
        for tok, lp, top in zip(raw["tokens"], raw["token_logprobs"], tops, strict=False)
    ]


def _finite(value: Any) -> float:
    return float("-inf") if value is None else float(value)
