"""Client-side CPU overhead of unillm against raw httpx, raw aiohttp, the openai SDK and litellm.

What is measured, in one run, for every client:

* **CPU per request**: ``time.process_time()`` (user + system CPU of this process, all its
  threads) spent per non-streamed ``POST /v1/completions`` (64-token answer), over N
  sequential requests after a warm-up.
* **CPU per stream**: the same for one streamed completion of 64 SSE content chunks plus a
  usage chunk and ``[DONE]``, over M sequential streams after a warm-up.
* **Import time**: wall time of ``python -c "import X"`` in a fresh interpreter, median of 5
  runs, minus the median of ``python -c "pass"``. For unillm, ``import_s`` is ``import unillm``
  (lazy) and ``import_full_s`` is ``import unillm; unillm.connect(...)`` (loads the real modules).
  ``first_request_s`` is a user's whole start, for unillm and httpx: import, client and the first
  request on the loopback server (unillm's default wire, aiohttp, loads only then).
* **Memory per concurrent stream** (``--memory-streams``, 1,000 and 5,000): in a fresh process
  per client, that many streams are opened at once against a server that holds each after its
  first chunk; the growth of resident memory, divided by the count.

The clients: ``httpx`` and ``aiohttp`` (bare loops: the floors), ``unillm`` (its default wire,
aiohttp), ``unillm_httpx`` (``Pool(http="httpx")``), ``unillm_fleet`` (a fleet of 2 replicas,
each its own server process), ``openai`` (on httpx), ``openai_aiohttp`` (its aiohttp backend,
``DefaultAioHttpClient``) and ``litellm``.

How: a tiny HTTP/1.1 server (raw sockets, pre-encoded answers, keep-alive, one thread per
connection) runs in a **separate process** on 127.0.0.1, so its CPU is not counted. It speaks
just enough of vLLM's OpenAI API: ``/version``, ``/v1/models``, ``/v1/completions`` and
``/v1/chat/completions``. Stream chunks are sent one by one, ``--chunk-gap-us`` apart (default
300 us; 0 sends them back to back), so each client reads them as an engine would deliver
them. The measured N requests (M streams) are split into rounds; each round runs every client
in turn (the order rotates), and the reported figure is the median round (the best rounds are in
the JSON too), so a burst of load from elsewhere on the machine only moves a round the median
leaves out. Every answer is checked (the full 64-token text, 64 content chunks, the usage
count), so a broken client cannot look fast. The server also counts the TCP connections each
client opens, which shows whether it reuses its keep-alive connection.

``--quick`` (for smoke tests, ~30 s) runs fewer calls, times imports once, measures memory at
50 streams and leaves out litellm (its import alone takes 5-10 s here; ``--clients`` brings it
back).

Run (from the repository root, with the dev venv)::

    .venv/bin/python benchmarks/client_overhead.py [--requests N] [--streams M] [--quick]

It prints a table, then, as the very last line of stdout, one JSON object with the ratios
(``per_request_vs_httpx``, ``per_stream_vs_httpx``, ``per_*_vs_aiohttp``, ``fleet_per_*_vs_direct``,
``openai_*``, ``litellm_*``), issue 22's ``goals`` (each true or false), the absolute
microseconds, the import times, the memory per stream and the connection counts per client.
There are no timing asserts: this is a measurement, not a test.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import logging
import os
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
import traceback
import warnings
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any, Literal

MODEL = "tiny"
CHUNKS = 64
TOKEN = "tok"
EXPECTED_TEXT = TOKEN * CHUNKS
PROMPT = "hello"
MAX_TOKENS = 64
USAGE = {"prompt_tokens": 1, "completion_tokens": CHUNKS, "total_tokens": CHUNKS + 1}
CLIENTS = (
    "httpx",
    "aiohttp",
    "unillm",
    "unillm_httpx",
    "unillm_fleet",
    "openai",
    "openai_aiohttp",
    "litellm",
)
#: Clients whose memory per concurrent stream is measured (``--memory-streams``).
MEMORY_CLIENTS = ("httpx", "aiohttp", "unillm", "unillm_httpx", "unillm_fleet")
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
    def __init__(self, hold: bool = False) -> None:
        self.lock = threading.Lock()
        self.paths: dict[str, int] = {}
        self.connections = 0
        self.held = 0  # streams waiting, their first chunk sent, for /_release (--hold)
        self.release = threading.Event()
        if not hold:
            self.release.set()

    def snapshot(self) -> bytes:
        with self.lock:
            return _response(
                "200 OK",
                _json_bytes({"paths": dict(self.paths), "connections": self.connections, "held": self.held}),
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


def _serve_connection(
    conn: socket.socket, answers: _Answers, stats: _Stats, gap: float, first: float = 0.0
) -> None:
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
            elif path == b"/_release":
                stats.release.set()
                conn.sendall(_response("200 OK", b""))
            else:
                with stats.lock:
                    key = f"{method.decode()} {path.decode()}"
                    stats.paths[key] = stats.paths.get(key, 0) + 1
                    if not counted:
                        stats.connections += 1
                        counted = True
                frames = answers.streams.get(path) if method == b"POST" else None
                if frames is not None and json.loads(body or b"{}").get("stream"):
                    if first:
                        time.sleep(first)
                    conn.sendall(frames[0])
                    if not stats.release.is_set():
                        with stats.lock:
                            stats.held += 1
                        stats.release.wait()
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


def serve(gap_us: float, hold: bool = False, first_us: float = 0.0) -> None:
    """Run the loopback server until killed; print its port on the first line of stdout.

    ``hold``: every stream stops after its first chunk until a request to ``/_release`` (memory runs);
    ``first_us``: each stream's first chunk waits this long (a paced engine's time to first token).
    """
    answers, stats = _Answers(), _Stats(hold)
    threading.stack_size(256 * 1024)  # thousands of connections at once in memory runs
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", 0))
    listener.listen(4096)
    print(listener.getsockname()[1], flush=True)
    while True:
        conn, _ = listener.accept()
        threading.Thread(
            target=_serve_connection, args=(conn, answers, stats, gap_us / 1e6, first_us / 1e6), daemon=True
        ).start()


def stop_child(proc: subprocess.Popen[Any], grace: float = 5.0) -> None:
    """End a benchmark's child process: terminate, kill after ``grace`` seconds; close its stdout."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    if proc.stdout is not None:
        proc.stdout.close()


