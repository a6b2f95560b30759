"""Start an engine, wait until it really answers, and never leave it behind.

    async with unillm.launch("vllm", model="/models/tiny", max_model_len=512) as llm:
        print((await llm.generate("Hi", max_tokens=8)).text)

Ready means: the health check answers 200 *and* one tiny request is answered. While
waiting, progress (elapsed time, last log line) goes to stderr. Teardown sends SIGTERM, then
SIGKILL, to the engine's whole process group on exit, error, cancellation, Ctrl-C and at
interpreter exit.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib.util
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import anyio
import anyio.to_thread
import httpx
from pydantic import SecretStr

from unillm.adapter.base import Adapter
from unillm.adapter.launch_spec import LaunchCommand, LaunchSpec, Prerequisite, core_list_problem
from unillm.adapter.registry import adapter_for
from unillm.capabilities import Feature
from unillm.client.priority_gate import Reserve, reserve_gate
from unillm.client.transport import Pool, RetryPolicy, Timeouts
from unillm.errors import InvalidOptions, LaunchError, MalformedResponse, UnillmError, UnsupportedFeature
from unillm.launching.cpu_features import boot_env, boot_note
from unillm.launching.lifecycle import Stoppable
from unillm.launching.logs import LaunchLog, signal_advice
from unillm.launching.ports import free_port
from unillm.options import Options

if TYPE_CHECKING:
    from unillm.client.llm import LLM

LOG_TAIL = 50
IN_PROCESS_URL = "http://in-process"
_LIVE_GROUPS: set[int] = set()


@dataclass(frozen=True)
class LaunchProgress:
    """One progress report while an engine starts.

    Args:
        engine: The engine's name (or the launch's label).
        elapsed_s: Seconds since the launch began.
        phase: "starting", "warming up" or "ready".
        last_line: The engine's last log line.
    """

    engine: str
    elapsed_s: float
    phase: Literal["starting", "preparing", "warming up", "ready"]
    last_line: str


ProgressHook = Callable[[LaunchProgress], None]


def print_progress(p: LaunchProgress) -> None:
    """Default progress output: one updating line on a terminal, a line every 10 s otherwise."""
    line = f"[unillm] {p.engine}: {p.phase} {p.elapsed_s:5.1f}s | {p.last_line[:100]}"
    if sys.stderr.isatty():
        end = "\n" if p.phase == "ready" else ""
        sys.stderr.write(f"\r\x1b[2K{line}{end}")
    elif p.phase == "ready" or int(p.elapsed_s) % 10 == 0:
        sys.stderr.write(line + "\n")
    sys.stderr.flush()


def check_reasoning_parser(adapter: Adapter, spec: LaunchSpec) -> None:
    """Refuse a reasoning parser the engine's launch does not take, or does not know by name."""
    name = spec.thinking_parser()
    if name is None:
        return
    if not adapter.reasoning_parsers:
        raise UnsupportedFeature(
            adapter.name,
            "reasoning_parser",
            why=f"{adapter.name} has no reasoning parser setting (it sends the thinking in the text, "
            "or separates it on its own)",
            alternative="Drop reasoning_parser=; unillm splits the thinking markers off the answer itself",
        )
    if adapter.reasoning_parser_name(name) is None:
        known = ", ".join(sorted(adapter.reasoning_parsers))
        raise InvalidOptions(f"{adapter.name} has no reasoning parser {name!r}; its parsers: {known}")


def new_api_key() -> SecretStr:
    """A random key for an engine unillm launches: 32 URL-safe characters, never a leading ``-``
    (an engine's or a script's argument parser would read ``--api-key -x...`` as two options).

    Returns:
        The key, kept secret in reprs and logs.
    """
    key = secrets.token_urlsafe(24)
    while key.startswith("-"):
        key = secrets.token_urlsafe(24)
    return SecretStr(key)


