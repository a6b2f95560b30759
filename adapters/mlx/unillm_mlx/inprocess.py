"""mlx-lm inside the caller's process, answering the OpenAI-style API that MLXAdapter speaks.

    async with unillm.launch("mlx", model="/models/qwen-4bit", in_process=True) as llm:
        r = await llm.generate("Pick:", output=unillm.Choice(["red", "blue"]))

Everything MLX does runs on one worker thread (model loading, prefill, decoding), so the event
loop stays free; tokens reach the loop as they are generated. Requests run one at a time, in
arrival order. Importing this module is cheap: mlx, mlx-lm and llguidance load on the worker.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import shutil
import tempfile
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from importlib.metadata import version as _dist_version
from pathlib import Path
from typing import Any

import anyio
import anyio.from_thread
import anyio.lowlevel
import anyio.to_thread
import httpx
from anyio.streams.memory import MemoryObjectReceiveStream

from unillm.adapter import LaunchSpec
from unillm_mlx import DEFAULT_MODEL, IN_PROCESS_SUFFIX, refuse_unsupported

__all__ = ["InProcessTransport"]

_FIELDS = frozenset(
    {
        "model",
        "messages",
        "prompt",
        "max_tokens",
        "max_completion_tokens",
        "temperature",
        "top_p",
        "top_k",
        "min_p",
        "seed",
        "presence_penalty",
        "frequency_penalty",
        "repetition_penalty",
        "n",
        "stop",
        "logprobs",
        "top_logprobs",
        "stream",
        "stream_options",
        "structured_outputs",
        "response_format",
        "adapters",
        "logit_bias",
        "tools",
        "tool_choice",
        "chat_template_kwargs",  # e.g. enable_thinking, for the chat template
    }
)
DEFAULT_MAX_TOKENS = 512  # as mlx_lm.server
DEFAULT_MAX_LORAS = 2  # adapter models kept loaded besides the base model
_COUNTERS = {
    "requests": "Requests started.",
    "prompt_tokens": "Prompt tokens processed.",
    "generation_tokens": "Tokens generated.",
    "spec_decode_num_accepted_tokens": "Generated tokens that came from the draft model.",
}


class _RequestError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class _Cancelled(Exception):
    pass


@dataclass(eq=False)
class _Job:
    """One generation request, parsed and validated on the event loop."""

    chat: bool
    body: dict[str, Any]
    stream: bool
    n: int
    max_tokens: int
    stop: tuple[str, ...]
    logprobs: bool
    top_logprobs: int
    structured: dict[str, Any] | None
    adapter: str | None
    include_usage: bool
    cancelled: threading.Event = field(default_factory=threading.Event)


# Events from the worker: ("start", prompt_tokens) | ("text", index, text, logprobs | None)
# | ("finish", index, reason, completion_tokens) | ("done",) | ("error", status, message)
_Event = tuple[Any, ...]


class InProcessTransport(httpx.AsyncBaseTransport):
    """An httpx transport backed by mlx-lm in this process (``unillm.launch(..., in_process=True)``)."""

    def __init__(self, spec: LaunchSpec) -> None:
        refuse_unsupported(spec, in_process=True)
        self._engine = _Engine(spec)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        path, method = request.url.path, request.method
        try:
            if method == "GET" and path == "/health":
                return _json(200, {"status": "ok"})
            if method == "GET" and path == "/version":
                return _json(200, {"version": _dist_version("mlx-lm") + IN_PROCESS_SUFFIX})
            if method == "GET" and path == "/v1/models":
                return _json(200, {"object": "list", "data": self._engine.models()})
            if method == "GET" and path == "/metrics":
                return httpx.Response(
                    200, text=self._engine.metrics(), headers={"content-type": "text/plain; version=0.0.4"}
                )
            if method == "POST" and path in ("/v1/chat/completions", "/v1/completions"):
                chat = path.endswith("/chat/completions")
                job = self._engine.parse(_body(await request.aread()), chat=chat)
                return await self._generate(request, job)
            if method == "POST" and path == "/tokenize":
                return _json(200, await self._engine.tokenize(_body(await request.aread())))
            if method == "POST" and path == "/v1/load_lora_adapter":
                body = _body(await request.aread())
                self._engine.add_lora(_str(body, "lora_name"), _str(body, "lora_path"))
                return _json(200, {"status": "ok"})
            if method == "POST" and path == "/v1/unload_lora_adapter":
                self._engine.remove_lora(_str(_body(await request.aread()), "lora_name"))
                return _json(200, {"status": "ok"})
        except _RequestError as e:
            return _json(e.status, {"error": str(e)})
        return httpx.Response(404, content=b"Not Found")

    async def aclose(self) -> None:
        await self._engine.aclose()

    async def _generate(self, request: httpx.Request, job: _Job) -> httpx.Response:
        read_timeout = (request.extensions.get("timeout") or {}).get("read")
        events = await self._engine.submit(job)
        try:
            with _deadline(read_timeout, request):
                first = await events.receive()
        except BaseException:
            job.cancelled.set()
            events.close()
            raise
        if first[0] == "error":
            events.close()
            return _json(first[1], {"error": first[2]})
        answer = _Answer(job, prompt_tokens=first[1], model=str(job.body.get("model") or DEFAULT_MODEL))
        if job.stream:
            return httpx.Response(
                200,
                headers={"content-type": "text/event-stream"},
                stream=_EventStream(answer, events, read_timeout, request),
            )
        try:
            with _deadline(read_timeout, request):
                async for event in events:
                    if event[0] == "error":
                        return _json(event[1], {"error": event[2]})
                    answer.feed(event)
        finally:
            job.cancelled.set()
            events.close()
        return _json(200, answer.body())


class _deadline:
    """Raise httpx.ReadTimeout when the engine sends nothing for ``seconds`` (like a network stall)."""

    def __init__(self, seconds: float | None, request: httpx.Request) -> None:
        self._scope = anyio.move_on_after(seconds if seconds is not None else math.inf)
        self._request, self._seconds = request, seconds

    def __enter__(self) -> None:
        self._scope.__enter__()

    def __exit__(self, *exc: Any) -> bool:
        suppressed = self._scope.__exit__(*exc)
        if self._scope.cancelled_caught:
            raise httpx.ReadTimeout(
                f"in-process MLX sent nothing for {self._seconds}s", request=self._request
            )
        return bool(suppressed)


class _EventStream(httpx.AsyncByteStream):
    """The SSE body of a streamed answer; closing it stops the generation."""

    def __init__(
        self,
        answer: _Answer,
        events: MemoryObjectReceiveStream[_Event],
        read_timeout: float | None,
        request: httpx.Request,
    ) -> None:
        self._answer, self._events = answer, events
        self._read_timeout, self._request = read_timeout, request

    async def __aiter__(self) -> AsyncIterator[bytes]:
        answer = self._answer
        while True:
            with _deadline(self._read_timeout, self._request):
                try:
                    event = await self._events.receive()
                except anyio.EndOfStream:
                    return
            if event[0] == "error":  # mid-stream failure: an error event, as engines send
                yield _sse({"error": {"message": event[2], "code": event[1]}})
                return
            for chunk in answer.chunks(event):
                yield _sse(chunk)
            if event[0] == "done":
                yield b"data: [DONE]\n\n"
                return

    async def aclose(self) -> None:
        self._answer.job.cancelled.set()
        self._events.close()


def _asyncio_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:  # another backend (trio): events go through anyio.from_thread
        return None


def _sse(payload: Any) -> bytes:
    return f"data: {json.dumps(payload)}\n\n".encode()


class _Answer:
    """Builds OpenAI-shaped bodies and stream chunks from worker events."""

    def __init__(self, job: _Job, *, prompt_tokens: int, model: str) -> None:
        self.job, self.model, self.prompt_tokens = job, model, prompt_tokens
        self.id = f"{'chatcmpl' if job.chat else 'cmpl'}-{uuid.uuid4().hex}"
        self.created = int(time.time())
        self.texts: dict[int, list[str]] = {i: [] for i in range(job.n)}
        self.logprobs: dict[int, list[dict[str, Any]]] = {i: [] for i in range(job.n)}
        self.finish: dict[int, str] = {}
        self.completion_tokens = 0

    def feed(self, event: _Event) -> None:
        if event[0] == "text":
            _, index, text, logprobs = event
            self.texts[index].append(text)
            if logprobs:
                self.logprobs[index].extend(logprobs)
        elif event[0] == "finish":
            _, index, reason, tokens = event
            self.finish[index] = reason
            self.completion_tokens += tokens

    def usage(self) -> dict[str, int]:
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.prompt_tokens + self.completion_tokens,
        }

    def _head(self, chunk: bool) -> dict[str, Any]:
        kind = "text_completion"
        if self.job.chat:
            kind = "chat.completion.chunk" if chunk else "chat.completion"
        return {"id": self.id, "object": kind, "created": self.created, "model": self.model}

    def body(self) -> dict[str, Any]:
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

    def chunks(self, event: _Event) -> Iterator[dict[str, Any]]:
        self.feed(event)
        if event[0] == "text":
            _, index, text, logprobs = event
            yield {**self._head(True), "choices": [self._choice(index, text, None, logprobs)]}
        elif event[0] == "finish":
            yield {**self._head(True), "choices": [self._choice(event[1], "", event[2], None)]}
        elif event[0] == "done" and self.job.include_usage:
            yield {**self._head(True), "choices": [], "usage": self.usage()}

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


def _json(status: int, payload: Any) -> httpx.Response:
    return httpx.Response(status, json=payload)


def _body(raw: bytes) -> dict[str, Any]:
    try:
        body = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise _RequestError(400, f"Invalid JSON in request body: {e}") from None
    if not isinstance(body, dict):
        raise _RequestError(400, "Request should be a JSON object")
    return body


def _str(body: dict[str, Any], key: str) -> str:
    value = body.get(key)
    if not isinstance(value, str) or not value:
        raise _RequestError(400, f"{key} must be a non-empty string")
    return value


def _number(
    body: dict[str, Any],
    key: str,
    kind: type | tuple[type, ...],
    default: Any,
    lo: float = -math.inf,
    hi: float = math.inf,
) -> Any:
    value: Any = body.get(key, default)
    if value is None:
        return default
    ok = not isinstance(value, bool) and isinstance(value, (int, float)) and lo <= value <= hi
    if not ok or not isinstance(value, kind):
        raise _RequestError(400, f"{key} must be a number in [{lo}, {hi}], got {value!r}")
    return value


# ----------------------------------------------------------------------------- the engine
class _Engine:
    """Loaded models and the single worker thread that runs them."""

    def __init__(self, spec: LaunchSpec) -> None:
        self.spec = spec
        self.model_id = spec.served_name or spec.model
        self._loras: dict[str, str] = dict(spec.lora)
        self._max_loras = spec.max_loras or DEFAULT_MAX_LORAS
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="unillm-mlx")
        self._lock = threading.Lock()  # guards _loras against the worker
        self._models: dict[str | None, tuple[Any, Any]] = {}  # adapter path -> (model, tokenizer)
        self._draft: Any = None
        self._lltokenizer: Any = None
        self._tmp = Path(tempfile.mkdtemp(prefix="unillm-mlx-"))
        self._load_error: str | None = None
        self._jobs: set[_Job] = set()
        self._counters = dict.fromkeys(_COUNTERS, 0)  # written by the worker only
        self.max_model_len = spec.max_model_len or _model_context(spec.model)
        self._worker.submit(self._load_base)  # start loading now; requests queue behind it

    # -- on the event loop -----------------------------------------------------------------
    def models(self) -> list[dict[str, Any]]:
        with self._lock:
            loras = dict(self._loras)
        return [
            {
                "id": self.model_id,
                "object": "model",
                "root": self.spec.model,
                "max_model_len": self.max_model_len,
            },
            *(
                {"id": name, "object": "model", "root": path, "parent": self.model_id}
                for name, path in sorted(loras.items())
            ),
        ]

    def metrics(self) -> str:
        """Prometheus text: request and token counters, and requests queued or running."""
        lines = []
        for name, help_text in _COUNTERS.items():
            lines += [
                f"# HELP mlx:{name} {help_text}",
                f"# TYPE mlx:{name} counter",
                f"mlx:{name}_total {self._counters[name]}",
            ]
        lines += [
            "# HELP mlx:num_requests_running Requests queued or running.",
            "# TYPE mlx:num_requests_running gauge",
            f"mlx:num_requests_running {len(self._jobs)}",
        ]
        return "\n".join(lines) + "\n"

    def add_lora(self, name: str, path: str) -> None:
        if not (Path(path).expanduser() / "adapter_config.json").is_file():
            raise _RequestError(404, f"no LoRA adapter at {path!r} (adapter_config.json is missing)")
        with self._lock:
            if name in self._loras:
                raise _RequestError(400, f"a LoRA adapter named {name!r} is already loaded")
            self._loras[name] = path

    def remove_lora(self, name: str) -> None:
        with self._lock:
            if self._loras.pop(name, None) is None:
                raise _RequestError(404, f"no LoRA adapter named {name!r} is loaded")

    async def tokenize(self, body: dict[str, Any]) -> dict[str, Any]:
        """vLLM's ``/tokenize``: ``{"prompt": ...}`` or ``{"messages": [...]}`` -> tokens and count."""
        chat = body.get("messages") is not None
        if chat == (body.get("prompt") is not None):
            raise _RequestError(400, "pass exactly one of prompt or messages")
        if chat and (not isinstance(body["messages"], list) or not body["messages"]):
            raise _RequestError(400, "messages must be a non-empty list")
        if not chat and not isinstance(body["prompt"], str):
            raise _RequestError(400, "prompt must be a string")

        def work() -> list[int]:
            if self._load_error is not None:
                raise _RequestError(404, self._load_error)
            _model, tokenizer = self._model_for(None)
            return _prompt_ids(tokenizer, body, chat=chat)

        ids = await anyio.to_thread.run_sync(lambda: self._worker.submit(work).result())
        return {"tokens": ids, "count": len(ids), "max_model_len": self.max_model_len}

    def parse(self, body: dict[str, Any], *, chat: bool) -> _Job:
        unknown = sorted(set(body) - _FIELDS)
        if unknown:
            raise _RequestError(400, f"unsupported field(s) {unknown} for in-process MLX")
        model = body.get("model", DEFAULT_MODEL)
        if model not in (self.model_id, self.spec.model, DEFAULT_MODEL):
            raise _RequestError(404, f"model {model!r} is not served here (serving {self.model_id!r})")
        if chat:
            messages = body.get("messages")
            if not isinstance(messages, list) or not messages:
                raise _RequestError(400, "messages must be a non-empty list")
            if body.get("tool_choice", "none") != "none" and body.get("tools"):
                raise _RequestError(
                    400,
                    "in-process MLX reads no calls from free text: send tool_choice "
                    "'none' with structured_outputs forcing the call (unillm does)",
                )
        elif not isinstance(body.get("prompt"), str):
            raise _RequestError(400, "prompt must be a string")
        stop = body.get("stop") or ()
        stop = (stop,) if isinstance(stop, str) else tuple(stop)
        if not all(isinstance(s, str) and s for s in stop):
            raise _RequestError(400, "stop must be a string or a list of non-empty strings")
        logprobs = body.get("logprobs", False)
        if not isinstance(logprobs, bool):
            raise _RequestError(400, "logprobs must be a boolean")
        structured = body.get("structured_outputs")
        response_format = body.get("response_format")
        if isinstance(response_format, dict) and response_format.get("type") == "json_schema":
            if structured is not None:
                raise _RequestError(400, "pass either structured_outputs or response_format, not both")
            structured = {"json": (response_format.get("json_schema") or {}).get("schema", {})}
        elif response_format not in (None, {"type": "text"}):
            raise _RequestError(400, f"unsupported response_format {response_format!r}")
        if structured is not None and not isinstance(structured, dict):
            raise _RequestError(400, "structured_outputs must be an object")
        adapter = body.get("adapters")
        if adapter is not None and not isinstance(adapter, str):
            raise _RequestError(400, "adapters must be a string (a LoRA name or path)")
        options = body.get("stream_options") or {}
        max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
        for key in (
            "temperature",
            "top_p",
            "min_p",
            "presence_penalty",
            "frequency_penalty",
            "repetition_penalty",
        ):
            _number(body, key, (int, float), None)
        _number(body, "top_k", int, None, 0)
        _number(body, "seed", int, None)
        return _Job(
            chat=chat,
            body=body,
            stream=bool(body.get("stream", False)),
            n=_number(body, "n", int, 1, 1, 64),
            max_tokens=_number({"max_tokens": max_tokens}, "max_tokens", int, DEFAULT_MAX_TOKENS, 1),
            stop=stop,
            logprobs=logprobs or body.get("top_logprobs") is not None,
            top_logprobs=_number(body, "top_logprobs", int, 0, 0, 20),
            structured=structured,
            adapter=adapter,
            include_usage=bool(isinstance(options, dict) and options.get("include_usage")),
        )

    async def submit(self, job: _Job) -> MemoryObjectReceiveStream[_Event]:
        send, receive = anyio.create_memory_object_stream[_Event](math.inf)
        token = anyio.lowlevel.current_token()
        loop = _asyncio_loop()

        def deliver(event: _Event) -> None:  # on the event loop
            try:
                send.send_nowait(event)
            except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                job.cancelled.set()  # the reader went away

        def emit(event: _Event) -> None:
            if job.cancelled.is_set():
                raise _Cancelled
            try:
                if loop is not None:  # asyncio: hand over without waiting, so decoding goes on
                    loop.call_soon_threadsafe(deliver, event)
                else:
                    anyio.from_thread.run_sync(deliver, event, token=token)
            except RuntimeError:
                job.cancelled.set()  # the event loop has ended
                raise _Cancelled from None

        def close() -> None:  # memory streams are not thread-safe: close on the loop, after the events
            with contextlib.suppress(RuntimeError):  # RuntimeError: the event loop has ended
                if loop is not None:
                    loop.call_soon_threadsafe(send.close)
                else:
                    anyio.from_thread.run_sync(send.close, token=token)

        self._jobs.add(job)
        self._worker.submit(self._run, job, emit, close)
        return receive

    async def aclose(self) -> None:
        for job in list(self._jobs):
            job.cancelled.set()
        await anyio.to_thread.run_sync(self._shutdown)

    def _shutdown(self) -> None:
        self._worker.shutdown(wait=True, cancel_futures=True)
        self._models.clear()
        shutil.rmtree(self._tmp, ignore_errors=True)

    # -- on the worker thread --------------------------------------------------------------
    def _load_base(self) -> None:
        from mlx_lm import load

        try:
            model, tokenizer, *_ = load(self.spec.model)
            self._models[None] = (model, tokenizer)
            s = self.spec.speculative
            if s is not None and s.draft_model:
                self._draft, *_ = load(s.draft_model)
        except Exception as e:
            self._load_error = f"could not load the model {self.spec.model!r}: {type(e).__name__}: {e}"

    def _run(self, job: _Job, emit: Callable[[_Event], None], close: Callable[[], None]) -> None:
        try:
            try:
                model, tokenizer, prompt, grammar = self._prepare(job)
            except _RequestError as e:
                emit(("error", e.status, str(e)))
                return
            self._counters["requests"] += 1
            self._counters["prompt_tokens"] += len(prompt)
            emit(("start", len(prompt)))
            for index in range(job.n):
                self._generate(job, index, model, tokenizer, prompt, grammar, emit)
            emit(("done",))
        except _Cancelled:
            pass
        except Exception as e:
            with contextlib.suppress(_Cancelled):
                emit(("error", 500, f"in-process MLX failed: {type(e).__name__}: {e}"))
        finally:
            self._jobs.discard(job)
            close()

    def _prepare(self, job: _Job) -> tuple[Any, Any, list[int], str | None]:
        if self._load_error is not None:
            raise _RequestError(404, self._load_error)
        model, tokenizer = self._model_for(job.adapter)
        prompt = _prompt_ids(tokenizer, job.body, chat=job.chat)
        limit = self.max_model_len
        if limit is not None and len(prompt) + job.max_tokens > limit:
            raise _RequestError(
                400,
                f"prompt ({len(prompt)} tokens) + max_tokens ({job.max_tokens}) "
                f"exceeds max_model_len={limit}",
            )
        grammar = None
        if job.structured is not None:
            from unillm_mlx.after_thought import after_thought, thinks
            from unillm_mlx.grammar import ConstraintError, compile_constraint

            try:
                grammar = compile_constraint(job.structured, self._grammar_tokenizer(model, tokenizer))
                grammar = after_thought(grammar) if thinks(job.body) else grammar  # room to think first
            except ConstraintError as e:
                raise _RequestError(400, str(e)) from None
        return model, tokenizer, prompt, grammar

    def _grammar_tokenizer(self, model: Any, tokenizer: Any) -> Any:
        if self._lltokenizer is None:
            from unillm_mlx.grammar import tokenizer_for

            vocab = getattr(getattr(model, "args", None), "vocab_size", None) or len(tokenizer.vocab)
            self._lltokenizer = tokenizer_for(tokenizer, int(vocab))
        return self._lltokenizer

    def _model_for(self, adapter: str | None) -> tuple[Any, Any]:
        if adapter is None:
            return self._models[None]
        with self._lock:
            path = self._loras.get(adapter)
        if path is None:
            if not adapter.startswith(("/", "./", "../", "~")):
                raise _RequestError(404, f"no LoRA adapter named {adapter!r} is loaded")
            path = adapter
        resolved = str(Path(path).expanduser().resolve())
        if resolved not in self._models:
            self._models[resolved] = self._load_adapter(adapter, resolved)
            loaded = [k for k in self._models if k is not None]
            for old in loaded[: -self._max_loras]:
                del self._models[old]
        else:
            self._models[resolved] = self._models.pop(resolved)  # most recently used last
        return self._models[resolved]

    def _load_adapter(self, name: str, path: str) -> tuple[Any, Any]:
        from mlx_lm import load

        from unillm_mlx.peft import convert_peft_adapter, is_peft_adapter

        if not (Path(path) / "adapter_config.json").is_file():
            raise _RequestError(404, f"LoRA adapter {name!r}: no adapter_config.json in {path}")
        try:
            if is_peft_adapter(path):
                path = str(convert_peft_adapter(path, self._tmp / uuid.uuid4().hex))
            model, tokenizer, *_ = load(self.spec.model, adapter_path=path)
        except Exception as e:
            raise _RequestError(404, f"LoRA adapter {name!r} could not be loaded: {e}") from None
        return model, tokenizer

    def _generate(
        self,
        job: _Job,
        index: int,
        model: Any,
        tokenizer: Any,
        prompt: list[int],
        grammar: str | None,
        emit: Callable[[_Event], None],
    ) -> None:
        import mlx.core as mx
        from mlx_lm import stream_generate
        from mlx_lm.sample_utils import make_logits_processors, make_sampler

        body = job.body
        if body.get("seed") is not None:
            mx.random.seed(body["seed"] + index)
        sampler = make_sampler(
            body.get("temperature") or 0.0,
            top_p=body.get("top_p") or 0.0,
            min_p=body.get("min_p") or 0.0,
            top_k=body.get("top_k") or 0,
        )
        processors = make_logits_processors(
            None,
            body.get("repetition_penalty"),
            20,
            body.get("presence_penalty"),
            20,
            body.get("frequency_penalty"),
            20,
        )
        draft = self._draft
        if grammar is not None:
            from unillm_mlx.grammar import GrammarProcessor

            skip = 1 if draft is not None else len(prompt)  # mlx-lm passes these leading tokens
            processors.append(GrammarProcessor(self._grammar_tokenizer(model, tokenizer), grammar, skip=skip))
        kwargs: dict[str, Any] = {}
        if draft is not None:
            assert self.spec.speculative is not None
            kwargs = {"draft_model": draft, "num_draft_tokens": self.spec.speculative.num_tokens}
        stops = _StopText(job.stop)
        words = _Detokenizer(tokenizer, prompt)
        reason, tokens = "length", 0
        for out in stream_generate(
            model,
            tokenizer,
            mx.array(prompt),
            max_tokens=job.max_tokens,
            sampler=sampler,
            logits_processors=processors,
            **kwargs,
        ):
            if job.cancelled.is_set():
                raise _Cancelled
            tokens = out.generation_tokens
            self._counters["generation_tokens"] += 1
            self._counters["spec_decode_num_accepted_tokens"] += bool(out.from_draft)
            eos = out.finish_reason == "stop"
            logprobs = None
            if job.logprobs and not eos:
                logprobs = [_token_logprob(tokenizer, out.token, out.logprobs, job.top_logprobs)]
            # mlx-lm's own text (out.text) drops the first token's leading space; decode as vLLM does
            piece = "" if eos else words.add(out.token)
            if out.finish_reason is not None:
                piece += words.flush()
            text, stopped = stops.feed(piece)
            if text or logprobs:
                emit(("text", index, text, logprobs))
            if stopped:
                reason = "stop"
                break
            if out.finish_reason is not None:
                reason = out.finish_reason
                tail = stops.flush()
                if tail:
                    emit(("text", index, tail, None))
        emit(("finish", index, reason, tokens))