class Server:
    """The loopback server in a child process; ``stop()`` ends it by PID."""

    def __init__(self, gap_us: float, hold: bool = False, first_us: float = 0.0) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "--serve", "--chunk-gap-us", str(gap_us)]
            + ["--first-chunk-us", str(first_us)]
            + (["--hold"] if hold else []),
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

    def stats(self, path: str = "/_stats") -> dict[str, Any]:
        """Request counts per path and connections seen so far (over a throwaway socket)."""
        with socket.create_connection(("127.0.0.1", self.port)) as s:
            s.sendall(f"GET {path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n".encode())
            data = b""
            while chunk := s.recv(65536):
                data += chunk
        result: dict[str, Any] = json.loads(data.partition(b"\r\n\r\n")[2] or b"{}")
        return result

    def stop(self) -> None:
        stop_child(self.proc)


# ---------------------------------------------------------------------------------------------
# The clients: each does the same thing its users would write
# ---------------------------------------------------------------------------------------------

StreamResult = tuple[list[str], int | None]  # content pieces, usage.completion_tokens
#: What the raw-HTTP baselines send: the whole answer, and the stream with usage in its last chunk.
BODY = {"model": MODEL, "prompt": PROMPT, "max_tokens": MAX_TOKENS}
STREAM_BODY = {**BODY, "stream": True, "stream_options": {"include_usage": True}}


def answer(body: bytes) -> tuple[str, int | None]:
    """A whole ``/v1/completions`` answer of the raw baselines: its text and completion tokens."""
    doc = json.loads(body)
    return doc["choices"][0]["text"], doc["usage"]["completion_tokens"]


