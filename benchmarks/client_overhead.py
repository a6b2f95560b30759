"""Client-side CPU overhead of unillm against raw httpx, the openai SDK and litellm.

What is measured, in one run, for every client:

* **CPU per request**: ``time.process_time()`` (user + system CPU of this process, all its
  threads) spent per non-streamed ``POST /v1/completions`` (64-token answer), over N
  sequential requests after a warm-up.
* **CPU per stream**: the same for one streamed completion of 64 SSE content chunks plus a
  usage chunk and ``[DONE]``, over M sequential streams after a warm-up.
* **Import time**: wall time of ``python -c "import X"`` in a fresh interpreter, median of 5
  runs, minus the median of ``python -c "pass"``. For unillm, ``import_s`` is ``import unillm``
  (lazy) and ``import_full_s`` is ``import unillm; unillm.connect`` (loads the real modules).

How: a tiny HTTP/1.1 server (raw sockets, pre-encoded answers, keep-alive, one thread per
connection) runs in a **separate process** on 127.0.0.1, so its CPU is not counted. It speaks
just enough of vLLM's OpenAI API: ``/version``, ``/v1/models``, ``/v1/completions`` and
``/v1/chat/completions``. Stream chunks are sent one by one, ``--chunk-gap-us`` apart (default
300 us; 0 sends them back to back), so each client reads them as an engine would deliver
them. The measured N requests (M streams) are split into rounds; each round runs every client
in turn (the order rotates), and the reported figure is the best round (as ``timeit`` does;
the medians are in the JSON too), so a burst of load from elsewhere on the machine only adds
noise to a round it can be dropped from. Every answer is checked (the full 64-token text, 64
content chunks, the usage count), so a broken client cannot look fast. The server also counts
the TCP connections each client opens, which shows whether it reuses its keep-alive connection.

``--quick`` (for smoke tests, ~15 s) runs fewer calls, times imports once and leaves out
litellm (its import alone takes 5-10 s here; ``--clients`` brings it back).

Run (from the repository root, with the dev venv)::

    .venv/bin/python benchmarks/client_overhead.py [--requests N] [--streams M] [--quick]

It prints a table, then, as the very last line of stdout, one JSON object with the ratios
(``per_request_vs_httpx``, ``per_stream_vs_httpx``, ``openai_per_*``, ``litellm_per_*``),
the absolute microseconds, the import times and the connection counts per client. There are
no timing asserts: this is a measurement, not a test.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import logging
import os
import socket
import statistics
import subprocess
import sys
import threading
import time
import traceback
import warnings
from collections.abc import Callable, Coroutine
from typing import Any

MODEL = "tiny"
CHUNKS = 64
TOKEN = "tok"
EXPECTED_TEXT = TOKEN * CHUNKS
PROMPT = "hello"
MAX_TOKENS = 64
USAGE = {"prompt_tokens": 1, "completion_tokens": CHUNKS, "total_tokens": CHUNKS + 1}
CLIENTS = ("httpx", "unillm", "openai", "litellm")
# litellm otherwise tries to download its model price map at import (no network here).
CHILD_ENV = {"LITELLM_LOCAL_MODEL_COST_MAP": "True", "LITELLM_LOG": "ERROR"}

# ---------------------------------------------------------------------------------------------
# The loopback server (runs in its own process: ``client_overhead.py --serve``)
# ---------------------------------------------------------------------------------------------


def _json_bytes(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


def _response(status: str, body: bytes, content_type: bytes = b"application/json") -> bytes:
    return (
        b"HTTP/1.1 "
        + status.encode()
        + b"\r\ncontent-type: "
        + content_type
        + b"\r\ncontent-length: "
        + str(len(body)).encode()
        + b"\r\n\r\n"
        + body
    )


def _chunk(payload: bytes) -> bytes:
    """One HTTP/1.1 chunked-encoding frame."""
    return f"{len(payload):x}\r\n".encode() + payload + b"\r\n"


def _sse(obj: Any) -> bytes:
    return _chunk(b"data: " + (obj if isinstance(obj, bytes) else _json_bytes(obj)) + b"\n\n")


class _Answers:
    """Every answer the server gives, encoded once."""

    def __init__(self) -> None:
        created = int(time.time())
        base = {"id": "cmpl-bench", "created": created, "model": MODEL}
        self.plain: dict[bytes, bytes] = {
            b"/version": _response("200 OK", _json_bytes({"version": "0.32.0"})),
            b"/v1/models": _response(
                "200 OK",
                _json_bytes(
                    {"object": "list", "data": [{"id": MODEL, "object": "model", "max_model_len": 512}]}
                ),
            ),
            b"/health": _response("200 OK", b""),
            b"/v1/completions": _response(
                "200 OK",
                _json_bytes(
                    {
                        **base,
                        "object": "text_completion",
                        "usage": USAGE,
                        "choices": [
                            {"index": 0, "text": EXPECTED_TEXT, "logprobs": None, "finish_reason": "length"}
                        ],
                    }
                ),
            ),
            b"/v1/chat/completions": _response(
                "200 OK",
                _json_bytes(
                    {
                        **base,
                        "object": "chat.completion",
                        "usage": USAGE,
                        "choices": [
                            {
                                "index": 0,
                                "message": {"role": "assistant", "content": EXPECTED_TEXT},
                                "logprobs": None,
                                "finish_reason": "length",
                            }
                        ],
                    }
                ),
            ),
        }
        self.not_found = _response("404 Not Found", _json_bytes({"error": "not found"}))
        head = (
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
            b"cache-control: no-cache\r\ntransfer-encoding: chunked\r\n\r\n"
        )

        def stream(obj: str, choice: Callable[[str | None], dict[str, Any]]) -> list[bytes]:
            frames = [
                _sse({**base, "object": obj, "choices": [choice("length" if i == CHUNKS - 1 else None)]})
                for i in range(CHUNKS)
            ]
            frames[0] = head + frames[0]
            tail = _sse({**base, "object": obj, "choices": [], "usage": USAGE})
            frames[-1] += tail + _sse(b"[DONE]") + b"0\r\n\r\n"
            return frames

        self.streams: dict[bytes, list[bytes]] = {
            b"/v1/completions": stream(
                "text_completion", lambda f: {"index": 0, "text": TOKEN, "logprobs": None, "finish_reason": f}
            ),
            b"/v1/chat/completions": stream(
                "chat.completion.chunk",
                lambda f: {"index": 0, "delta": {"content": TOKEN}, "logprobs": None, "finish_reason": f},
            ),
        }


class _Stats:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.paths: dict[str, int] = {}
        self.connections = 0

    def snapshot(self) -> bytes:
        with self.lock:
            return _response(
                "200 OK", _json_bytes({"paths": dict(self.paths), "connections": self.connections})
            )


def _recv_until(conn: socket.socket, buf: bytes, marker: bytes) -> tuple[bytes, bytes] | None:
    while marker not in buf:
        data = conn.recv(65536)
        if not data:
            return None
        buf += data
    head, _, rest = buf.partition(marker)
    return head, rest


def _read_body(conn: socket.socket, buf: bytes, headers: dict[bytes, bytes]) -> tuple[bytes, bytes]:
    if headers.get(b"transfer-encoding", b"").lower() == b"chunked":
        body = b""
        while True:
            got = _recv_until(conn, buf, b"\r\n")
            if got is None:
                raise ConnectionError("eof in chunked body")
            size_line, buf = got
            size = int(size_line.split(b";")[0], 16)
            while len(buf) < size + 2:
                data = conn.recv(65536)
                if not data:
                    raise ConnectionError("eof in chunked body")
                buf += data
            if size == 0:
                # no trailers expected; drop the final CRLF
                return body, buf[2:]
            body, buf = body + buf[:size], buf[size + 2 :]
    length = int(headers.get(b"content-length", b"0"))
    while len(buf) < length:
        data = conn.recv(65536)
        if not data:
            raise ConnectionError("eof in body")
        buf += data
    return buf[:length], buf[length:]


def _serve_connection(conn: socket.socket, answers: _Answers, stats: _Stats, gap: float) -> None:
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    buf = b""
    counted = False
    try:
        while True:
            got = _recv_until(conn, buf, b"\r\n\r\n")
            if got is None:
                return
            head, buf = got
            lines = head.split(b"\r\n")
            method, target, _ = lines[0].split(b" ", 2)
            headers = {}
            for line in lines[1:]:
                name, _, value = line.partition(b":")
                headers[name.strip().lower()] = value.strip()
            body, buf = _read_body(conn, buf, headers)
            path = target.split(b"?", 1)[0]
            if path == b"/_stats":
                conn.sendall(stats.snapshot())
            else:
                with stats.lock:
                    key = f"{method.decode()} {path.decode()}"
                    stats.paths[key] = stats.paths.get(key, 0) + 1
                    if not counted:
                        stats.connections += 1
                        counted = True
                frames = answers.streams.get(path) if method == b"POST" else None
                if frames is not None and json.loads(body or b"{}").get("stream"):
                    conn.sendall(frames[0])
                    for frame in frames[1:]:
                        if gap:
                            time.sleep(gap)
                        conn.sendall(frame)
                else:
                    conn.sendall(answers.plain.get(path, answers.not_found))
            if headers.get(b"connection", b"").lower() == b"close":
                return
    except (OSError, ValueError):
        return
    finally:
        conn.close()


def serve(gap_us: float) -> None:
    """Run the loopback server until killed; print its port on the first line of stdout."""
    answers, stats = _Answers(), _Stats()
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", 0))
    listener.listen(128)
    print(listener.getsockname()[1], flush=True)
    while True:
        conn, _ = listener.accept()
        threading.Thread(
            target=_serve_connection, args=(conn, answers, stats, gap_us / 1e6), daemon=True
        ).start()


class Server:
    """The loopback server in a child process; ``stop()`` ends it by PID."""

    def __init__(self, gap_us: float) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "--serve", "--chunk-gap-us", str(gap_us)],
            stdout=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line.strip():
            self.stop()
            raise RuntimeError("the benchmark server did not start")
        self.port = int(line)
        self.base_url = f"http://127.0.0.1:{self.port}"

    def stats(self) -> dict[str, Any]:
        """Request counts per path and connections seen so far (over a throwaway socket)."""
        with socket.create_connection(("127.0.0.1", self.port)) as s:
            s.sendall(b"GET /_stats HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
            data = b""
            while chunk := s.recv(65536):
                data += chunk
        result: dict[str, Any] = json.loads(data.partition(b"\r\n\r\n")[2])
        return result

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()


# ---------------------------------------------------------------------------------------------
# The clients: each does the same thing its users would write
# ---------------------------------------------------------------------------------------------

StreamResult = tuple[list[str], int | None]  # content pieces, usage.completion_tokens


class Client:
    """One library under test: ``request()`` and ``stream()`` return what was received."""

    name = ""

    async def request(self) -> tuple[str, int | None]:
        raise NotImplementedError

    async def stream(self) -> StreamResult:
        raise NotImplementedError

    async def aclose(self) -> None:
        pass


class HttpxClient(Client):
    """The baseline: httpx.AsyncClient, json.loads, aiter_lines + json.loads per ``data:``."""

    name = "httpx"

    def __init__(self, base_url: str) -> None:
        import httpx

        self._client = httpx.AsyncClient(base_url=base_url)
        self._body = {"model": MODEL, "prompt": PROMPT, "max_tokens": MAX_TOKENS}
        self._stream_body = {**self._body, "stream": True, "stream_options": {"include_usage": True}}

    async def request(self) -> tuple[str, int | None]:
        response = await self._client.post("/v1/completions", json=self._body)
        response.raise_for_status()
        body = json.loads(response.content)
        return body["choices"][0]["text"], body["usage"]["completion_tokens"]

    async def stream(self) -> StreamResult:
        parts: list[str] = []
        usage: int | None = None
        async with self._client.stream("POST", "/v1/completions", json=self._stream_body) as r:
            r.raise_for_status()
            async for line in r.aiter_lines():  # read to the end so the connection is reused
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                chunk = json.loads(line[6:])
                for choice in chunk["choices"]:
                    if choice["text"]:
                        parts.append(choice["text"])
                if chunk.get("usage"):
                    usage = chunk["usage"]["completion_tokens"]
        return parts, usage

    async def aclose(self) -> None:
        await self._client.aclose()


class UnillmClient(Client):
    name = "unillm"

    def __init__(self, base_url: str) -> None:
        import unillm

        self._llm = unillm.connect("vllm", base_url, model=MODEL)

    async def request(self) -> tuple[str, int | None]:
        r = await self._llm.generate(PROMPT, max_tokens=MAX_TOKENS)
        return r.text, r.usage.completion_tokens

    async def stream(self) -> StreamResult:
        parts: list[str] = []
        usage: int | None = None
        async for d in self._llm.stream(PROMPT, max_tokens=MAX_TOKENS):
            if d.text:
                parts.append(d.text)
            if d.usage is not None:
                usage = d.usage.completion_tokens
        return parts, usage

    async def aclose(self) -> None:
        await self._llm.aclose()


class OpenAIClient(Client):
    name = "openai"

    def __init__(self, base_url: str) -> None:
        import openai

        self._client = openai.AsyncOpenAI(base_url=f"{base_url}/v1", api_key="x")

    async def request(self) -> tuple[str, int | None]:
        r = await self._client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=MAX_TOKENS)
        return r.choices[0].text, r.usage.completion_tokens if r.usage else None

    async def stream(self) -> StreamResult:
        parts: list[str] = []
        usage: int | None = None
        s = await self._client.completions.create(
            model=MODEL,
            prompt=PROMPT,
            max_tokens=MAX_TOKENS,
            stream=True,
            stream_options={"include_usage": True},
        )
        async for chunk in s:
            for choice in chunk.choices:
                if choice.text:
                    parts.append(choice.text)
            if chunk.usage:
                usage = chunk.usage.completion_tokens
        return parts, usage

    async def aclose(self) -> None:
        await self._client.close()


class LitellmClient(Client):
    name = "litellm"

    def __init__(self, base_url: str) -> None:
        os.environ.update(CHILD_ENV)
        # pydantic warns about litellm's own types when they are first used
        warnings.filterwarnings("ignore", category=UserWarning, module=r"pydantic\..*")
        import litellm

        litellm.telemetry = False
        litellm.suppress_debug_info = True
        for name in ("LiteLLM", "LiteLLM Router", "LiteLLM Proxy", "litellm"):
            logging.getLogger(name).setLevel(logging.CRITICAL)
        self._litellm = litellm
        self._kw: dict[str, Any] = {
            "model": f"openai/{MODEL}",
            "api_base": f"{base_url}/v1",
            "api_key": "x",
            "prompt": PROMPT,
            "max_tokens": MAX_TOKENS,
        }

    async def request(self) -> tuple[str, int | None]:
        r = await self._litellm.atext_completion(**self._kw)
        usage = getattr(r, "usage", None)
        return r.choices[0].text, usage.completion_tokens if usage else None

    async def stream(self) -> StreamResult:
        parts: list[str] = []
        usage: int | None = None
        s = await self._litellm.atext_completion(
            **self._kw, stream=True, stream_options={"include_usage": True}
        )
        async for chunk in s:
            for choice in chunk.choices or ():
                if choice.text:
                    parts.append(choice.text)
            if getattr(chunk, "usage", None):
                usage = chunk.usage.completion_tokens
        return parts, usage

    async def aclose(self) -> None:
        from litellm.llms.custom_httpx.async_client_cleanup import close_litellm_async_clients

        await close_litellm_async_clients()  # type: ignore[no-untyped-call]


FACTORIES: dict[str, Callable[[str], Client]] = {
    "httpx": HttpxClient,
    "unillm": UnillmClient,
    "openai": OpenAIClient,
    "litellm": LitellmClient,
}


class WrongAnswer(Exception):
    """A client returned something else than the server sent."""


def _check_request(got: tuple[str, int | None]) -> None:
    text, tokens = got
    if text != EXPECTED_TEXT or tokens != CHUNKS:
        raise WrongAnswer(
            f"non-stream answer: text={text[:40]!r}... ({len(text)} chars), completion_tokens={tokens}"
        )


def _check_stream(got: StreamResult) -> None:
    parts, tokens = got
    if len(parts) != CHUNKS or "".join(parts) != EXPECTED_TEXT or tokens != CHUNKS:
        raise WrongAnswer(
            f"stream: {len(parts)} content chunks (want {CHUNKS}), "
            f"text ok={''.join(parts) == EXPECTED_TEXT}, usage={tokens}"
        )


# ---------------------------------------------------------------------------------------------
# Measurement
# ---------------------------------------------------------------------------------------------

Phase = Callable[[], Coroutine[Any, Any, Any]]


async def _cpu_per_call(call: Phase, check: Callable[[Any], None], count: int) -> float:
    """CPU seconds per call over ``count`` sequential calls (each answer checked)."""
    gc.collect()
    start = time.process_time()
    for _ in range(count):
        check(await call())
    return (time.process_time() - start) / count


class Run:
    """Per-client results of one benchmark run."""

    def __init__(self, names: list[str]) -> None:
        self.names = names
        self.request_rounds: dict[str, list[float]] = {n: [] for n in names}
        self.stream_rounds: dict[str, list[float]] = {n: [] for n in names}
        self.errors: dict[str, str] = {}
        self.paths: dict[str, dict[str, int]] = {}
        self.connections: dict[str, int] = {n: 0 for n in names}
        self.import_s: dict[str, float | None] = {}
        self.unclosed = 0  # "Unclosed client session/connector" reports from the event loop

    def fail(self, name: str, exc: BaseException) -> None:
        self.errors[name] = f"{type(exc).__name__}: {exc}"[:300]
        print(f"  ! {name} failed: {self.errors[name]}", file=sys.stderr)
        if not isinstance(exc, WrongAnswer):
            traceback.print_exc(file=sys.stderr)

    def us(self, rounds: dict[str, list[float]], name: str, how: str = "best") -> float | None:
        """Microseconds per call: the best round, or the median one."""
        values = rounds.get(name)
        if name in self.errors or not values:
            return None
        return (min(values) if how == "best" else statistics.median(values)) * 1e6


def _diff(after: dict[str, Any], before: dict[str, Any]) -> tuple[dict[str, int], int]:
    paths = {k: v - before["paths"].get(k, 0) for k, v in after["paths"].items()}
    return ({k: v for k, v in paths.items() if v}, after["connections"] - before["connections"])


async def measure(server: Server, names: list[str], requests: int, streams: int, rounds: int) -> Run:
    run = Run(names)
    loop = asyncio.get_running_loop()

    def on_loop_error(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        # litellm's aiohttp transport leaves a session behind per call: count, don't print
        if str(context.get("message", "")).startswith("Unclosed"):
            run.unclosed += 1
        else:
            loop.default_exception_handler(context)

    loop.set_exception_handler(on_loop_error)
    clients: dict[str, Client] = {}
    for name in names:
        try:
            started = time.perf_counter()
            before = server.stats()
            client = FACTORIES[name](server.base_url)
            clients[name] = client
            for _ in range(max(20, requests // (2 * rounds))):  # warm-up (+ unillm discovery)
                _check_request(await client.request())
            for _ in range(max(3, streams // (2 * rounds))):
                _check_stream(await client.stream())
            run.paths[name], _ = _diff(server.stats(), before)
            print(f"  {name}: set up and warmed up in {time.perf_counter() - started:.1f} s", file=sys.stderr)
        except Exception as e:
            run.fail(name, e)
    live = [n for n in names if n in clients and n not in run.errors]
    for r in range(rounds):
        order = live[r % len(live) :] + live[: r % len(live)] if live else []
        for name in order:
            if name in run.errors:
                continue
            client = clients[name]
            try:
                before = server.stats()
                run.request_rounds[name].append(
                    await _cpu_per_call(client.request, _check_request, requests // rounds)
                )
                run.stream_rounds[name].append(
                    await _cpu_per_call(client.stream, _check_stream, streams // rounds)
                )
                run.connections[name] += _diff(server.stats(), before)[1]
            except Exception as e:
                run.fail(name, e)
        print(f"  round {r + 1}/{rounds} done", file=sys.stderr)
    for client in clients.values():
        try:
            await client.aclose()
        except Exception as e:
            print(f"  ! closing {client.name}: {e!r}", file=sys.stderr)
    return run


IMPORT_CODE = {
    "httpx": "import httpx",
    "unillm": "import unillm",
    "unillm_full": "import unillm; unillm.connect",
    "openai": "import openai",
    "litellm": "import litellm",
}


def _wall(code: str) -> float:
    env = {**os.environ, **CHILD_ENV}
    start = time.perf_counter()
    subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    return time.perf_counter() - start


def import_times(names: list[str], runs: int) -> dict[str, float | None]:
    """Median wall time of ``python -c "import X"`` minus that of ``python -c "pass"``."""
    base = statistics.median(_wall("pass") for _ in range(runs))
    result: dict[str, float | None] = {}
    for name in names:
        try:
            result[name] = max(0.0, statistics.median(_wall(IMPORT_CODE[name]) for _ in range(runs)) - base)
        except subprocess.CalledProcessError:
            result[name] = None
    return result


# ---------------------------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------------------------


def _ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 3) if a is not None and b else None


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def report(run: Run, args: argparse.Namespace) -> dict[str, Any]:
    req = {n: run.us(run.request_rounds, n) for n in CLIENTS}
    strm = {n: run.us(run.stream_rounds, n) for n in CLIENTS}
    imp = run.import_s
    print()
    print(
        f"CPU per call, best of {args.rounds} rounds; {args.requests} requests, "
        f"{args.streams} streams of {CHUNKS} chunks ({args.chunk_gap_us:g} us apart)"
    )
    header = (
        f"{'client':<9} {'us/request':>11} {'x httpx':>8} {'us/stream':>10} {'x httpx':>8} "
        f"{'import s':>9} {'conns':>6}"
    )
    print(header)
    print("-" * len(header))
    for n in CLIENTS:
        if n not in run.names:
            print(f"{n:<9} skipped (not in --clients; --quick leaves out litellm)")
            continue
        if n in run.errors:
            print(f"{n:<9} ERROR: {run.errors[n][:80]}")
            continue
        imports = _fmt(imp.get(n), ".3f")
        if n == "unillm":
            imports += f" ({_fmt(imp.get('unillm_full'), '.2f')} full)"
        print(
            f"{n:<9} {_fmt(req[n], '11.1f')} {_fmt(_ratio(req[n], req['httpx']), '8.2f')} "
            f"{_fmt(strm[n], '10.1f')} {_fmt(_ratio(strm[n], strm['httpx']), '8.2f')} "
            f"{imports:>9} {run.connections.get(n, 0):>6}"
        )
    print("(conns: TCP connections opened during the measured rounds; 1 or 0 means reuse)")
    if run.unclosed:
        print(
            f"(the event loop reported {run.unclosed} unclosed sessions/connectors, "
            "left behind by litellm's aiohttp transport)"
        )
    for n, paths in run.paths.items():
        print(f"  {n} warm-up hit: {', '.join(f'{k} x{v}' for k, v in sorted(paths.items()))}")
    return {
        "per_request_vs_httpx": _ratio(req["unillm"], req["httpx"]),
        "per_stream_vs_httpx": _ratio(strm["unillm"], strm["httpx"]),
        "import_s": _round(imp.get("unillm")),
        "import_full_s": _round(imp.get("unillm_full")),
        "openai_per_request_vs_httpx": _ratio(req["openai"], req["httpx"]),
        "openai_per_stream_vs_httpx": _ratio(strm["openai"], strm["httpx"]),
        "litellm_per_request_vs_httpx": _ratio(req["litellm"], req["httpx"]),
        "litellm_per_stream_vs_httpx": _ratio(strm["litellm"], strm["httpx"]),
        "us_per_request": {n: _round(v, 1) for n, v in req.items()},
        "us_per_stream": {n: _round(v, 1) for n, v in strm.items()},
        "us_per_request_median": {n: _round(run.us(run.request_rounds, n, "median"), 1) for n in CLIENTS},
        "us_per_stream_median": {n: _round(run.us(run.stream_rounds, n, "median"), 1) for n in CLIENTS},
        "import_s_by_client": {n: _round(v) for n, v in imp.items()},
        "connections": run.connections,
        "unclosed_reports": run.unclosed,
        "errors": run.errors,
        "skipped": [n for n in CLIENTS if n not in run.names],
        "requests": args.requests,
        "streams": args.streams,
        "rounds": args.rounds,
        "chunks_per_stream": CHUNKS,
        "chunk_gap_us": args.chunk_gap_us,
        "quick": args.quick,
        "python": sys.version.split()[0],
    }


def _round(value: float | None, digits: int = 3) -> float | None:
    return None if value is None else round(value, digits)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--requests", type=int, help="measured non-stream requests (800)")
    parser.add_argument("--streams", type=int, help="measured streams (80)")
    parser.add_argument("--rounds", type=int, help="rounds the work is split into (8)")
    parser.add_argument(
        "--quick",
        action="store_true",
        help="small run for smoke tests (~15 s): 200 requests, 20 streams, "
        "4 rounds, imports timed once, no litellm",
    )
    parser.add_argument(
        "--chunk-gap-us",
        type=float,
        default=300.0,
        help="server pause between stream chunks in us (0: back to back)",
    )
    parser.add_argument(
        "--clients",
        help="comma-separated subset of "
        + ",".join(CLIENTS)
        + " (default: all; with --quick all but litellm)",
    )
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve:
        serve(args.chunk_gap_us)
        return 0
    args.requests = args.requests or (200 if args.quick else 800)
    args.streams = args.streams or (20 if args.quick else 80)
    args.rounds = max(1, min(args.rounds or (4 if args.quick else 8), args.requests, args.streams))
    if args.clients is None:
        args.clients = "httpx,unillm,openai" if args.quick else ",".join(CLIENTS)
    names = [n for n in args.clients.split(",") if n]
    unknown = set(names) - set(CLIENTS)
    if unknown or "httpx" not in names:
        parser.error(f"--clients must include httpx and only name {', '.join(CLIENTS)}")

    server = Server(args.chunk_gap_us)
    try:
        print(f"server pid {server.proc.pid} at {server.base_url}", file=sys.stderr)
        run = asyncio.run(measure(server, names, args.requests, args.streams, args.rounds))
    finally:
        server.stop()
    timed = ["httpx", "unillm", "unillm_full"] + [n for n in ("openai", "litellm") if n in names]
    print("timing imports...", file=sys.stderr)
    run.import_s = import_times(timed, 1 if args.quick else 5)
    summary = report(run, args)
    print(json.dumps(summary, separators=(",", ":")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
