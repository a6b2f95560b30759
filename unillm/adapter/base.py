"""The seam between unillm's core and an engine: pure translation, no I/O.

An adapter turns a :class:`~unillm.options.Request` into an :class:`HttpCall` and the engine's
answers back into typed results; it builds launch commands and declares capabilities. The
core sends the calls, supervises the processes and applies the checks. Adapters are found
through the entry-point group ``unillm.adapters``::

    [project.entry-points."unillm.adapters"]
    myengine = "my_package:MyEngineAdapter"
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, TypeVar

from unillm.adapter.findings import Ignored, refuse_ignored
from unillm.adapter.http_errors import missing_route
from unillm.adapter.launch_spec import CpuRecipe, LaunchCommand, LaunchSpec
from unillm.capabilities import Capabilities, Feature
from unillm.embeddings import EmbedBatch, EmbedRequest, TokenizeRequest
from unillm.errors import SHAPE_ERRORS, UnillmError, UnsupportedFeature, malformed
from unillm.metrics import MetricNames, Sample
from unillm.options import Request
from unillm.results import Completion, Delta, LoraInfo, Tokens

if TYPE_CHECKING:
    import httpx

R = TypeVar("R")


@dataclass(frozen=True, slots=True)
class HttpCall:
    """One HTTP request for the core to send."""

    method: str
    path: str
    json: Mapping[str, Any] | None = None
    stream: bool = False


@dataclass(frozen=True, slots=True)
class EngineInfo:
    """What discovery learnt about a running engine."""

    engine: str
    model: str
    version: str | None = None
    max_model_len: int | None = None


@dataclass(frozen=True, slots=True)
class EngineInstall:
    """How to install an engine into its own virtual environment."""

    packages: tuple[str, ...]
    remove_after: tuple[str, ...] = ()
    python: str | None = None  # e.g. "3.11"; None: the caller's
    #: Packages added to the env, also to one built before they were listed: every setup checks
    #: them and installs what is missing, without rebuilding the env (e.g. vLLM's Ray executor).
    add_ons: tuple[str, ...] = ()


class StreamDecoder(Protocol):
    """Turns each SSE ``data`` payload of one stream into deltas (pure, stateful per stream)."""

    def feed(self, data: str) -> list[Delta]:
        """Decode one event's data; raise an EngineError if the event reports one.

        Args:
            data: One SSE event's ``data`` payload (a JSON string, or ``[DONE]``).

        Returns:
            The deltas it carries (possibly none).

        Raises:
            EngineError: The event reports an engine error.
        """

    @property
    def done(self) -> bool:
        """True once the engine signalled the regular end of the stream."""


class Adapter(ABC):
    """Translation table for one engine. Subclasses must stay free of I/O."""

    #: The engine's key: its entry-point name, ``unillm.connect("vllm", ...)``'s first argument.
    name: ClassVar[str]
    #: The engine's label in ``unillm engines`` and the docs ("vLLM").
    display_name: ClassVar[str]
    #: Probe findings (:class:`~unillm.adapter.findings.Ignored`): features this engine, up to a
    #: version, accepts and ignores. :meth:`capabilities` refuses them there, in every subclass.
    ignored: ClassVar[tuple[Ignored, ...]] = ()
    #: A module importable where the engine is installed: launch finds an interpreter that has it.
    engine_module: ClassVar[str | None] = None
    #: Whether :meth:`in_process` runs the engine in a worker on the engine's own interpreter
    #: (vLLM): launch then resolves ``spec.python`` for it as for a server.
    in_process_worker: ClassVar[bool] = False
    #: Whether the engine's launch takes a tool-call parser (``tool_parser=``, e.g. vLLM's
    #: ``--tool-call-parser``). Only then does the core detect one from the model's chat template;
    #: elsewhere an explicit ``tool_parser`` is refused before anything starts.
    takes_tool_parser: ClassVar[bool] = False
    #: The constrained-decoding backends the engine's launch can select (``structured_backend=``),
    #: and whether it can forbid whitespace in JSON (``compact_json=``); elsewhere either setting
    #: is refused before anything starts.
    structured_backends: ClassVar[tuple[str, ...]] = ()
    takes_compact_json: ClassVar[bool] = False
    #: The reasoning parsers the engine's launch takes (its own names, as its parser list has
    #: them); empty: it takes none, and an explicit ``reasoning_parser`` is refused before start.
    reasoning_parsers: ClassVar[frozenset[str]] = frozenset()
    #: Whether the engine can run a layout's workers on a Ray cluster itself (``ray_address=``,
    #: vLLM's ``--distributed-executor-backend ray``); elsewhere ``ray_address`` is refused.
    ray_executor: ClassVar[bool] = False
    #: The assistant-message field the engine reads an earlier thought from and hands to the
    #: chat template (``reasoning_content``, vLLM's ``reasoning``, Ollama's ``thinking``); None:
    #: it reads none (``replay_reasoning="field"`` is refused, the default drops the thought).
    reasoning_message_field: ClassVar[str | None] = None
    #: What a LoRA call's bare 404 ``Not Found`` means on a server whose runtime LoRA routes may be
    #: missing (why, what instead): :meth:`lora_error` refuses ``LORA_RUNTIME`` with it (see
    #: :func:`~unillm.adapter.http_errors.missing_route`). None: such a 404 is a plain error.
    missing_lora_routes: ClassVar[tuple[str, str] | None] = None

    def replay_field(self, info: EngineInfo) -> str | None:
        """The field an assistant message's thought goes back in, on this engine version
        (default: ``reasoning_message_field``).

        Args:
            info: What discovery learnt about the engine (model, version, limits).
        """
        return self.reasoning_message_field

    def reasoning_parser_name(self, name: str) -> str | None:
        """The engine's own spelling of reasoning parser ``name`` (``deepseek-r1`` and
        ``deepseek_r1`` are one name), or None when the engine has no such parser.

        Args:
            name: A reasoning parser name, in this engine's spelling or another engine's.
        """
        spellings = (name, name.replace("-", "_"), name.replace("_", "-"))
        return next((s for s in spellings if s in self.reasoning_parsers), None)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Make a subclass's own ``capabilities`` refuse what its ``ignored`` findings cover."""
        super().__init_subclass__(**kwargs)
        declared = cls.__dict__.get("capabilities")
        if declared is not None and not getattr(declared, "_gated", False):
            cls.capabilities = _gated(declared)  # type: ignore[method-assign]

    @abstractmethod
    def capabilities(self, version: str | None = None) -> Capabilities:
        """The features honoured by ``version`` (None: the newest the adapter knows).

        Args:
            version: The engine version (e.g. "0.8.5"); None is the newest the adapter knows.
        """

    @abstractmethod
    def discovery(self) -> Mapping[str, HttpCall]:
        """Calls whose answers :meth:`parse_info` needs (failed calls give None)."""

    @abstractmethod
    def parse_info(self, answers: Mapping[str, Any], model: str | None) -> EngineInfo:
        """Engine version and served model from the discovery answers.

        Args:
            answers: The decoded answer of each :meth:`discovery` call, by key (None: the call failed).
            model: The model the caller asked for; None: pick the served one.
        """

    @abstractmethod
    def build(self, request: Request, info: EngineInfo) -> HttpCall:
        """The HTTP call that performs ``request``.

        Args:
            request: The validated request (prompt or messages, options, output constraint).
            info: What discovery learnt about the engine (model, version, limits).
        """

    @abstractmethod
    def parse(
        self, body: Any, request: Request, info: EngineInfo, call: HttpCall | None = None
    ) -> Completion[Any]:
        """A completion from a non-streamed JSON answer (timings filled in by the core).

        ``call`` is what :meth:`build` returned for ``request``: read the route it took from
        ``call.path`` instead of deciding again. The core always passes it; it is None only
        when a caller parses an answer on its own (then decide from ``request``).

        Args:
            body: The engine's decoded JSON answer.
            request: The validated request (prompt or messages, options, output constraint).
            info: What discovery learnt about the engine (model, version, limits).
            call: The HTTP call the adapter built for this request; None from an older core.
        """

    @abstractmethod
    def decoder(self, request: Request, info: EngineInfo, call: HttpCall | None = None) -> StreamDecoder:
        """A fresh decoder for one streamed answer to ``call`` (as for :meth:`parse`).

        Args:
            request: The validated request (prompt or messages, options, output constraint).
            info: What discovery learnt about the engine (model, version, limits).
            call: The HTTP call the adapter built for this request; None from an older core.
        """

    @abstractmethod
    def parse_error(
        self, status: int, body: bytes, request: Request | None, info: EngineInfo | None
    ) -> UnillmError:
        """The typed error for an error answer, carrying the engine's own message.

        Args:
            status: The HTTP status code.
            body: The raw answer body (may be empty or not JSON).
            request: The request that failed; None for calls outside a request (discovery).
            info: Discovery's answer; None when the engine is not yet discovered.
        """

    @abstractmethod
    def command(self, spec: LaunchSpec) -> LaunchCommand:
        """The argv and environment that start the engine for ``spec``.

        Args:
            spec: The launch settings (model, parallelism, port, environment, ...).

        Raises:
            InvalidOptions: A setting the engine has no flag for (refused, not dropped).
        """

    def install(self, *, gpu: bool) -> EngineInstall:
        """How ``unillm setup`` installs the engine into its own environment.

        Args:
            gpu: Install the GPU build (True) or the CPU build.
        """
        raise NotImplementedError(f"{self.name}: no managed install; install it yourself")

    def in_process(self, spec: LaunchSpec) -> httpx.AsyncBaseTransport:
        """An engine inside this process, answering the adapter's own HTTP API.

        Args:
            spec: The launch settings (model, parallelism, port, environment, ...).
        """
        raise UnsupportedFeature(
            self.name,
            "in-process mode",
            alternative=f'Launch it as a server: unillm.launch("{self.name}", ...)',
        )

    def in_process_refusal(self, call: HttpCall) -> UnillmError | None:
        """Why the in-process engine cannot take ``call`` (pure: checked before anything starts,
        e.g. by ``unillm batch --in-process`` for every request); None: it can.

        Args:
            call: The call :meth:`build` made for a request.
        """
        return None

    def cpu_recipe(self, spec: LaunchSpec, workdir: Path) -> CpuRecipe:
        """Settings that run the engine on a CPU-only machine for ``spec`` (pure: no I/O).

        ``workdir`` is a private folder for the engine's caches and temporary files. The core
        applies the recipe for ``unillm.launch(..., cpu=True)`` and ``unillm.cpu_settings``.

        Args:
            spec: The launch settings (model, parallelism, port, environment, ...).
            workdir: A private folder for the engine's caches and temporary files.

        Raises:
            UnsupportedFeature: The engine has no CPU recipe (the default).
        """
        raise UnsupportedFeature(
            self.name,
            "a CPU launch recipe",
            why="the adapter declares none",
            alternative="Pass the engine's CPU settings yourself (env=, extra_args=)",
        )

    def launch_hints(self) -> Mapping[str, str]:
        """Known causes of failed launches: a regex matched against log lines -> what to change."""
        return {}

    def kv_events_args(self, endpoint: str, replay_endpoint: str) -> list[str] | None:
        """Engine flags that publish its KV-cache events on ``endpoint`` in vLLM's format (a ZMQ
        PUB of msgpack ``KVEventBatch``; :mod:`unillm.fleet.kv_events` reads them) and answer
        replay requests on ``replay_endpoint``; None: the engine publishes none that unillm reads.

        Args:
            endpoint: The ZMQ endpoint the engine binds (``ipc://...``).
            replay_endpoint: Where it serves the batches it buffers (a ZMQ ROUTER it binds).
        """
        return None

    def expected_version(self, spec: LaunchSpec) -> str | None:
        """The version discovery will report for an engine launched from ``spec`` (None: unknown).

        ``unillm check`` uses it when the mode decides the capabilities (e.g. MLX in-process).

        Args:
            spec: The launch settings (model, parallelism, port, environment, ...).
        """
        return None

    def preflight(self, request: Request, info: EngineInfo) -> HttpCall | None:
        """A call to make before sending ``request`` (e.g. count its tokens); None: nothing.

        Args:
            request: The validated request (prompt or messages, options, output constraint).
            info: What discovery learnt about the engine (model, version, limits).
        """
        return None

    def check_preflight(self, answer: Any, request: Request, info: EngineInfo) -> None:
        """Refuse ``request`` from the preflight's JSON answer (None when that call failed).

        Args:
            answer: The preflight call's decoded JSON answer (None when that call failed).
            request: The validated request (prompt or messages, options, output constraint).
            info: What discovery learnt about the engine (model, version, limits).

        Raises:
            InvalidRequest: The request cannot succeed (e.g. the prompt is too long for the model).
        """
        return None

    def embed_call(self, request: EmbedRequest, info: EngineInfo) -> HttpCall:
        """The call that embeds one batch of texts (declare ``Feature.EMBEDDINGS`` to enable).

        Args:
            request: One batch of texts to embed, with the requested dimensions.
            info: What discovery learnt about the engine (model, version, limits).
        """
        raise self._missing(Feature.EMBEDDINGS)

    def parse_embeddings(self, body: Any, request: EmbedRequest, info: EngineInfo) -> EmbedBatch:
        """The vectors (in input order) and prompt tokens of one embedding answer.

        Args:
            body: The engine's decoded JSON answer.
            request: One batch of texts to embed, with the requested dimensions.
            info: What discovery learnt about the engine (model, version, limits).
        """
        raise self._missing(Feature.EMBEDDINGS)

    def tokenize_call(self, request: TokenizeRequest, info: EngineInfo) -> HttpCall:
        """The call that tokenizes a text or chat messages (declare ``Feature.TOKENIZE``).

        Args:
            request: The text or chat messages to tokenize.
            info: What discovery learnt about the engine (model, version, limits).
        """
        raise self._missing(Feature.TOKENIZE)

    def parse_tokens(self, body: Any, request: TokenizeRequest, info: EngineInfo) -> Tokens:
        """The token ids from a tokenize answer.

        Args:
            body: The engine's decoded JSON answer.
            request: The text or chat messages to tokenize.
            info: What discovery learnt about the engine (model, version, limits).
        """
        raise self._missing(Feature.TOKENIZE)

    def abortable(self, call: HttpCall) -> tuple[HttpCall, HttpCall] | None:
        """For an engine that runs a non-streamed request to its end after its client left: the
        call to send instead of ``call`` (tagged with a fresh request id) and the call that stops
        it, which the core sends when the caller gives up after sending (cancelled, past its
        deadline or its read timeout).

        Args:
            call: A non-streamed generation call, as :meth:`build` made it.

        Returns:
            The tagged call and its abort call; None (the default): closing the connection stops
            the request, or nothing can.
        """
        return None

    def parse_headers(self, headers: Mapping[str, str], completion: Completion[Any]) -> Completion[Any]:
        """Complete a parsed answer with what the engine sends only in response headers.

        Args:
            headers: The answer's HTTP headers.
            completion: The completion parsed from the body.

        Returns:
            The completion, completed (the same object or a copy).
        """
        return completion

    def bind(self, spec: LaunchSpec) -> Adapter:
        """The adapter to talk to an engine started from ``spec`` (default: this one).

        Adapters whose requests need launch facts (MLX sends LoRA *paths*) return a configured copy.

        Args:
            spec: The launch settings (model, parallelism, port, environment, ...).
        """
        return self

    def modes(self) -> dict[str, str | None]:
        """Columns of ``unillm engines``: label -> the version whose capabilities it shows."""
        return {self.display_name: None}

    def health_path(self) -> str:
        """Where the core polls for readiness."""
        return "/health"

    def metrics_path(self) -> str:
        """Where the engine serves Prometheus metrics."""
        return "/metrics"

    def metric_names(self, version: str | None) -> MetricNames:
        """How this engine's Prometheus names (at ``version``) map onto unillm's metrics schema.

        Leave a signal None when the engine does not expose it. Raise ``UnsupportedFeature``
        when the engine (in this mode) has no metrics endpoint: ``llm.metrics()`` then refuses
        before sending. The default maps nothing (raw samples only)::

            return MetricNames(waiting="myengine_queue_size", ttft="myengine_ttft_seconds")

        Args:
            version: The engine version the names are for; None: the newest known.
        """
        return MetricNames()

    def metric_samples(self, text: str) -> list[Sample] | None:
        """The samples of a metrics answer that is not Prometheus text (None: it is; the default).

        An engine that serves its metrics as JSON (TensorRT-LLM's iteration stats) turns them
        into samples named as its :meth:`metric_names` expects.

        Args:
            text: The body of the ``metrics_path()`` answer.
        """
        return None

    def lora_error(self, status: int, body: bytes, info: EngineInfo | None) -> UnillmError:
        """The typed error for a failed LoRA load/unload/list call: UnsupportedFeature where
        :attr:`missing_lora_routes` says a bare 404 means the server lacks the routes, else
        :meth:`parse_error`'s.

        Args:
            status: The HTTP status code.
            body: The raw answer body (may be empty or not JSON).
            info: Discovery's answer; None when the engine is not yet discovered.
        """
        if self.missing_lora_routes is not None:
            why, alternative = self.missing_lora_routes
            version = info.version if info else None
            refusal = missing_route(
                self.name, status, body, Feature.LORA_RUNTIME, version, why=why, alternative=alternative
            )
            if refusal is not None:
                return refusal
        return self.parse_error(status, body, None, info)

    def check_lora(self, name: str, config: Mapping[str, Any] | None, info: EngineInfo) -> None:
        """Refuse, before sending, an adapter the engine cannot load (default: no check).

        ``config`` is the adapter's ``adapter_config.json`` when its path is readable here.

        Args:
            name: The name requests will use (``lora=name``).
            config: The adapter's ``adapter_config.json`` when it is a local folder; None otherwise.
            info: What discovery learnt about the engine (model, version, limits).

        Raises:
            UnsupportedFeature: The engine cannot serve this adapter (e.g. its rank is too high).
        """
        return None

    def load_lora(self, name: str, path: str) -> HttpCall:
        """The call that loads a LoRA adapter at runtime.

        Args:
            name: The name requests will use (``lora=name``).
            path: The adapter's folder on the engine's host.
        """
        raise self._no_runtime_lora()

    def unload_lora(self, name: str) -> HttpCall:
        """The call that unloads a LoRA adapter at runtime.

        Args:
            name: The adapter's name, as loaded.
        """
        raise self._no_runtime_lora()

    def list_loras(self) -> HttpCall:
        """The call whose answer :meth:`parse_loras` reads."""
        raise self._no_runtime_lora()

    def parse_loras(self, body: Any) -> list[LoraInfo]:
        """The adapters the engine serves.

        Args:
            body: The decoded answer of :meth:`list_loras`'s call.
        """
        return []

    def _missing(self, feature: Feature) -> Exception:
        """The error for a hook the adapter does not implement: its capability refusal if any."""
        try:
            self.capabilities().require(feature)
        except Exception as e:
            return e
        return NotImplementedError(f"{self.name}: {feature.value} declared but not implemented")

    def _no_runtime_lora(self) -> Exception:
        return self._missing(Feature.LORA_RUNTIME)