def resolve_spec(adapter: Adapter, spec: LaunchSpec) -> LaunchSpec:
    """Fill in the CPU recipe, port, API key and engine interpreter so the command is final."""
    if spec.cpu:
        from unillm.launching.cpu import apply_cpu_recipe

        spec = apply_cpu_recipe(adapter, spec)
    update: dict[str, Any] = {}
    if spec.port is None:
        update["port"] = free_port(spec.host)
    if spec.api_key == "auto":
        update["api_key"] = new_api_key()
    if spec.python is None and not spec.prefix and (not spec.in_process or adapter.in_process_worker):
        update["python"] = engine_python(adapter)
    if spec.tool_parser is None and adapter.takes_tool_parser:
        from unillm.launching.model_facts import detect_tool_parser

        update["tool_parser"] = detect_tool_parser(spec.model) or "none"
    if adapter.reasoning_parsers:
        update["reasoning_parser"] = reasoning_parser_for(adapter, spec)
    return spec.model_copy(update=update) if update else spec


def reasoning_parser_for(adapter: Adapter, spec: LaunchSpec) -> str:
    """The engine's spelling of the reasoning parser to launch with: the one asked for, else the
    one the model's chat template implies ("none": no parser)."""
    name = spec.reasoning_parser
    if name is None:
        from unillm.launching.model_facts import detect_reasoning_parser

        name = detect_reasoning_parser(spec.model)
        return (adapter.reasoning_parser_name(name) if name else None) or "none"
    return "none" if spec.thinking_parser() is None else adapter.reasoning_parser_name(name) or name


def engine_python(adapter: Adapter) -> str | None:
    """The interpreter that has the engine: its managed env, or this one if it can import it."""
    from unillm.launching.envs import managed_python

    managed = managed_python(adapter.name)
    if managed is not None:
        return str(managed)
    module = adapter.engine_module
    if module is None or importlib.util.find_spec(module) is not None:
        return sys.executable
    return None


def check_launch_features(adapter: Adapter, spec: LaunchSpec) -> None:
    """Refuse, before anything starts, launch settings the engine has no flags for."""
    if spec.parser() is not None and not adapter.takes_tool_parser:
        raise UnsupportedFeature(
            adapter.name,
            "tool_parser",
            why=f"{adapter.name} has no tool-call parser setting (it reads tool calls its own way, "
            "or not at all)",
            alternative="Drop tool_parser=; tool_choice='required' or a tool's name is forced by unillm "
            "where the engine constrains output",
        )
    _check_structured_settings(adapter, spec)
    check_reasoning_parser(adapter, spec)
    if spec.ray_address is not None and not adapter.ray_executor:
        raise UnsupportedFeature(
            adapter.name,
            "ray_address (its workers on a Ray cluster)",
            why=f"{adapter.name} has no Ray executor of its own",
            alternative="Drop ray_address=; unillm.launch(..., cluster=unillm.Ray(...)) still places "
            "whole replicas on the cluster's nodes",
        )
    needs = [(spec.nodes is not None, Feature.MULTI_NODE), (spec.pd is not None, Feature.PD_DISAGGREGATION)]
    if any(used for used, _ in needs):
        caps = adapter.capabilities()
        for used, feature in needs:
            if used:
                caps.require(feature)


@dataclass(frozen=True)
class ClientSettings:
    """How a launch's connected client talks to what it started: the ``LLM`` settings a launch
    passes on (:func:`unillm.launch` builds it from its keyword arguments).

    Args:
        defaults: Options applied to every request, overridden per call.
        timeouts: Connect/read/pool limits in seconds.
        retry: How the client retries overloads and dropped connections.
        pool: Connection-pool sizes.
        reserve: Engine slots the client keeps free for urgent requests (its capacity defaults to
            the launch's ``max_num_seqs``).
    """

    defaults: Options | None = None
    timeouts: Timeouts = field(default_factory=Timeouts)
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    pool: Pool = field(default_factory=Pool)
    reserve: Reserve | None = None

    def llm_kwargs(self) -> dict[str, Any]:
        """The settings as :class:`~unillm.client.llm.LLM`'s keyword arguments."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


def launched_reserve(reserve: Reserve | None, spec: LaunchSpec, engine: str) -> Reserve | None:
    """``reserve`` with its capacity taken from the launch's ``max_num_seqs`` when unset, checked now
    (before anything starts).

    Args:
        reserve: The launch's ``reserve=``, or None.
        spec: The launch's spec.
        engine: The engine's name, for the message.

    Returns:
        The reserve the connected client uses (None: none).

    Raises:
        InvalidOptions: Neither the reserve nor the spec gives a capacity, or slots >= capacity.
    """
    if reserve is None:
        return None
    resolved = reserve.for_engine(spec.max_num_seqs) if isinstance(reserve, Reserve) else reserve
    reserve_gate(resolved, engine)  # refuses a reserve without a capacity, before the launch
    return resolved


def engine_command(adapter: Adapter, spec: LaunchSpec, command: LaunchCommand | None = None) -> LaunchCommand:
    """What a launch runs, before its prefix: the ``command`` given (e.g. a router), a placeholder
    for an engine in this process, else the adapter's command for ``spec``."""
    if command is not None:
        return command
    if spec.in_process:
        return LaunchCommand(argv=["(in-process)"])
    return adapter.command(spec)