class _Detokenizer:
    """Generated tokens to text the way vLLM does it, so every engine answers the same text.

    Each new token is decoded after the last few tokens before it (the prompt's, at first) and
    only the new characters are kept: a first token's leading space stays (mlx-lm's streaming
    detokenizers trim it), and a character split across tokens waits for its last byte.
    """

    CONTEXT = 5  # prompt tokens decoded ahead of the first generated one (vLLM uses 5 too)

    def __init__(self, tokenizer: Any, prompt: list[int]) -> None:
        self._tokenizer = tokenizer
        self._ids = list(prompt[-self.CONTEXT :])
        self._prefix, self._read = 0, len(self._ids)

    def add(self, token: int) -> str:
        """The text that ``token`` completes ("" while a character is still incomplete)."""
        self._ids.append(token)
        return self._new_text(final=False)

    def flush(self) -> str:
        """Whatever is held back, at the end of the answer."""
        return self._new_text(final=True)

    def _new_text(self, *, final: bool) -> str:
        if self._read == len(self._ids):
            return ""

        def decode(ids: list[int]) -> str:
            return str(
                self._tokenizer.decode(ids, skip_special_tokens=True, clean_up_tokenization_spaces=False)
            )

        before, after = decode(self._ids[self._prefix : self._read]), decode(self._ids[self._prefix :])
        if len(after) <= len(before) or (after.endswith("\ufffd") and not final):
            return ""
        self._prefix, self._read = self._read, len(self._ids)
        return after[len(before) :]