def decoded(engine: str, what: str, parse: Callable[..., R], *args: Any, **kwargs: Any) -> R:
    """``parse(*args, **kwargs)``, an adapter's decoding of an engine's answer, keeping unillm's
    promise whatever the adapter does with a body of the wrong shape: a KeyError, TypeError,
    pydantic ValidationError (... :data:`~unillm.errors.SHAPE_ERRORS`) becomes MalformedResponse.

        tokens = decoded(adapter.name, "tokenize answer", adapter.parse_tokens, body, request, info)
    """
    try:
        return parse(*args, **kwargs)
    except UnillmError:
        raise
    except SHAPE_ERRORS as e:
        raise malformed(engine, what, e) from e


def parse_answer(
    adapter: Adapter, body: Any, request: Request, info: EngineInfo, call: HttpCall
) -> Completion[Any]:
    """``adapter.parse`` with the call it built (an adapter written before ``call=`` existed
    gets the three arguments it knows); an answer of the wrong shape is a MalformedResponse."""
    if accepts_call(type(adapter), "parse"):
        return decoded(adapter.name, "answer", adapter.parse, body, request, info, call=call)
    return decoded(adapter.name, "answer", adapter.parse, body, request, info)


def open_decoder(adapter: Adapter, request: Request, info: EngineInfo, call: HttpCall) -> StreamDecoder:
    """``adapter.decoder`` with the call it built (see :func:`parse_answer`); a stream event of
    the wrong shape is a MalformedResponse."""
    if accepts_call(type(adapter), "decoder"):
        decoder = adapter.decoder(request, info, call=call)
    else:
        decoder = adapter.decoder(request, info)
    return _Checked(adapter.name, decoder)