def final_command(adapter: Adapter, spec: LaunchSpec, command: LaunchCommand | None = None) -> LaunchCommand:
    """The command as it runs: :func:`engine_command` behind the spec's prefix, with the spec's
    environment, key and secrets, and unillm's start-up for an engine's own Python process."""
    cmd = engine_command(adapter, spec, command)
    env, notes = {**cmd.env, **spec.env}, cmd.notes
    if command is None and not spec.prefix and _runs_python(cmd.argv, spec.python):
        env, notes = boot_env(env), (*notes, boot_note())  # AMX permission in every engine process
    if spec.cpus is not None:
        notes = (*notes, f"runs on CPU cores {','.join(map(str, spec.cpus))} only (sched_setaffinity)")
    return LaunchCommand(
        argv=[*spec.prefix, *cmd.argv],
        env=env,
        health_path=cmd.health_path,
        secrets=(*cmd.secrets, *([k] if (k := spec.key()) else [])),
        notes=notes,
        secret_env=(*cmd.secret_env, *spec.secret_env),
        files=cmd.files,
        after_start=cmd.after_start,
        requires=cmd.requires,
    )


class Launch(Stoppable):
    """An engine to start; ``async with`` it to get a connected :class:`~unillm.client.llm.LLM`.

    Create it with :func:`unillm.launch`. ``command()`` shows what will run (secrets
    masked by ``render()``) without starting anything.
    """

    def __init__(
        self,
        engine: str | Adapter,
        spec: LaunchSpec,
        *,
        progress: ProgressHook | None = print_progress,
        log_path: Path | None = None,
        client: ClientSettings = ClientSettings(),
        command: LaunchCommand | None = None,
        name: str | None = None,
    ) -> None:
        """``command`` replaces the adapter's (e.g. a router in front of engines that speaks
        the adapter's API); ``name`` labels progress, log file and errors (default: the engine).

        Args:
            engine: The adapter's name ("vllm", ...) or an adapter instance.
            spec: What to start: model, parallelism, port, environment, ...
            progress: Called with each launch step; None is silent.
            client: How the connected client talks to the engine (its reserve's capacity
                defaults to the spec's ``max_num_seqs``).
            log_path: Where the engine's output goes; None: ``unillm-<name>-<port>.log`` in the temp
                folder (removed at stop if the engine wrote nothing).
            command: A command to run instead of the adapter's; None builds it from ``spec``.
            name: The label in progress, log file and errors; None is the engine's name.
        """
        self.adapter = adapter_for(engine)
        self.name = name or self.adapter.name
        self.spec = resolve_spec(self.adapter, spec) if command is None else spec
        self.progress = progress
        self.log_path = log_path or Path(tempfile.gettempdir()) / (f"unillm-{self.name}-{self.spec.port}.log")
        self._own_log = log_path is None  # unillm's temp-folder log: removed at stop when empty
        self._connect = replace(client, reserve=launched_reserve(client.reserve, self.spec, self.name))
        if command is None:
            check_launch_features(self.adapter, self.spec)
        if self.spec.nodes is not None and spec.port is None:
            raise InvalidOptions(
                "a multi-node launch needs port=... (the API port of the head node, the same on every node)"
            )
        self._cmd = final_command(self.adapter, self.spec, command)
        self._folder: str | None = None  # where the command's files were written
        self._log = LaunchLog(self.adapter.launch_hints() if command is None else {}, tail=LOG_TAIL)
        self._own_command = command is None  # an engine's command (not a router's) reads the model
        self._process: subprocess.Popen[bytes] | None = None
        self._reader: threading.Thread | None = None
        self._llm: LLM | None = None

    @property
    def pid(self) -> int | None:
        """The process id (and process group) of the running engine; None before start."""
        return self._process.pid if self._process is not None else None

    @property
    def base_url(self) -> str:
        """Where the engine listens (a multi-node worker: where its head node serves the API)."""
        host = "127.0.0.1" if self.spec.host in ("0.0.0.0", "") else self.spec.host
        if self.spec.nodes is not None and self.spec.nodes.rank > 0:
            host = self.spec.nodes.head_address()[0]  # ready once the head answers: all joined
        return f"http://{host}:{self.spec.port}"

    def command(self) -> LaunchCommand:
        """The exact command and environment that will run (``.render()`` masks secrets)."""
        return self._cmd

    @property
    def returncode(self) -> int | None:
        """The engine's exit code once its process has exited; None while it runs (or in-process)."""
        return self._process.poll() if self._process is not None else None

    @property
    def log_tail(self) -> list[str]:
        """The last lines the engine printed."""
        return self._log.tail

    async def __aenter__(self) -> LLM:
        from unillm.client.llm import LLM
        from unillm.launching.model_facts import takes_images

        if self.spec.in_process:
            transport = self.adapter.in_process(self.spec)
            self._llm = LLM(
                self.adapter.bind(self.spec),
                IN_PROCESS_URL,
                model=self.spec.served_name,
                http_transport=transport,
                **self._connect.llm_kwargs(),
            )
            self._llm.takes_images = takes_images(self.spec.model)
            return self._llm
        try:
            self._start()
            self._llm = LLM(
                self.adapter.bind(self.spec),
                self.base_url,
                model=self.spec.served_name,
                api_key=self.spec.key(),
                **self._connect.llm_kwargs(),
            )
            self._llm.takes_images = takes_images(self.spec.model)
            await self._wait_ready(self._llm)
        except BaseException:
            await self._stop()
            raise
        return self._llm

    # -- process ---------------------------------------------------------------------------
    def _start(self) -> None:
        if self.spec.python is None and not self.spec.prefix:
            raise self._refused(
                f"{self.name} is not installed where unillm can find it. Run `unillm "
                f"setup {self.name}` to install it in its own environment, or pass "
                "python=<interpreter of the env that has it> (or prefix=[...] for a container)"
            )
        model = self.spec.model
        if (
            self._own_command
            and not self.spec.prefix
            and model.startswith(("/", "./", "../", "~"))
            and not Path(model).expanduser().exists()
        ):
            raise InvalidOptions(  # before the engine spends a minute starting, then fails on it
                f"{self.name}: model {model!r} does not exist on this machine. Pass the folder of "
                "a model (its config.json and weights; `unillm tiny-model` prints a tiny one) "
                "or a hub id such as 'Qwen/Qwen2.5-0.5B-Instruct'"
            )
        if not self.spec.prefix:  # inside a container the machine's own programs do not count
            for needed in self._cmd.requires:
                self._check_prerequisite(needed)
        self._refuse_busy_port()
        check_cpus(self.spec.cpus)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        if self._cmd.files:
            self._folder = write_launch_files(self._cmd, self.name)
            self._cmd = self._cmd.placed(self._folder)
        env = {**os.environ, **self._cmd.env}
        try:
            self._process = subprocess.Popen(
                self._cmd.argv,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=_before_exec(self.spec.cpus),
            )
        except OSError as e:
            raise self._refused(f"could not start {self.name}: {e}") from e
        _LIVE_GROUPS.add(self._process.pid)
        self._reader = threading.Thread(
            target=self._read_log, args=(self._process,), daemon=True, name="unillm-engine-log"
        )
        self._reader.start()

    def _check_prerequisite(self, needed: Prerequisite) -> None:
        if needed.kind == "nvidia-driver" and not nvidia_driver_present():
            raise UnsupportedFeature(
                self.name,
                f"launching without an NVIDIA driver ({needed.name})",
                why=f"{self.name} runs on NVIDIA GPUs only, and this machine has no NVIDIA driver "
                "(no /proc/driver/nvidia, no nvidia-smi); --dry-run still prints the command",
                alternative=needed.install,
            )
        path = {**os.environ, **self._cmd.env}.get("PATH")  # the PATH the engine is started with
        if needed.kind == "binary" and shutil.which(needed.name, path=path) is None:
            raise self._refused(
                f"{self.name} needs the program {needed.name!r} on PATH, and it is not there "
                f"(unillm does not install it). {needed.install}"
            )

    def _refuse_busy_port(self) -> None:
        """Refuse a port another program already listens on: it could answer for the engine."""
        if self.spec.nodes is not None and self.spec.nodes.rank > 0:
            return  # a worker node serves no API of its own
        family = socket.AF_INET6 if ":" in self.spec.host else socket.AF_INET
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            # as servers bind: connections of a previous engine in TIME_WAIT do not make it busy
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind((self.spec.host, self.spec.port or 0))
            except OSError as e:
                raise self._refused(
                    f"cannot launch {self.name} on {self.spec.host}:{self.spec.port}: the port is "
                    f"already in use ({e.strerror}), so another server would answer in its place. "
                    "Stop that server, choose another port=, or leave port unset to get a free one"
                ) from None

    def _verify_listener(self) -> None:
        """Check that the server answering at the port is the process unillm started.

        Nothing (the API key included) is sent before this holds. Skipped where it cannot be
        told: a ``prefix`` launch (a container's proxy holds the port), a worker node, or an OS
        that hides sockets from this user.
        """
        if self._process is None or self.spec.prefix or (self.spec.nodes and self.spec.nodes.rank > 0):
            return
        import psutil

        try:
            root = psutil.Process(self._process.pid)
            tree = [root, *root.children(recursive=True)]
            listening = {
                c.laddr.port
                for p in tree
                for c in _connections(p)
                if c.status == psutil.CONN_LISTEN and c.laddr
            }
        except psutil.AccessDenied:
            return
        except psutil.NoSuchProcess:
            listening = set()
        if self.spec.port not in listening:
            raise self._fail(
                f"something answers at {self.base_url}, but it is not the {self.name} process "
                "unillm started (another server holds the port); nothing was sent to it. Stop that "
                "server or choose another port="
            )

    def trouble(self) -> str | None:
        """What is known to have gone wrong with the running engine: its exit, or a worker's death.

        Returns:
            A sentence for error messages (signal, usual meaning, what to change, the log's
            path), or None while nothing is known to be wrong.
        """
        code = self.returncode
        causes = list(self._log.deaths)  # not every cause: a hint matched while starting is old news
        if code is not None:
            advice = signal_advice(code, f"{self.name} (pid {self.pid})")
            causes.insert(0, advice or f"{self.name} (pid {self.pid}) exited with code {code}")
        if not causes:
            return None
        return f"{'; '.join(causes)} (full log: {self.log_path})"

    def _read_log(self, process: subprocess.Popen[bytes]) -> None:
        assert process.stdout is not None
        secrets = [s.encode() for s in self._cmd.secrets if s]
        with self.log_path.open("ab") as log:
            for raw in process.stdout:
                for secret in secrets:  # engines that echo their arguments must not leak the key
                    raw = raw.replace(secret, b"***")
                log.write(raw)
                log.flush()
                for line in raw.replace(b"\r", b"\n").split(b"\n"):
                    if line.strip():
                        self._log.add(line.decode("utf-8", "replace").rstrip())

    def _report(
        self,
        started: float,
        phase: Literal["starting", "preparing", "warming up", "ready"],
        line: str | None = None,
    ) -> None:
        if self.progress is not None:
            tail = self._log.tail
            last = line if line is not None else tail[-1] if tail else ""
            self.progress(LaunchProgress(self.name, time.monotonic() - started, phase, last))

    async def _after_start(self, probe: httpx.AsyncClient, started: float, deadline: float) -> None:
        """Make the command's start steps (e.g. a model pull), reporting each NDJSON line's progress."""
        headers = {"Authorization": f"Bearer {k}"} if (k := self.spec.key()) else {}
        for step in self._cmd.after_start:
            self._report(started, "preparing", step.label)
            try:
                with anyio.fail_after(max(deadline - time.monotonic(), 1.0)):
                    async with probe.stream(
                        step.method, self.base_url + step.path, json=step.json, headers=headers, timeout=None
                    ) as answer:
                        if answer.status_code >= 400:
                            await answer.aread()
                            error = self.adapter.parse_error(answer.status_code, answer.content, None, None)
                            raise self._fail(f"{self.name}: {step.label} failed: {error}")
                        async for line in answer.aiter_lines():
                            if line.strip():
                                shown = step.progress(_json_line(line, self.name, step.label))
                                if shown:
                                    self._report(started, "preparing", f"{step.label}: {shown}")
            except TimeoutError:
                raise self._fail(f"{self.name}: {step.label} did not finish in time") from None
            except httpx.HTTPError as e:
                raise self._fail(f"{self.name}: {step.label} failed: {e!r}") from e
            except LaunchError:
                raise
            except UnillmError as e:
                raise self._fail(f"{self.name}: {step.label} failed: {e}") from e

    def _refused(self, message: str) -> LaunchError:
        """A launch stopped before the engine process ran: the command, and no log yet."""
        return LaunchError(message, command=self._cmd.render(), log_tail=[])

    def _fail(self, message: str) -> LaunchError:
        return LaunchError(
            f"{message} (full log: {self.log_path})",
            command=self._cmd.render(),
            log_tail=self.log_tail,
            error_lines=self._log.errors,
            causes=self._log.causes,
        )

    async def _wait_ready(self, llm: LLM) -> None:
        started = time.monotonic()
        deadline = started + self.spec.ready_timeout
        health = self.base_url + self._cmd.health_path
        next_report = 0.0
        async with httpx.AsyncClient(timeout=5.0) as probe:
            while True:
                self._check_alive()
                with contextlib.suppress(httpx.HTTPError):
                    if (await probe.get(health)).status_code == 200:
                        self._check_alive()  # a server that is not ours may answer while ours dies
                        self._verify_listener()
                        break
                now = time.monotonic()
                if now > deadline:
                    raise self._fail(f"{self.name} was not healthy within {self.spec.ready_timeout:g}s")
                if now >= next_report:
                    self._report(started, "starting")
                    next_report = now + 1.0
                await anyio.sleep(0.25)
            await self._after_start(probe, started, deadline)  # e.g. pull the model
        self._report(started, "warming up")
        try:
            with anyio.fail_after(max(deadline - time.monotonic(), 1.0)):
                if self.spec.task == "embed":
                    await llm.embed("Hello")
                else:
                    await llm.generate("Hello", max_tokens=1)
        except TimeoutError:
            raise self._fail(f"{self.name} is healthy but did not answer a first request in time") from None
        except UnillmError as e:
            await anyio.sleep(1.0)  # let the log reader catch the engine's last words
            raise self._fail(f"{self.name} is healthy but failed its first request: {e}") from e
        llm.diagnose = self.trouble  # later errors name a dead engine or worker, and why
        self._report(started, "ready")

    def _check_alive(self) -> None:
        code = self._process.poll() if self._process is not None else None
        if code is not None:
            if self._reader is not None:
                self._reader.join(timeout=2.0)  # the engine's last words
            advice = signal_advice(code, self.name)
            if advice is not None:
                self._log.add_cause(advice)
            raise self._fail(f"{self.name} exited with code {code} before it was ready")

    async def _stop(self) -> None:
        with anyio.CancelScope(shield=True):
            if self._llm is not None:
                await self._llm.aclose()
            if self._process is not None:
                await terminate_group(self._process)
            if self._folder is not None:
                shutil.rmtree(self._folder, ignore_errors=True)
                self._folder = None
            if self._own_log:
                if self._reader is not None:  # the engine's last words reach the file first
                    await anyio.to_thread.run_sync(self._reader.join, 2.0)
                with contextlib.suppress(OSError):  # gone already, or not ours to remove
                    if self.log_path.stat().st_size == 0:
                        self.log_path.unlink()