async def read_sse(lines: AsyncIterator[Any], done: str | bytes) -> StreamResult:
    """A raw baseline's SSE stream, read to the end so the connection is reused: its texts and
    the completion tokens of its usage chunk. ``lines`` come without line ends, as ``done``
    (``data: [DONE]`` as str or bytes)."""
    prefix = done[:6]  # "data: "
    parts: list[str] = []
    usage: int | None = None
    async for line in lines:
        if not line.startswith(prefix) or line == done:
            continue
        chunk = json.loads(line[6:])
        for choice in chunk["choices"]:
            if choice["text"]:
                parts.append(choice["text"])
        if chunk.get("usage"):
            usage = chunk["usage"]["completion_tokens"]
    return parts, usage


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

    def __init__(self, base_url: str, connections: int | None = None) -> None:
        import httpx

        # httpx's defaults, or for a memory run room for every stream and no 5 s read timeout
        limits = httpx.Limits(max_connections=connections or 100, max_keepalive_connections=20)
        timeout = 5.0 if connections is None else 600.0
        self._client = httpx.AsyncClient(base_url=base_url, limits=limits, timeout=timeout)

    async def request(self) -> tuple[str, int | None]:
        response = await self._client.post("/v1/completions", json=BODY)
        response.raise_for_status()
        return answer(response.content)

    async def stream(self) -> StreamResult:
        async with self._client.stream("POST", "/v1/completions", json=STREAM_BODY) as r:
            r.raise_for_status()
            return await read_sse(r.aiter_lines(), "data: [DONE]")

    async def aclose(self) -> None:
        await self._client.aclose()


class AiohttpClient(Client):
    """The floor: aiohttp.ClientSession, json.loads, its line reader + json.loads per ``data:``."""

    name = "aiohttp"

    def __init__(self, base_url: str, connections: int = 100) -> None:
        import aiohttp

        self._session = aiohttp.ClientSession(base_url, connector=aiohttp.TCPConnector(limit=connections))

    async def request(self) -> tuple[str, int | None]:
        async with self._session.post("/v1/completions", json=BODY) as r:
            r.raise_for_status()
            return answer(await r.read())

    async def stream(self) -> StreamResult:
        return await self.stream_from(self._session.post("/v1/completions", json=STREAM_BODY))

    @staticmethod
    async def stream_from(opening: Any) -> StreamResult:
        async with opening as r:
            r.raise_for_status()
            # its line reader, one line at a time
            return await read_sse((raw.rstrip(b"\r\n") async for raw in r.content), b"data: [DONE]")

    async def aclose(self) -> None:
        await self._session.close()


class UnillmClient(Client):
    name = "unillm"
    http: Literal["aiohttp", "httpx"] = "aiohttp"

    def __init__(self, base_url: str, connections: int = 256) -> None:
        import unillm

        self._llm: Any = unillm.connect(
            "vllm", base_url, model=MODEL, pool=unillm.Pool(connections, http=self.http)
        )

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


class UnillmHttpxClient(UnillmClient):
    """unillm on httpx's own transport: ``Pool(http="httpx")``."""

    name = "unillm_httpx"
    http: Literal["aiohttp", "httpx"] = "httpx"


class UnillmFleetClient(UnillmClient):
    """unillm through a fleet of 2 replicas (round robin), each its own server process."""

    name = "unillm_fleet"

    def __init__(self, base_url: str, connections: int = 256) -> None:
        import unillm

        urls = [base_url, os.environ["BENCH_SECOND_URL"]]
        self._llm = unillm.connect("vllm", urls, model=MODEL, pool=unillm.Pool(connections))


async def collect_completion_chunks(chunks: Any) -> StreamResult:
    """The content pieces and usage of an OpenAI-shaped completion stream (openai, litellm)."""
    parts: list[str] = []
    usage: int | None = None
    async for chunk in chunks:
        for choice in chunk.choices or ():
            if choice.text:
                parts.append(choice.text)
        if getattr(chunk, "usage", None):  # litellm's chunks may lack it
            usage = chunk.usage.completion_tokens
    return parts, usage