def _model_context(model: str) -> int | None:
    """The context length a local model folder declares (vLLM's default ``max_model_len`` too)."""
    try:
        config = json.loads((Path(model).expanduser() / "config.json").read_text())
    except (OSError, ValueError):
        return None
    value = config.get("max_position_embeddings") if isinstance(config, dict) else None
    return value if isinstance(value, int) and value > 0 else None


def _template_messages(messages: list[Any]) -> list[Any]:
    """Messages as chat templates expect them: tool-call arguments as objects, text content."""
    out = []
    for m in messages:
        m = dict(m)
        if m.get("content") is None:
            m["content"] = ""
        if m.get("tool_calls"):
            m["tool_calls"] = [
                {**c, "function": {**c["function"], "arguments": _loads(c["function"].get("arguments"))}}
                for c in m["tool_calls"]
            ]
        out.append(m)
    return out


def _loads(arguments: Any) -> Any:
    try:
        return json.loads(arguments) if isinstance(arguments, str) else arguments
    except json.JSONDecodeError:
        return arguments


def _token_logprob(tokenizer: Any, token: int, logprobs: Any, top: int) -> dict[str, Any]:
    import mlx.core as mx

    entry: dict[str, Any] = {
        "token": tokenizer.decode([token]),
        "logprob": _finite(logprobs[token].item()),
        "top_logprobs": [],
    }
    if top > 0:
        ids: list[int] = mx.argpartition(-logprobs, kth=top - 1)[:top].tolist()  # type: ignore[assignment]
        values: list[float] = logprobs[mx.array(ids)].tolist()
        ranked = sorted(zip(ids, values, strict=True), key=lambda p: -p[1])
        entry["top_logprobs"] = [{"token": tokenizer.decode([i]), "logprob": _finite(v)} for i, v in ranked]
    return entry