async def terminate_group(process: subprocess.Popen[bytes], grace: float = 15.0) -> None:
    """SIGTERM the process group, wait up to ``grace`` s, then SIGKILL whatever is left."""
    pgid = process.pid
    if process.poll() is None:
        _signal_group(pgid, signal.SIGTERM)
        with anyio.move_on_after(grace):
            while process.poll() is None:
                await anyio.sleep(0.05)
    _signal_group(pgid, signal.SIGKILL)  # stragglers in the group, even if the leader left
    while process.poll() is None:
        await anyio.sleep(0.05)
    _LIVE_GROUPS.discard(pgid)


def write_launch_files(command: LaunchCommand, name: str) -> str:
    """Write ``command.files`` into a new private folder; returns its path."""
    folder = tempfile.mkdtemp(prefix=f"unillm-{name}-")
    for f in command.files:
        (Path(folder) / f.name).write_text(f.text, encoding="utf-8")
    return folder


def nvidia_driver_present() -> bool:
    """Whether this machine has an NVIDIA driver loaded (its /proc entry, or nvidia-smi on PATH)."""
    return Path("/proc/driver/nvidia/version").exists() or shutil.which("nvidia-smi") is not None


def _json_line(line: str, engine: str, label: str) -> Any:
    try:
        return json.loads(line)
    except ValueError:
        raise MalformedResponse(
            f"{engine}: {label} answered a line that is not JSON: {line[:200]!r}"
        ) from None