class _Checked:
    """A stream decoder whose every failure on a malformed event is a MalformedResponse."""

    __slots__ = ("_decoder", "_engine")

    def __init__(self, engine: str, decoder: StreamDecoder) -> None:
        self._engine, self._decoder = engine, decoder

    def feed(self, data: str) -> list[Delta]:
        try:
            return self._decoder.feed(data)
        except UnillmError:
            raise
        except SHAPE_ERRORS as e:
            raise malformed(self._engine, "stream event", e) from e

    @property
    def done(self) -> bool:
        return self._decoder.done


@cache
def accepts_call(cls: type[Adapter], method: str) -> bool:
    """True when ``cls.<method>`` accepts ``call=`` (once per class: not on the hot path)."""
    import inspect

    try:
        params = inspect.signature(getattr(cls, method)).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.name == "call" or p.kind is p.VAR_KEYWORD for p in params)


def _gated(declared: Callable[[Any, str | None], Capabilities]) -> Callable[..., Capabilities]:
    """``declared`` (an adapter's ``capabilities``) with its class's probe findings refused."""
    from functools import wraps

    @wraps(declared)
    def capabilities(self: Adapter, version: str | None = None) -> Capabilities:
        return refuse_ignored(declared(self, version), type(self).ignored)

    capabilities._gated = True  # type: ignore[attr-defined]
    return capabilities
