"""The one object callers use: ``LLM``, the same on every engine.

llm = unillm.connect("vllm", "http://127.0.0.1:8000")
r = await llm.generate("What is 1+1?", max_tokens=16)
async for d in llm.stream(messages=[{"role": "user", "content": "hi"}]):
    print(d.text, end="")
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, nullcontext
from typing import TYPE_CHECKING, Any

import anyio
import httpx
from pydantic import ValidationError

from unillm import observe
from unillm.adapter.base import Adapter, EngineInfo, HttpCall, decoded, parse_answer
from unillm.adapter.registry import adapter_for
from unillm.capabilities import Capabilities, Feature, check, check_text_only
from unillm.client.calls import EmbedCall, Generates, LoraControl, TokenizeCall
from unillm.client.closing import AsyncClosing
from unillm.client.outputs import attach_parsed
from unillm.client.priority_gate import PriorityGate, Reserve, reserve_gate
from unillm.client.single_flight import SingleFlight
from unillm.client.stream import Stream
from unillm.client.transport import Pool, RetryPolicy, Timeouts, Transport, json_body
from unillm.embeddings import (
    EmbedBatch,
    EmbedRequest,
    check_batch,
    embed_batches,
    tokenize_request,
)
from unillm.errors import EngineError, EngineTimeout, InvalidOptions, MalformedResponse, UnillmError
from unillm.metrics import EngineMetrics
from unillm.options import Options, Request, check_lora_name, make_request
from unillm.redact import check_api_key, display_url
from unillm.results import Completion, Embeddings, LoraInfo, Timings, Tokens, Usage

if sys.version_info < (3, 11):
    from exceptiongroup import BaseExceptionGroup

if TYPE_CHECKING:
    from openai import AsyncOpenAI

    from unillm.client.answer import Answer
    from unillm.client.blocking import BlockingLLM


_log = logging.getLogger("unillm")
ABORT_SECONDS = 2.0  # the most an abort call may take (it runs after the caller gave up)


class LLM(AsyncClosing, Generates):
    """A connection to one running engine. Create it with :func:`unillm.connect`.

    Discovery (served model, engine version, capabilities) happens on first use and is
    cached; ``await llm.info()`` forces it. Use ``async with`` to close the connections.

    Args:
        engine: The adapter's name ("vllm", ...) or an adapter instance.
        base_url: The engine's root URL (a trailing ``/v1`` is dropped).
        model: The model to ask for; None uses the engine's served model.
        api_key: Sent as a bearer token; never echoed in messages or reprs.
        defaults: Options applied to every request, overridden per call.
        timeouts: Connect/read/pool limits in seconds (:class:`~unillm.Timeouts`).
        retry: How refused connections and 429/503 answers are retried.
        http_transport: An httpx transport to send through instead of the network (tests,
            in-process engines).
        pool: Connection-pool sizes (:class:`~unillm.Pool`).
        reserve: Engine slots kept free for urgent requests (:class:`~unillm.Reserve`): requests
            less urgent than its ``above`` wait in the client while ``capacity - slots`` of them
            are in flight; None sends every request at once.

    Raises:
        InvalidOptions: A malformed URL, key or setting, or a reserve without a capacity.
        UnknownEngine: No adapter is installed under ``engine``.
    """

    def __init__(
        self,
        engine: str | Adapter,
        base_url: str,
        *,
        model: str | None = None,
        api_key: str | None = None,
        defaults: Options | None = None,
        timeouts: Timeouts = Timeouts(),
        retry: RetryPolicy = RetryPolicy(),
        http_transport: httpx.AsyncBaseTransport | None = None,
        pool: Pool = Pool(),
        reserve: Reserve | None = None,
    ) -> None:
        self.adapter = adapter_for(engine)
        self.engine = self.adapter.name
        self._url = _engine_root(base_url)  # with any password in it: only the connection sees it
        #: The engine's root URL as printed (a password in it masked): repr, errors, spans.
        self.base_url = display_url(self._url)
        _check_connect_settings(api_key, defaults, timeouts, retry, pool)
        self.defaults: Options = dict(defaults or {})  # type: ignore[assignment]
        make_request("", None, None, self.defaults, stream=False)  # validate defaults now
        self._model, self._api_key = model, api_key
        self._timeouts, self._retry, self._http_transport = timeouts, retry, http_transport
        self._pool = pool
        self._gate: PriorityGate | None = reserve_gate(reserve, self.engine)
        self._transport = Transport(
            self._url,
            api_key=api_key,
            timeouts=timeouts,
            retry=retry,
            engine=self.engine,
            http_transport=http_transport,
            pool=pool,
        )
        self._info: EngineInfo | None = None
        self._caps: Capabilities | None = None
        self._discovery: SingleFlight[EngineInfo] = SingleFlight()
        self.loras = Loras(self)
        #: Whether the served model reads images (known for a model unillm launched; None: unknown).
        self.takes_images: bool | None = None

    @property
    def diagnose(self) -> Callable[[], str | None] | None:
        """Set by :func:`unillm.launch`: says what went wrong with the engine it started.

        Errors that a dead engine or worker explains (unreachable, 5xx) carry its sentence:
        the signal, its usual meaning and what to change.
        """
        return self._transport.diagnose

    @diagnose.setter
    def diagnose(self, hook: Callable[[], str | None] | None) -> None:
        self._transport.diagnose = hook

    def __repr__(self) -> str:
        model = self._info.model if self._info else self._model
        return f"LLM(engine={self.engine!r}, base_url={self.base_url!r}, model={model!r})"

    # -- lifecycle -------------------------------------------------------------------------
    async def aclose(self) -> None:
        """Close the pooled connections."""
        await self._transport.aclose()

    @property
    def reserve(self) -> Reserve | None:
        """The engine slots kept free for urgent requests (None: no reserve)."""
        return self._gate.reserve if self._gate is not None else None

    @property
    def retry(self) -> RetryPolicy:
        """How this client retries refused connections and 429/503 answers."""
        return self._retry

    def clone(self, *, retry: RetryPolicy | None = None, model: str | None = None) -> LLM:
        """A new LLM for the same engine with its own connection pool (e.g. another loop).

        ``retry`` replaces the retry policy (a Fleet's replicas use ``RetryPolicy(attempts=1)``);
        ``model`` names another model (or LoRA adapter) the engine serves: ``llm.clone(model="sql")``.
        A reserve is kept, with counts of its own (the twin's requests are not the original's).

        Args:
            retry: The twin's retry policy; None keeps this one's.
            model: Another model (or LoRA adapter) the engine serves; None keeps this one's.

        Returns:
            A new, independent LLM.
        """
        twin = LLM(
            self.adapter,
            self._url,
            model=model or self._model,
            api_key=self._api_key,
            defaults=self.defaults,
            timeouts=self._timeouts,
            retry=retry or self._retry,
            http_transport=self._http_transport,
            pool=self._pool,
            reserve=self.reserve,
        )
        if model is None:
            twin._info, twin._caps = self._info, self._caps
        twin.takes_images = self.takes_images
        return twin

    def blocking(self) -> BlockingLLM:
        """A blocking twin for scripts; it also works inside a running loop (Jupyter)."""
        from unillm.client.blocking import BlockingLLM

        return BlockingLLM(self.clone())

    # -- discovery -------------------------------------------------------------------------
    async def info(self, *, refresh: bool = False, timeout: float | None = None) -> EngineInfo:
        """Served model, engine version and limits, discovered once and cached.

        Concurrent callers share one discovery: its result, or its failure (a later call tries
        again). ``timeout`` bounds each wait for the engine's bytes, as on a call.

        Args:
            refresh: Ask the engine again instead of returning the cached answer.
            timeout: Seconds each wait for the engine's bytes may take; None uses the client's
                read timeout.

        Returns:
            The served model, engine version and limits.

        Raises:
            MalformedResponse: a discovery endpoint answered something its protocol does not.
            EngineUnavailable: the engine cannot be reached (EngineTimeout: it did not answer).
        """
        if self._info is not None and not refresh:
            return self._info
        limit = self._discovery_limit(timeout)
        try:
            return await self._discovery.run(lambda: self._discover(timeout), wait_limit=limit)
        except TimeoutError:
            raise EngineTimeout(
                f"{self.engine} at {self.base_url}: discovery (the served model and version) did "
                f"not finish within {limit:g}s; raise timeout= or check the engine's load"
            ) from None

    def _discovery_limit(self, timeout: float | None) -> float | None:
        """How long a caller waits for a discovery another caller runs (None: ``timeout`` unset)."""
        if not isinstance(timeout, (int, float)) or not 0 < timeout < float("inf"):
            return None  # unset (or invalid: the call itself refuses it)
        return len(self.adapter.discovery()) * (self._timeouts.connect + timeout)

    async def _discover(self, timeout: float | None) -> EngineInfo:
        calls = self.adapter.discovery()
        answers: dict[str, Any] = {}
        for key, call in calls.items():
            answers[key] = await self._get_json_or_none(call, timeout)
        try:
            info = self.adapter.parse_info(answers, self._model)
        except UnillmError:
            raise
        except (KeyError, IndexError, TypeError, AttributeError, ValueError) as e:
            raise MalformedResponse(
                f"{self.engine}: unexpected discovery answers from "
                f"{', '.join(c.path for c in calls.values())} ({type(e).__name__}: {e})"
            ) from None
        if not isinstance(info.model, str) or not info.model:
            raise MalformedResponse(
                f"{self.engine}: discovery ({', '.join(c.path for c in calls.values())}) named no "
                f"model (got {info.model!r}); pass model= to connect, or check the engine"
            )
        self._caps = self.adapter.capabilities(info.version)
        self._info = info
        return info

    async def capabilities(self) -> Capabilities:
        """What this engine, at its detected version, can honour."""
        await self.info()
        assert self._caps is not None
        return self._caps

    async def health(self) -> bool:
        """True when the engine answers its health check with 200.

        Returns:
            Whether the engine is healthy; an unreachable engine is False, not an error.
        """
        try:
            response = await self._transport.send(HttpCall("GET", self.adapter.health_path()))
        except EngineError:
            return False
        return response.status_code == 200

    async def metrics(self) -> EngineMetrics:
        """The engine's Prometheus metrics: raw samples, and ``.normalized()`` for every engine.

            m = await llm.metrics()
            m.value("vllm:num_requests_running")      # raw, engine-specific names (m.names())
            m.normalized().waiting                    # unillm's schema (see unillm.metrics)

        Returns:
            The scraped samples, with the engine's name mapping for ``.normalized()``.

        Raises:
            UnsupportedFeature: The engine has no metrics endpoint (raised before sending).
            EngineError: The engine answered the scrape with an error status.
        """
        info = await self.info()
        mapping = self.adapter.metric_names(info.version)
        response = await self._transport.send(HttpCall("GET", self.adapter.metrics_path()))
        if response.status_code != 200:
            raise self.adapter.parse_error(response.status_code, response.content, None, self._info)
        samples = decoded(self.engine, "metrics", self.adapter.metric_samples, response.text)
        if samples is not None:  # an engine with JSON metrics (TensorRT-LLM's iteration stats)
            return EngineMetrics(engine=self.engine, mapping=mapping, samples=samples)
        return EngineMetrics.parse(response.text, engine=self.engine, mapping=mapping)

    def openai(self) -> AsyncOpenAI:
        """An ``openai.AsyncOpenAI`` client for the same endpoint (needs ``unillm-sdk[openai]``).

        Returns:
            A client for the engine's ``/v1`` API, with this client's API key.

        Raises:
            InvalidOptions: The openai package is not installed.
        """
        try:
            from openai import AsyncOpenAI
        except ImportError:
            raise InvalidOptions(
                "llm.openai() needs the openai package: pip install 'unillm-sdk[openai]'"
            ) from None
        return AsyncOpenAI(base_url=f"{self._url}/v1", api_key=self._api_key or "unused")

    # -- generation (generate and stream: unillm.client.calls.Generates) ---------------------
    async def _complete(self, request: Request) -> Completion[Any]:
        """Send one validated, non-streamed request and parse the answer (seen by unillm.observe)."""
        if observe.OBSERVERS:
            return await observe.generate(self._observed_as(), request, self._send_and_parse)
        return await self._send_and_parse(request)

    async def _send_and_parse(self, request: Request) -> Completion[Any]:
        info, call = await self._prepare(request)
        tagged = self.adapter.abortable(call)
        if tagged is not None:
            call = tagged[0]
        started = time.perf_counter()  # the caller's view: a wait for the reserve counts
        async with self._slot(request):
            try:
                response = await self._transport.send(call, request.timeout)
            except (anyio.get_cancelled_exc_class(), EngineTimeout):  # sent, unanswered: it may run on
                if tagged is not None:
                    await self._abort(tagged[1])
                raise
        if response.status_code >= 400:
            raise self._error(response, request)
        completion = parse_answer(self.adapter, json_body(response, self.engine), request, info, call)
        completion = self.adapter.parse_headers(response.headers, completion)
        total = time.perf_counter() - started
        tokens = completion.usage.completion_tokens
        completion.timings = Timings(total_s=total, tokens_per_s=tokens / total if total else None)
        if request.output is not None:
            attach_parsed(completion, request.output, self.engine)
        return completion

    async def _abort(self, call: HttpCall) -> None:
        """Send an adapter's abort call, shielded from the caller's cancel and bounded; a failed
        abort is logged (the caller's own error is what it sees)."""
        failure = f"took over {ABORT_SECONDS:g} s"
        with anyio.CancelScope(shield=True), anyio.move_on_after(ABORT_SECONDS):
            try:  # best effort: the caller's error goes on whatever happens here
                answer = await self._transport.send(call, ABORT_SECONDS)
                failure = f"was answered {answer.status_code}" if answer.status_code >= 400 else ""
            except Exception as e:
                failure = f"failed ({type(e).__name__})"
        if failure:
            _log.info("%s: the abort of a request its caller gave up %s", self.engine, failure)

    def _open_stream(self, request: Request) -> Stream:
        return Stream(self, request)

    def _slot(self, request: Request) -> AbstractAsyncContextManager[None]:
        """Held while ``request`` is at the engine: a reserve's slot (it may wait for one)."""
        return self._gate.slot(request.priority) if self._gate is not None else nullcontext()

    # -- embeddings and tokens ---------------------------------------------------------------
    async def _embed(self, call: EmbedCall) -> Embeddings:
        texts, batch_size, dimensions, concurrency, timeout = call
        requests = embed_batches(texts, batch_size=batch_size, dimensions=dimensions, timeout=timeout)
        if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
            raise InvalidOptions(f"concurrency must be a positive integer, got {concurrency!r}")
        info = await self.info(timeout=timeout)
        assert self._caps is not None
        self._caps.require(Feature.EMBEDDINGS)
        started = time.perf_counter()
        batches = await self._embed_batches(requests, info, concurrency)
        return self._embeddings(batches, requests, info, dimensions, started)

    def _embeddings(
        self,
        batches: list[EmbedBatch | None],
        requests: Sequence[EmbedRequest],
        info: EngineInfo,
        dimensions: int | None,
        started: float,
    ) -> Embeddings:
        """The batches' vectors in order, each batch checked, as one Embeddings."""
        vectors: list[list[float]] = []
        size, tokens = dimensions, 0
        for batch, request in zip(batches, requests, strict=True):
            assert batch is not None
            size = check_batch(batch, request, self.engine, size)
            vectors += batch.vectors
            tokens += batch.prompt_tokens
        assert size is not None
        try:
            return Embeddings(
                vectors=vectors,
                dimensions=size,
                usage=Usage(prompt_tokens=tokens),
                timings=Timings(total_s=time.perf_counter() - started),
                engine=self.engine,
                engine_version=info.version,
                model=info.model,
            )
        except ValidationError as e:
            raise MalformedResponse(
                f"{self.engine}: embeddings are not all finite numbers ({e.errors()[0]['msg']})"
            ) from None

    async def _embed_batches(
        self, requests: Sequence[EmbedRequest], info: EngineInfo, concurrency: int
    ) -> list[EmbedBatch | None]:
        """Send every batch (up to ``concurrency`` at a time); each answer parsed, in order."""
        calls = [self.adapter.embed_call(r, info) for r in requests]  # every batch built before sending
        batches: list[EmbedBatch | None] = [None] * len(requests)

        async def run(i: int) -> None:
            response = await self._transport.send(calls[i], requests[i].timeout)
            if response.status_code >= 400:
                raise self._error(response, None)
            body = json_body(response, self.engine)
            parse = self.adapter.parse_embeddings
            batches[i] = decoded(self.engine, "embeddings answer", parse, body, requests[i], info)

        if len(requests) == 1:
            await run(0)
        else:
            limiter = anyio.CapacityLimiter(concurrency)

            async def limited(i: int) -> None:
                async with limiter:
                    await run(i)

            try:
                async with anyio.create_task_group() as group:
                    for i in range(len(requests)):
                        group.start_soon(limited, i)
            except BaseExceptionGroup as group_error:
                raise _first_error(group_error) from None
        return batches

    async def _tokenize(self, call: TokenizeCall) -> Tokens:
        text, messages, timeout, tools, replay_reasoning = call
        request = tokenize_request(
            text, messages, timeout=timeout, tools=tools, replay_reasoning=replay_reasoning
        )
        info = await self.info(timeout=timeout)
        assert self._caps is not None
        self._caps.require(Feature.TOKENIZE)
        response = await self._transport.send(self.adapter.tokenize_call(request, info), timeout)
        if response.status_code >= 400:
            raise self._error(response, None)
        body = json_body(response, self.engine)
        return decoded(self.engine, "tokenize answer", self.adapter.parse_tokens, body, request, info)

    def _observed_as(self) -> observe.Target:
        """This LLM as observers see its calls: engine, URL and served model."""
        return observe.Target(self.engine, self.base_url, self._served_model)

    async def _served_model(self) -> str:
        return (await self.info()).model

    async def _prepare(self, request: Request) -> tuple[EngineInfo, HttpCall]:
        info = await self.info(timeout=request.timeout)
        assert self._caps is not None
        check(self._caps, request)
        if self.takes_images is False:
            check_text_only(self.engine, info, request)
        call = self.adapter.build(request, info)
        preflight = self.adapter.preflight(request, info)
        if preflight is not None:
            self.adapter.check_preflight(
                await self._get_json_or_none(preflight, request.timeout), request, info
            )
        return info, call

    def _error(self, response: Answer, request: Request | None) -> UnillmError:
        from unillm.client.transport import retry_after_seconds
        from unillm.errors import Overloaded

        error = self.adapter.parse_error(response.status_code, response.content, request, self._info)
        if isinstance(error, Overloaded):
            error.retry_after = retry_after_seconds(response.headers.get("retry-after"))
        return self._transport.explained(error) if response.status_code >= 500 else error

    async def _get_json_or_none(self, call: HttpCall, timeout: float | None = None) -> Any:
        response = await self._transport.send(call, timeout)
        if response.status_code in (401, 403):
            raise self._error(response, None)
        if response.status_code != 200:
            return None
        try:
            return response.json()
        except (ValueError, RecursionError):  # not JSON (or nested past the parser): no answer
            return None

    async def _lora_call(self, call: HttpCall) -> Any:
        info = await self.info()
        response = await self._transport.send(call)
        if response.status_code >= 400:
            raise self.adapter.lora_error(response.status_code, response.content, info)
        try:
            return response.json()
        except ValueError:
            return response.text


def _first_error(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """The first leaf error of a task group (so callers can catch unillm's typed errors)."""
    error: BaseException = group
    while isinstance(error, BaseExceptionGroup):
        error = error.exceptions[0]
    return error


def _engine_root(base_url: str) -> str:
    """The engine's root URL, parsed now: unillm adds every path itself (a trailing ``/v1`` is dropped).

    Raises:
        InvalidOptions: not an http(s) URL with a host and a port in 1-65535, or it holds
            whitespace, a control character, a ``?query`` or a ``#fragment``.
    """
    example = "(e.g. 'http://127.0.0.1:8000')"
    if not isinstance(base_url, str) or not base_url.startswith(("http://", "https://")):
        shown = display_url(base_url) if isinstance(base_url, str) else type(base_url).__name__
        raise InvalidOptions(f"base_url must start with http:// or https://, got {shown!r} {example}")
    shown = display_url(base_url)
    bad = next((c for c in base_url if c.isspace() or not c.isprintable()), None)
    if bad is not None:
        raise InvalidOptions(
            f"base_url {shown!r} holds whitespace or a control character (U+{ord(bad):04X}); "
            f"strip it {example}"
        )
    try:
        url = httpx.URL(base_url)
        port = url.port
    except httpx.InvalidURL as e:
        raise InvalidOptions(f"base_url {shown!r} is not a valid URL ({e}) {example}") from None
    if not url.host:
        raise InvalidOptions(f"base_url {shown!r} names no host {example}")
    if port is not None and not 0 < port < 65536:
        raise InvalidOptions(f"base_url {shown!r}: the port must be in 1-65535, got {port}")
    if url.query or url.fragment or "?" in base_url or "#" in base_url:
        raise InvalidOptions(
            f"base_url {shown!r} has a ?query or #fragment: give the engine's root URL {example}"
        )
    root = base_url.rstrip("/")
    return root[: -len("/v1")] if root.endswith("/v1") else root


def _check_connect_settings(
    api_key: str | None,
    defaults: Options | None,
    timeouts: Timeouts,
    retry: RetryPolicy,
    pool: Pool,
) -> None:
    """Refuse ``connect`` arguments of the wrong kind before anything is built (the key is not echoed)."""
    check_api_key(api_key)
    if defaults is not None and not isinstance(defaults, Mapping):
        raise InvalidOptions(
            f"defaults must be a mapping of options (e.g. {{'max_tokens': 64}}), got {defaults!r}"
        )
    for name, value, kind in (
        ("timeouts", timeouts, Timeouts),
        ("retry", retry, RetryPolicy),
        ("pool", pool, Pool),
    ):
        if not isinstance(value, kind):
            raise InvalidOptions(f"{name} must be a unillm.{kind.__name__}(...), got {value!r}")


class Loras(LoraControl):
    """LoRA adapters of one engine: ``await llm.loras.load("sql", "/adapters/sql")``; the methods'
    documentation is :class:`~unillm.client.calls.LoraControl`'s.

    Args:
        llm: The client whose engine's adapters these are.
    """

    def __init__(self, llm: LLM) -> None:
        self._llm = llm

    async def load(self, name: str, path: str) -> None:
        check_lora_name(name)
        if not isinstance(path, str) or not path:
            raise InvalidOptions("adapter path must be a non-empty string (a path on the engine's host)")
        self._llm.adapter.check_lora(name, _local_adapter_config(path), await self._llm.info())
        await self._llm._lora_call(self._llm.adapter.load_lora(name, path))

    async def unload(self, name: str) -> None:
        check_lora_name(name)
        await self._llm._lora_call(self._llm.adapter.unload_lora(name))

    async def list(self) -> list[LoraInfo]:
        """Adapters the engine serves now."""
        body = await self._llm._lora_call(self._llm.adapter.list_loras())
        return decoded(self._llm.engine, "adapter list", self._llm.adapter.parse_loras, body)


def _local_adapter_config(path: str) -> dict[str, Any] | None:
    """The adapter's ``adapter_config.json`` when ``path`` is a folder on this host, else None."""
    import json
    from pathlib import Path

    try:
        config = json.loads((Path(path) / "adapter_config.json").read_text())
    except (OSError, ValueError):
        return None
    return config if isinstance(config, dict) else None


__all__ = ["LLM", "Loras"]