def _check_structured_settings(adapter: Adapter, spec: LaunchSpec) -> None:
    backends = adapter.structured_backends
    if spec.structured_backend is not None and spec.structured_backend not in backends:
        raise UnsupportedFeature(
            adapter.name,
            f"structured_backend={spec.structured_backend!r}",
            why=f"{adapter.name}'s constrained-decoding backends are {', '.join(backends)}"
            if backends
            else f"{adapter.name} has one constrained-decoding backend of its own, with no setting",
            alternative=f"Pick one of {', '.join(backends)}" if backends else "Drop structured_backend=",
        )
    if spec.compact_json is not None and not adapter.takes_compact_json:
        raise UnsupportedFeature(
            adapter.name,
            "compact_json",
            why=f"{adapter.name} has no setting for whitespace in constrained JSON",
            alternative="Drop compact_json=",
        )


def check_cpus(cpus: Sequence[int] | None) -> None:
    """Refuse cores this process may not use (or a platform that cannot pin) before starting.

    Args:
        cpus: The cores asked for (``LaunchSpec.cpus``); None: nothing to check.

    Raises:
        InvalidOptions: A list :func:`core_list_problem` refuses, no ``sched_setaffinity`` here, or a
            core outside this process's own set.
    """
    if cpus is None:
        return
    if why := core_list_problem(cpus):
        raise InvalidOptions(why)
    if not hasattr(os, "sched_setaffinity"):
        raise InvalidOptions(f"cpus={list(cpus)}: pinning needs Linux (sched_setaffinity); leave cpus unset")
    usable = os.sched_getaffinity(0)
    if not set(cpus) <= usable:
        raise InvalidOptions(
            f"cpus={list(cpus)}: this process may run on cores {sorted(usable)} only; pick among them"
        )