class OpenAIClient(Client):
    name = "openai"
    aiohttp = False

    def __init__(self, base_url: str) -> None:
        import openai

        http = openai.DefaultAioHttpClient() if self.aiohttp else None
        self._client = openai.AsyncOpenAI(base_url=f"{base_url}/v1", api_key="x", http_client=http)

    async def request(self) -> tuple[str, int | None]:
        r = await self._client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=MAX_TOKENS)
        return r.choices[0].text, r.usage.completion_tokens if r.usage else None

    async def stream(self) -> StreamResult:
        s = await self._client.completions.create(
            model=MODEL,
            prompt=PROMPT,
            max_tokens=MAX_TOKENS,
            stream=True,
            stream_options={"include_usage": True},
        )
        return await collect_completion_chunks(s)

    async def aclose(self) -> None:
        await self._client.close()


class OpenAIAiohttpClient(OpenAIClient):
    """The openai SDK on its aiohttp backend (``openai[aiohttp]``: ``DefaultAioHttpClient``)."""

    name = "openai_aiohttp"
    aiohttp = True


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
        s = await self._litellm.atext_completion(
            **self._kw, stream=True, stream_options={"include_usage": True}
        )
        return await collect_completion_chunks(s)

    async def aclose(self) -> None:
        from litellm.llms.custom_httpx.async_client_cleanup import close_litellm_async_clients

        await close_litellm_async_clients()  # type: ignore[no-untyped-call]


