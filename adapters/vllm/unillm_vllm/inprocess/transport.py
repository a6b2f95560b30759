"""The httpx transport of in-process vLLM: requests go to vLLM's engine in a worker process.

The worker (:mod:`unillm_vllm.inprocess.worker`) runs under the vLLM env's interpreter and
drives ``LLMEngine`` directly, with no HTTP server; this transport starts it on the first
request, writes each request as a job line on its stdin and answers from the result lines on
its stdout, matched by id. Bodies are translated by :mod:`unillm_vllm.inprocess.translate`.
A worker that exits fails the requests in flight and every later one with a transport error
(``EngineUnavailable`` to the caller), naming its exit code and the last lines of its log.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import signal
import tempfile
from collections import deque
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx

from unillm_vllm.inprocess.translate import (
    CHAT_PATH,
    COMPLETIONS_PATH,
    IN_PROCESS_SUFFIX,
    Refused,
    answer_body,
    job,
)

__all__ = ["WORKER", "WorkerTransport"]

#: The worker script, run by the vLLM env's interpreter.
WORKER = Path(__file__).with_name("worker.py")
_Handler = Callable[[httpx.Request], Awaitable[httpx.Response]]
_LOG_TAIL = 20


class WorkerTransport(httpx.AsyncBaseTransport):
    """An httpx transport answering vLLM's OpenAI routes from a vLLM engine worker (asyncio).

    Args:
        python: The interpreter of the env that has vLLM.
        argv: vLLM engine flags for the worker (``--model ...``).
        env: Variables added to the worker's environment.
        served_name: The model name discovery reports.
    """

    def __init__(self, python: str, argv: list[str], env: dict[str, str], served_name: str) -> None:
        self.python, self.argv, self.env, self.served_name = python, argv, env, served_name
        self._process: asyncio.subprocess.Process | None = None
        self._ready: dict[str, Any] | None = None
        self._starting = asyncio.Lock()
        self._waiting: dict[str, asyncio.Future[dict[str, Any]]] = {}
        self._ids = (str(i) for i in itertools.count())
        self._reader: asyncio.Task[None] | None = None
        self._gone: str | None = None  # why the worker is no more
        self._log_fd, self._log = tempfile.mkstemp(prefix="unillm-vllm-worker-", suffix=".log")
        self._routes: dict[tuple[str, str], _Handler] = {
            ("GET", "/health"): self._health,
            ("GET", "/version"): self._version,
            ("GET", "/v1/models"): self._models,
            ("GET", "/metrics"): self._metrics,
            ("POST", CHAT_PATH): self._generate,
            ("POST", COMPLETIONS_PATH): self._generate,
        }

    @property
    def pid(self) -> int | None:
        """The worker's process id (None before the first request)."""
        return self._process.pid if self._process is not None else None

    @property
    def log_path(self) -> str:
        """The worker's log (vLLM's own output; removed when the transport closes)."""
        return self._log

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        """Answer ``request`` as vLLM's server would (404 for a route the worker does not serve)."""
        handler = self._routes.get((request.method, request.url.path))
        if handler is None:
            return httpx.Response(404, content=b"Not Found")
        return await handler(request)

    async def aclose(self) -> None:
        """Stop the worker: end its input, then terminate its process group if it lingers."""
        process, self._process = self._process, None
        if process is None:
            self._drop_log()
            return
        if self._gone is None:
            self._gone = "the in-process vLLM worker was stopped"
        if process.stdin is not None:
            process.stdin.close()
        try:
            await asyncio.wait_for(process.wait(), 10)
        except asyncio.TimeoutError:
            for sig in (signal.SIGTERM, signal.SIGKILL):
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, sig)
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(process.wait(), 10)
                    break
        if self._reader is not None:
            await self._reader
        self._drop_log()

    # -- routes ----------------------------------------------------------------------------
    async def _health(self, request: httpx.Request) -> httpx.Response:
        await self._started()
        return httpx.Response(200, json={"status": "ok"})

    async def _version(self, request: httpx.Request) -> httpx.Response:
        ready = await self._started()
        return httpx.Response(200, json={"version": f"{ready['version']}{IN_PROCESS_SUFFIX}"})

    async def _models(self, request: httpx.Request) -> httpx.Response:
        ready = await self._started()
        card = {"id": self.served_name, "object": "model", "max_model_len": ready["max_model_len"]}
        return httpx.Response(200, json={"object": "list", "data": [card]})

    async def _metrics(self, request: httpx.Request) -> httpx.Response:
        """The two gauges a batch paces by: requests in the worker, split at its batch size."""
        ready = await self._started()
        text = queue_gauges(len(self._waiting), int(ready.get("max_num_seqs") or 1))
        return httpx.Response(200, text=text, headers={"content-type": "text/plain"})

    async def _generate(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        try:
            work = job(path, json.loads(await request.aread()), next(self._ids))
        except (Refused, ValueError, TypeError, AttributeError) as e:
            return _error(400, str(e))
        await self._started()
        result = await self._send(work)
        if "error" in result:
            status = result.get("status")
            if not (isinstance(status, int) and 400 <= status < 600):
                status = 500
            return _error(status, str(result["error"])[:2000])
        try:
            return httpx.Response(200, json=answer_body(path, self.served_name, result))
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            return _error(502, f"the in-process vLLM worker's answer is malformed: {type(e).__name__}")

    # -- the worker ------------------------------------------------------------------------
    async def _started(self) -> dict[str, Any]:
        if self._ready is not None and self._gone is None:
            return self._ready
        async with self._starting:
            if self._gone is not None:
                raise httpx.ReadError(self._gone)
            if self._ready is None:
                self._ready = await self._start()
            return self._ready

    async def _start(self) -> dict[str, Any]:
        self._process = process = await asyncio.create_subprocess_exec(
            self.python,
            str(WORKER),
            *self.argv,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=self._log_fd,
            env={**os.environ, **self.env},
            start_new_session=True,  # its own process group: stopped whole, spared the caller's Ctrl-C
            limit=1 << 26,  # the longest answer line
        )
        assert process.stdout is not None
        first = await process.stdout.readline()
        try:
            line = json.loads(first) if first else {}
        except json.JSONDecodeError:
            line = {}
        if not isinstance(line, dict) or not isinstance(line.get("ready"), dict):
            why = (line.get("fatal") if isinstance(line, dict) else None) or (
                f"exited with code {await process.wait()}"
            )
            self._gone = f"the in-process vLLM worker did not start: {why}{self._tail()}"
            raise httpx.ConnectError(self._gone)
        self._reader = asyncio.create_task(self._read(process))
        return dict(line["ready"])

    async def _send(self, work: dict[str, Any]) -> dict[str, Any]:
        process = self._process
        if self._gone is not None or process is None or process.stdin is None:
            raise httpx.ReadError(self._gone or "the in-process vLLM worker is not running")
        answer: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._waiting[work["id"]] = answer
        try:
            process.stdin.write(json.dumps(work, ensure_ascii=False).encode() + b"\n")
            await process.stdin.drain()
            return await answer
        except (BrokenPipeError, ConnectionResetError):
            raise httpx.ReadError(self._gone or "the in-process vLLM worker closed its input") from None
        finally:
            self._waiting.pop(work["id"], None)

    async def _read(self, process: asyncio.subprocess.Process) -> None:
        assert process.stdout is not None
        try:
            while line := await process.stdout.readline():
                result = json.loads(line)
                if not isinstance(result, dict):
                    raise ValueError(f"a JSON {type(result).__name__}")
                answer = self._waiting.pop(str(result.get("id")), None)
                if answer is not None and not answer.done():
                    answer.set_result(result)
        except ValueError as e:  # not JSON, not an object, or longer than the line limit
            self._gone = (
                f"the in-process vLLM worker wrote a line that is no answer ({str(e)[:200]}): stopped"
            )
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
        code = await process.wait()
        if self._gone is None:
            self._gone = f"the in-process vLLM worker exited (code {code}){self._tail()}"
        for answer in self._waiting.values():
            if not answer.done():
                answer.set_exception(httpx.ReadError(self._gone))
        self._waiting.clear()

    def _drop_log(self) -> None:
        if self._log_fd >= 0:
            os.close(self._log_fd)
            self._log_fd = -1
            with contextlib.suppress(OSError):
                os.unlink(self._log)

    def _tail(self) -> str:
        try:
            with open(self._log, encoding="utf-8", errors="replace") as f:
                lines = deque(f, maxlen=_LOG_TAIL)
        except OSError:
            return ""
        return "; its log ends:\n" + "".join(lines) if lines else ""


def queue_gauges(in_flight: int, batch: int) -> str:
    """vLLM's running and waiting gauges (Prometheus text) for ``in_flight`` requests in an engine
    that runs ``batch`` at a time (pure)."""
    running, waiting = min(in_flight, batch), max(0, in_flight - batch)
    return (
        "# TYPE vllm:num_requests_running gauge\n"
        f"vllm:num_requests_running {running}\n"
        "# TYPE vllm:num_requests_waiting gauge\n"
        f"vllm:num_requests_waiting {waiting}\n"
    )


def _error(status: int, message: str) -> httpx.Response:
    return httpx.Response(
        status, json={"error": {"message": message, "type": "BadRequestError", "code": status}}
    )