def _before_exec(cpus: Sequence[int] | None) -> Callable[[], None] | None:
    """A pre-exec hook: on Linux the engine gets SIGTERM if this process dies (even by SIGKILL),
    and runs on ``cpus`` only (set before exec, so its thread pools size to them)."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    prctl = ctypes.CDLL(None, use_errno=True).prctl  # resolved before fork: nothing imports after
    pr_set_pdeathsig = 1
    cores = frozenset(cpus) if cpus is not None else None

    def hook() -> None:
        prctl(pr_set_pdeathsig, signal.SIGTERM)
        if cores is not None:
            os.sched_setaffinity(0, cores)

    return hook


def _runs_python(argv: list[str], python: str | None) -> bool:
    """Whether a command starts a Python interpreter (the engines that get unillm's start-up)."""
    return bool(argv) and (argv[0] == python or Path(argv[0]).name.startswith("python"))


def _connections(process: Any) -> list[Any]:
    """A psutil process's inet sockets (``net_connections``; ``connections`` before psutil 6)."""
    get = getattr(process, "net_connections", None) or process.connections
    return list(get(kind="inet"))


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


@atexit.register
def _kill_leftovers() -> None:
    for pgid in list(_LIVE_GROUPS):
        _signal_group(pgid, signal.SIGTERM)
    if _LIVE_GROUPS:
        time.sleep(1.0)
    for pgid in list(_LIVE_GROUPS):
        _signal_group(pgid, signal.SIGKILL)