FACTORIES: dict[str, Callable[..., Client]] = {
    "httpx": HttpxClient,
    "aiohttp": AiohttpClient,
    "unillm": UnillmClient,
    "unillm_httpx": UnillmHttpxClient,
    "unillm_fleet": UnillmFleetClient,
    "openai": OpenAIClient,
    "openai_aiohttp": OpenAIAiohttpClient,
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
        self.memory: dict[str, dict[int, float | None]] = {}
        self.unclosed = 0  # "Unclosed client session/connector" reports from the event loop

    def fail(self, name: str, exc: BaseException) -> None:
        self.errors[name] = f"{type(exc).__name__}: {exc}"[:300]
        print(f"  ! {name} failed: {self.errors[name]}", file=sys.stderr)
        if not isinstance(exc, WrongAnswer):
            traceback.print_exc(file=sys.stderr)

    def us(self, rounds: dict[str, list[float]], name: str, how: str = "median") -> float | None:
        """Microseconds per call: the median round, or the best one."""
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


def _rss() -> int:
    """This process's resident memory in bytes."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


async def _held_streams(name: str, count: int, servers: list[Server]) -> dict[str, float]:
    """Open ``count`` streams at once, each held after its first chunk; the memory they take."""
    client = FACTORIES[name](servers[0].base_url, connections=count)
    _check_request(await client.request())  # discovery (unillm) and a warm connection
    gc.collect()
    before = _rss()
    tasks = [asyncio.ensure_future(client.stream()) for _ in range(count)]
    while sum(s.stats()["held"] for s in servers) < count:
        await asyncio.sleep(0.2)
        if any(t.done() for t in tasks):
            break
    await asyncio.sleep(0.5)  # the first chunks read
    during = _rss()
    for server in servers:
        server.stats("/_release")
    for result in await asyncio.gather(*tasks):
        _check_stream(result)
    await client.aclose()
    return {"kib_per_stream": round((during - before) / count / 1024, 1), "rss_mib": round(during / MiB, 1)}


MiB = 1024 * 1024
MEMORY_RUN_S = 180  # one client at one count (httpx's own pool takes minutes at 5,000 streams)


def memory_child(name: str, count: int, gap_us: float) -> None:
    """Print the JSON of :func:`_held_streams` for one client (``--memory NAME:COUNT``)."""
    servers = [Server(gap_us, hold=True) for _ in range(2 if name == "unillm_fleet" else 1)]
    try:
        if len(servers) > 1:
            os.environ["BENCH_SECOND_URL"] = servers[1].base_url
        print(json.dumps(asyncio.run(_held_streams(name, count, servers))))
    finally:
        for server in servers:
            server.stop()


def memory(names: list[str], counts: list[int], gap_us: float) -> dict[str, dict[int, float | None]]:
    """KiB of resident memory per concurrent stream, per client and count (one process each)."""
    result: dict[str, dict[int, float | None]] = {}
    for name in (n for n in MEMORY_CLIENTS if n in names):
        result[name] = {}
        for count in counts:
            child = subprocess.Popen(
                [sys.executable, os.path.abspath(__file__), "--memory", f"{name}:{count}"],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env={**os.environ, **CHILD_ENV},
                start_new_session=True,  # its servers with it: stopped together on a timeout
            )
            try:
                stdout, stderr = child.communicate(timeout=MEMORY_RUN_S)
            except subprocess.TimeoutExpired:
                os.killpg(child.pid, signal.SIGKILL)
                child.communicate()
                print(f"  ! memory {name} x{count}: over {MEMORY_RUN_S} s", file=sys.stderr)
                result[name][count] = None
                continue
            lines = stdout.strip().splitlines()
            if child.returncode != 0 or not lines:
                print(f"  ! memory {name} x{count}: {stderr[-500:]}", file=sys.stderr)
                result[name][count] = None
            else:
                result[name][count] = json.loads(lines[-1])["kib_per_stream"]
            print(f"  memory {name} x{count}: {result[name][count]} KiB/stream", file=sys.stderr)
    return result


IMPORT_CODE = {
    "httpx": "import httpx",
    "aiohttp": "import aiohttp",
    "unillm": "import unillm",
    "unillm_full": "import unillm; unillm.connect('vllm', 'http://127.0.0.1:9', model='tiny')",
    "openai": "import openai",
    "litellm": "import litellm",
    # a user's whole start: import, client, first request on the loopback server ({url})
    "unillm_first": (
        "import asyncio, unillm\n"
        "async def main():\n"
        "    async with unillm.connect('vllm', '{url}', model='tiny') as llm:\n"
        "        await llm.generate('hello', max_tokens=64)\n"
        "asyncio.run(main())"
    ),
    "httpx_first": (
        "import asyncio, httpx\n"
        "async def main():\n"
        "    async with httpx.AsyncClient() as c:\n"
        "        (await c.post('{url}/v1/completions', json={body})).raise_for_status()\n"
        "asyncio.run(main())"
    ),
}
#: Timed only while the loopback server runs (they send a request to it).
FIRST_REQUEST = ("unillm_first", "httpx_first")


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


def import_times(names: list[str], runs: int, url: str = "") -> dict[str, float | None]:
    """Median wall time of ``python -c "import X"`` minus that of ``python -c "pass"`` (the
    first-request snippets send to the server at ``url``)."""
    base = statistics.median(_wall("pass") for _ in range(runs))
    result: dict[str, float | None] = {}
    for name in names:
        code = IMPORT_CODE[name].replace("{url}", url).replace("{body}", repr(BODY))
        try:
            result[name] = max(0.0, statistics.median(_wall(code) for _ in range(runs)) - base)
        except subprocess.CalledProcessError:
            result[name] = None
    return result


# ---------------------------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------------------------


#: The ratios reported, per request and per stream: (key prefix, client, baseline, its name in the
#: key); ``("fleet_", "unillm_fleet", "unillm", "direct")`` gives ``fleet_per_stream_vs_direct``.
RATIOS = (
    ("", "unillm", "httpx", "httpx"),
    ("", "unillm", "aiohttp", "aiohttp"),
    ("unillm_httpx_", "unillm_httpx", "httpx", "httpx"),
    ("fleet_", "unillm_fleet", "unillm", "direct"),
    ("aiohttp_", "aiohttp", "httpx", "httpx"),
    ("openai_", "openai", "httpx", "httpx"),
    ("openai_aiohttp_", "openai_aiohttp", "httpx", "httpx"),
    ("litellm_", "litellm", "httpx", "httpx"),
)


def _ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 3) if a is not None and b else None


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def _goals(req: dict[str, float | None], strm: dict[str, float | None], run: Run) -> dict[str, bool | None]:
    """Issue 22's goals, each True/False (None: not measured in this run)."""

    def at_most(value: float | None, limit: float) -> bool | None:
        return None if value is None else value <= limit

    imp, mem = run.import_s, run.memory
    connect, httpx_import = imp.get("unillm_full"), imp.get("httpx")
    memory_ok = [
        mem["unillm"][n] <= mem["httpx"][n]  # type: ignore[operator]
        for n in mem.get("unillm", {})
        if mem["unillm"][n] is not None and mem.get("httpx", {}).get(n) is not None
    ]
    return {
        "per_request_le_0.70x_httpx": at_most(_ratio(req["unillm"], req["httpx"]), 0.70),
        "per_stream_le_0.60x_httpx": at_most(_ratio(strm["unillm"], strm["httpx"]), 0.60),
        "per_request_le_1.3x_aiohttp": at_most(_ratio(req["unillm"], req["aiohttp"]), 1.3),
        "per_stream_le_1.3x_aiohttp": at_most(_ratio(strm["unillm"], strm["aiohttp"]), 1.3),
        "fleet_per_request_le_1.05x_direct": at_most(_ratio(req["unillm_fleet"], req["unillm"]), 1.05),
        "fleet_per_stream_le_1.05x_direct": at_most(_ratio(strm["unillm_fleet"], strm["unillm"]), 1.05),
        "connect_import_le_httpx_import": None
        if connect is None or httpx_import is None
        else connect <= httpx_import,
        "memory_per_stream_le_httpx": all(memory_ok) if memory_ok else None,
    }


def report(run: Run, args: argparse.Namespace) -> dict[str, Any]:
    req = {n: run.us(run.request_rounds, n) for n in CLIENTS}
    strm = {n: run.us(run.stream_rounds, n) for n in CLIENTS}
    imp = run.import_s
    print()
    print(
        f"CPU per call (process time), median of {args.rounds} interleaved rounds; {args.requests} "
        f"requests, {args.streams} streams of {CHUNKS} chunks ({args.chunk_gap_us:g} us apart)"
    )
    header = (
        f"{'client':<15} {'us/request':>10} {'x httpx':>7} {'x aiohttp':>9} {'us/stream':>10} "
        f"{'x httpx':>7} {'x aiohttp':>9} {'import s':>9} {'conns':>5}"
    )
    print(header)
    print("-" * len(header))
    for n in CLIENTS:
        if n not in run.names:
            print(f"{n:<15} skipped (not in --clients; --quick leaves out litellm)")
            continue
        if n in run.errors:
            print(f"{n:<15} ERROR: {run.errors[n][:80]}")
            continue
        imports = _fmt(imp.get(n), ".3f")
        print(
            f"{n:<15} {_fmt(req[n], '10.1f')} {_fmt(_ratio(req[n], req['httpx']), '7.2f')} "
            f"{_fmt(_ratio(req[n], req['aiohttp']), '9.2f')} {_fmt(strm[n], '10.1f')} "
            f"{_fmt(_ratio(strm[n], strm['httpx']), '7.2f')} "
            f"{_fmt(_ratio(strm[n], strm['aiohttp']), '9.2f')} "
            f"{imports:>9} {run.connections.get(n, 0):>5}"
        )
    print("(conns: TCP connections opened during the measured rounds; 1 or 0 means reuse)")
    print(
        f"import unillm: {_fmt(imp.get('unillm'), '.3f')} s; import unillm + unillm.connect: "
        f"{_fmt(imp.get('unillm_full'), '.3f')} s; import httpx: {_fmt(imp.get('httpx'), '.3f')} s"
    )
    print(
        f"import + client + first request: unillm {_fmt(imp.get('unillm_first'), '.3f')} s, "
        f"httpx {_fmt(imp.get('httpx_first'), '.3f')} s"
    )
    for n, by_count in run.memory.items():
        sizes = ", ".join(f"{c} streams: {_fmt(v, '.1f')} KiB/stream" for c, v in by_count.items())
        print(f"memory {n:<13} {sizes}")
    if run.unclosed:
        print(
            f"(the event loop reported {run.unclosed} unclosed sessions/connectors, "
            "left behind by litellm's aiohttp transport)"
        )
    for n, paths in run.paths.items():
        print(f"  {n} warm-up hit: {', '.join(f'{k} x{v}' for k, v in sorted(paths.items()))}")
    goals = _goals(req, strm, run)
    print("goals: " + ", ".join(f"{k}={v}" for k, v in goals.items()))
    return {
        **{
            f"{prefix}per_{kind}_vs_{label}": _ratio(times[client], times[baseline])
            for prefix, client, baseline, label in RATIOS
            for kind, times in (("request", req), ("stream", strm))
        },
        "import_s": _round(imp.get("unillm")),
        "import_full_s": _round(imp.get("unillm_full")),
        "import_httpx_s": _round(imp.get("httpx")),
        "first_request_s": {n: _round(imp.get(f"{n}_first")) for n in ("unillm", "httpx")},
        "goals": goals,
        "memory_kib_per_stream": run.memory,
        "us_per_request": {n: _round(v, 1) for n, v in req.items()},
        "us_per_stream": {n: _round(v, 1) for n, v in strm.items()},
        "us_per_request_best": {n: _round(run.us(run.request_rounds, n, "best"), 1) for n in CLIENTS},
        "us_per_stream_best": {n: _round(run.us(run.stream_rounds, n, "best"), 1) for n in CLIENTS},
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
        help="small run for smoke tests (~30 s): 200 requests, 20 streams, "
        "4 rounds, imports timed once, memory at 50 streams, no litellm",
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
    parser.add_argument(
        "--memory-streams",
        help="comma-separated counts of concurrent streams to measure memory at "
        "(1000,5000; with --quick 50; 0 leaves it out)",
    )
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--hold", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--first-chunk-us", type=float, default=0.0, help=argparse.SUPPRESS)
    parser.add_argument("--memory", help=argparse.SUPPRESS)  # NAME:COUNT, in a child process
    args = parser.parse_args(argv)
    if args.serve:
        serve(args.chunk_gap_us, args.hold, args.first_chunk_us)
        return 0
    if args.memory:
        name, count = args.memory.split(":")
        memory_child(name, int(count), args.chunk_gap_us)
        return 0
    args.requests = args.requests or (200 if args.quick else 800)
    args.streams = args.streams or (20 if args.quick else 80)
    args.rounds = max(1, min(args.rounds or (4 if args.quick else 8), args.requests, args.streams))
    if args.clients is None:
        args.clients = ",".join(n for n in CLIENTS if n != "litellm" or not args.quick)
    names = [n for n in args.clients.split(",") if n]
    unknown = set(names) - set(CLIENTS)
    if unknown or "httpx" not in names:
        parser.error(f"--clients must include httpx and only name {', '.join(CLIENTS)}")

    counts = [int(c) for c in (args.memory_streams or ("50" if args.quick else "1000,5000")).split(",")]
    server = Server(args.chunk_gap_us)
    second = Server(args.chunk_gap_us) if "unillm_fleet" in names else None
    try:
        print(f"server pid {server.proc.pid} at {server.base_url}", file=sys.stderr)
        if second is not None:
            os.environ["BENCH_SECOND_URL"] = second.base_url
        run = asyncio.run(measure(server, names, args.requests, args.streams, args.rounds))
        print("timing first requests...", file=sys.stderr)
        first = import_times(list(FIRST_REQUEST), 1 if args.quick else 5, server.base_url)
    finally:
        server.stop()
        if second is not None:
            second.stop()
    timed = ["httpx", "aiohttp", "unillm", "unillm_full"] + [n for n in ("openai", "litellm") if n in names]
    print("timing imports...", file=sys.stderr)
    run.import_s = import_times(timed, 1 if args.quick else 5) | first
    if counts != [0]:
        print("measuring memory...", file=sys.stderr)
        run.memory = memory(names, [c for c in counts if c > 0], args.chunk_gap_us)
    summary = report(run, args)
    print(json.dumps(summary, separators=(",", ":")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