def _finite(value: float) -> float | None:
    return None if math.isinf(value) or math.isnan(value) else value


def _prompt_ids(tokenizer: Any, body: dict[str, Any], *, chat: bool) -> list[int]:
    """The prompt's token ids: chat messages through the chat template, or the prompt text."""
    if chat:
        try:
            return list(
                tokenizer.apply_chat_template(
                    _template_messages(body["messages"]),
                    tools=body.get("tools") or None,
                    add_generation_prompt=True,
                    **(body.get("chat_template_kwargs") or {}),  # e.g. enable_thinking
                )
            )
        except Exception as e:
            raise _RequestError(400, f"cannot apply the chat template: {e}") from None
    text = body["prompt"]
    bos = tokenizer.bos_token
    return list(tokenizer.encode(text, add_special_tokens=bos is None or not text.startswith(bos)))


class _StopText:
    """Cuts the text at the first stop string, holding back what could be the start of one."""

    def __init__(self, stops: tuple[str, ...]) -> None:
        self._stops, self._pending = stops, ""

    def feed(self, text: str) -> tuple[str, bool]:
        if not self._stops:
            return text, False
        buf = self._pending + text
        cut = min((i for s in self._stops if (i := buf.find(s)) >= 0), default=-1)
        if cut >= 0:
            self._pending = ""
            return buf[:cut], True
        keep = max((k for s in self._stops for k in range(1, len(s)) if buf.endswith(s[:k])), default=0)
        self._pending = buf[len(buf) - keep :] if keep else ""
        return buf[: len(buf) - keep], False

    def flush(self) -> str:
        tail, self._pending = self._pending, ""
        return tail
