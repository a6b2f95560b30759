"""The unified launch settings every adapter turns into its engine's command line.

spec = LaunchSpec(model="/models/qwen", parallel=Parallel(tensor=2),
                  lora={"sql": "/adapters/sql"},
                  speculative=Speculative(method="ngram", num_tokens=4))
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)

from unillm.errors import InvalidOptions, validation_problems
from unillm.options import check_lora_name
from unillm.redact import MASK, check_api_key, is_secret_name, masked_argv, secret_flag_values


class _Settings(BaseModel):
    """A settings model whose bad arguments raise :class:`InvalidOptions`, like the rest of unillm."""

    def __init__(self, **data: Any) -> None:
        try:
            super().__init__(**data)
        except ValidationError as e:
            raise InvalidOptions(f"invalid {type(self).__name__}: {validation_problems(e)}") from None


class Parallel(_Settings):
    """How to split the model across devices: ``Parallel(tensor=2)``.

    Attributes:
        tensor: Devices each layer is split across (tensor parallelism).
        pipeline: Stages the layers are split into (pipeline parallelism).
        data: Model replicas inside the engine (data parallelism).
        expert: Spread a mixture-of-experts model's experts across the devices.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    tensor: int = Field(1, ge=1)
    pipeline: int = Field(1, ge=1)
    data: int = Field(1, ge=1)
    expert: bool = False


SpeculativeMethod = Literal["ngram", "draft", "eagle", "eagle3", "mtp", "suffix"]


class Speculative(_Settings):
    """Speculative decoding: ``Speculative(method="ngram", num_tokens=4)``.

    ``draft`` and ``eagle``/``eagle3`` need ``draft_model`` (a path or model id).

    Attributes:
        method: "ngram", "draft", "eagle", "eagle3", "mtp" or "suffix".
        num_tokens: Tokens proposed per step.
        draft_model: The draft model's path or id (``draft`` and ``eagle``/``eagle3`` need one).
        lookup_max: ngram: the longest n-gram to match; None: the engine's default.
        lookup_min: ngram: the shortest n-gram to match; None: the engine's default.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    method: SpeculativeMethod
    num_tokens: int = Field(4, ge=1)
    draft_model: str | None = None
    lookup_max: int | None = Field(None, ge=1, description="ngram: longest n-gram to match")
    lookup_min: int | None = Field(None, ge=1, description="ngram: shortest n-gram to match")

    @model_validator(mode="after")
    def _needs_draft(self) -> Speculative:
        if self.method in ("draft", "eagle", "eagle3") and not self.draft_model:
            raise ValueError(f"speculative method {self.method!r} needs draft_model=...")
        return self


class Nodes(_Settings):
    """Spread one engine over several machines: ``Nodes(count=2, rank=0, head="10.0.0.1")``.

    Run the same launch on every node with its own ``rank``; rank 0 is the head (it serves
    the API), ``head`` is its address as the other nodes reach it (``host`` or ``host:port``,
    the port the engine's processes rendezvous on; default 29500).

    Attributes:
        count: Machines in all (2 or more).
        rank: This machine's rank; 0 is the head.
        head: The head's address as the other nodes reach it (``host`` or ``host:port``).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    count: int = Field(ge=2)
    rank: int = Field(0, ge=0)
    head: str = Field(min_length=1)

    @model_validator(mode="after")
    def _rank_in_range(self) -> Nodes:
        if self.rank >= self.count:
            raise ValueError(f"rank {self.rank} is not below count {self.count} (ranks are 0-based)")
        self.head_address()  # validates the port
        return self

    def head_address(self) -> tuple[str, int]:
        """(host, port) of the head node."""
        host, sep, port = self.head.rpartition(":")
        if not sep or "]" in port:  # no port (or a bare IPv6 address)
            return self.head, DEFAULT_RENDEZVOUS_PORT
        if not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"head {self.head!r}: the port must be a number in 1-65535")
        return host, int(port)


def core_list_problem(cpus: Sequence[int]) -> str | None:
    """What is wrong with a list of CPU cores to pin an engine to (None: nothing).

    Args:
        cpus: The cores (``LaunchSpec.cpus``, one entry of a fleet's ``replica_cpus``).

    Returns:
        The reason to refuse it: empty, a negative number, a core given twice.
    """
    if not cpus or min(cpus) < 0 or len(set(cpus)) != len(cpus):
        return f"cpus={list(cpus)}: give one core number or more, each 0 or more and distinct"
    return None


DEFAULT_RENDEZVOUS_PORT = 29500
TransferBackend = Literal["nixl", "mooncake"]


class PDRole(_Settings):
    """This engine's part in prefill/decode disaggregation (set by :class:`Disaggregation`).

    ``port`` is the KV-transfer side channel (NIXL) or bootstrap port (Mooncake, SGLang) of
    this worker: unique per worker on a machine.

    Attributes:
        role: "prefill" or "decode".
        transfer: How the KV cache moves ("nixl" or "mooncake").
        port: This worker's side-channel/bootstrap port; None: the engine's default.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    role: Literal["prefill", "decode"]
    transfer: TransferBackend = "nixl"
    port: int | None = Field(None, ge=1, le=65535)


class Disaggregation(_Settings):
    """Prefill/decode disaggregation: ``Disaggregation(prefill=1, decode=1, transfer="nixl")``.

    ``prefill`` engines compute prompts and hand their KV cache over ``transfer`` (NIXL or
    Mooncake) to ``decode`` engines, which generate; a router pairs them per request.

    Attributes:
        prefill: Prefill engines to start.
        decode: Decode engines to start.
        transfer: How the KV cache moves from prefill to decode ("nixl" or "mooncake").
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    prefill: int = Field(1, ge=1)
    decode: int = Field(1, ge=1)
    transfer: TransferBackend = "nixl"


class LaunchSpec(BaseModel):
    """Everything needed to start an engine; unset fields keep the engine's defaults.

    ``python`` is the interpreter of the environment the engine is installed in (engines pin
    heavy dependencies, so they often live in their own venv); ``prefix`` goes before the
    whole command (e.g. ``["docker", "exec", "box"]``). ``api_key="auto"`` generates one.
    ``in_process=True`` runs the engine inside this process (adapters that support it).
    ``cpu=True`` applies the engine's CPU recipe (:func:`unillm.cpu_settings`): settings that run
    it on a CPU-only machine within a small memory budget; the fields you set win over it.
    ``tool_parser`` enables ``tool_choice="auto"`` (vLLM, SGLang); when omitted, unillm reads a
    local model's chat template and picks ``hermes`` for ``<tool_call>`` templates.
    ``structured_backend`` picks the engine's constrained-decoding backend (vLLM: "auto",
    "xgrammar", "guidance", "outlines", "lm-format-enforcer"; SGLang: "xgrammar", "llguidance",
    "outlines"), and ``compact_json=True`` forbids whitespace in constrained JSON; unillm then
    knows which schemas the server can honour and refuses the others before sending.
    ``reasoning_parser`` (vLLM, SGLang) makes the engine send the model's thinking apart from its
    answer; when omitted it is read off a local model's chat template (``<think>`` templates).
    ``task="embed"`` serves an embedding model for ``llm.embed()`` (vLLM's pooling runner,
    SGLang's embedding mode); engines without one refuse it.
    ``env`` values whose names look secret (``HF_TOKEN``, ``*_API_KEY``, ...: see
    :mod:`unillm.redact`) are masked wherever unillm prints them (``repr``, ``--dry-run``,
    ``render()``, ``LaunchError``, the engine's log); ``secret_env=["MY_VAR"]`` masks more.

    Attributes:
        model: The model's path or hub id.
        served_name: The name the engine serves the model under; None: the engine's choice.
        task: "generate", or "embed" for an embedding model.
        host: The address the engine listens on.
        port: The port; None picks a free one.
        api_key: "auto" generates a key, a string sets it, None serves without one.
        parallel: How the model is split across devices.
        dtype: The weights' dtype (e.g. "bfloat16"); None: the engine's default.
        max_model_len: The longest context in tokens; None: the model's.
        max_num_seqs: The most sequences batched at once.
        memory_fraction: The share of GPU memory the engine may take (0-1].
        quantization: The quantization method (e.g. "awq", "fp8").
        prefix_caching: Turn prefix caching on or off; None: the engine's default.
        max_queued_requests: The most requests the engine holds before it answers 503, which
            unillm raises as ``Overloaded`` (vLLM: waiting or running, ``--max-num-queued-reqs``;
            SGLang: waiting, ``--max-queued-requests``); None: no cap.
        scheduling: "priority" serves requests by their ``priority=`` (lower first), "fcfs" in
            arrival order; None: the engine's default (first come, first served).
        lora: LoRA adapters to load at start, name -> path.
        max_lora_rank: The highest adapter rank to reserve memory for.
        max_loras: Adapters served at once.
        runtime_lora: Allow loading adapters while running (``llm.loras.load``).
        speculative: Speculative decoding settings; None: off.
        nodes: Run one engine over several machines; None: this one only.
        ray_address: Run the layout's workers on this Ray cluster through the engine's own Ray
            executor (vLLM: ``--distributed-executor-backend ray``); None: the engine's default.
        pd: This engine's prefill/decode role (set by :class:`Disaggregation`).
        tool_parser: How the engine reads tool calls in the model's output; None: detected.
        structured_backend: The engine's constrained-decoding backend; None: its default.
        compact_json: Forbid whitespace in constrained JSON; None: the engine's default.
        reasoning_parser: How the engine separates the model's thinking (vLLM, SGLang); None: detected.
        in_process: Run the engine inside this process (adapters that support it).
        cpu: Apply the engine's CPU recipe (the fields you set win).
        python: The interpreter of the engine's environment; None: its managed env, else this one.
        prefix: Words put before the whole command (e.g. ``["docker", "exec", "box"]``).
        cpus: The CPU cores the engine's processes may run on (Linux), set before it starts so
            its thread pools size to them: two CPU replicas on one machine each want their own
            (sharing every core, their OpenMP threads spin against each other); None: all. It
            pins the process unillm starts: behind a container ``prefix`` use the container's
            own option (``docker --cpuset-cpus``).
        env: Extra environment for the engine (secret-looking values are masked when printed).
        secret_env: More env names whose values are masked when printed.
        extra_args: Engine flags appended as is.
        ready_timeout: Seconds the engine may take to become healthy before LaunchError.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", hide_input_in_errors=True)

    model: str
    served_name: str | None = None
    task: Literal["generate", "embed"] = "generate"
    host: str = "127.0.0.1"
    port: int | None = Field(None, ge=1, le=65535)
    api_key: Literal["auto"] | SecretStr | None = Field("auto", union_mode="left_to_right")
    parallel: Parallel = Parallel()
    dtype: str | None = None
    max_model_len: int | None = Field(None, ge=1)
    max_num_seqs: int | None = Field(None, ge=1)
    memory_fraction: float | None = Field(None, gt=0, le=1)
    quantization: str | None = None
    prefix_caching: bool | None = None
    max_queued_requests: int | None = Field(None, ge=1)
    scheduling: Literal["fcfs", "priority"] | None = None
    lora: dict[str, str] = {}
    max_lora_rank: int | None = Field(None, ge=1)
    max_loras: int | None = Field(None, ge=1)
    runtime_lora: bool = False
    speculative: Speculative | None = None
    nodes: Nodes | None = None
    ray_address: str | None = Field(None, min_length=1)
    pd: PDRole | None = None
    tool_parser: str | None = Field(
        None,
        description="how the engine reads tool calls in the model's output (vLLM's names: "
        "'hermes', 'llama3_json', 'mistral', 'pythonic', ...); None: detected from "
        "the model's chat template where reliable; 'none': no parser",
    )
    structured_backend: str | None = Field(
        None,
        description="the engine's constrained-decoding backend (vLLM: 'auto', 'xgrammar', 'guidance', ...)",
    )
    compact_json: bool | None = Field(None, description="forbid whitespace in constrained JSON")
    reasoning_parser: str | None = Field(
        None,
        description="how the engine separates the model's thinking from its answer (the engine's "
        "own names, e.g. 'qwen3', 'deepseek_r1'); None: detected from the model's chat template "
        "where reliable; 'none': no parser (unillm then splits the thinking markers itself)",
    )
    in_process: bool = False
    cpu: bool = Field(False, description="apply the engine's CPU recipe (your settings win)")
    python: str | None = None
    prefix: list[str] = []
    cpus: list[int] | None = None
    env: dict[str, str] = {}
    secret_env: list[str] = Field([], description="more env names whose values are masked when printed")
    extra_args: list[str] = []
    ready_timeout: float = Field(900, gt=0)

    @field_validator("lora")
    @classmethod
    def _plain_lora_names(cls, lora: dict[str, str]) -> dict[str, str]:
        for name in lora:
            try:
                check_lora_name(name)
            except InvalidOptions as e:
                raise ValueError(str(e)) from None
        return lora

    @field_validator("cpus")
    @classmethod
    def _distinct_cpus(cls, cpus: list[int] | None) -> list[int] | None:
        if cpus is not None and (why := core_list_problem(cpus)):
            raise ValueError(why)
        return cpus

    @model_validator(mode="after")
    def _pinnable(self) -> LaunchSpec:
        if self.cpus is not None and self.in_process:
            raise ValueError("cpus pins the engine's own process; in_process has none: leave cpus unset")
        return self

    @field_validator("api_key")
    @classmethod
    def _sendable_key(cls, key: Literal["auto"] | SecretStr | None) -> Literal["auto"] | SecretStr | None:
        if isinstance(key, SecretStr):
            try:
                check_api_key(key.get_secret_value())
            except InvalidOptions as e:
                raise ValueError(str(e)) from None
        return key

    def __repr_args__(self) -> Any:
        for name, value in super().__repr_args__():
            yield name, masked_env(value, self.secret_env) if name == "env" else value

    def parser(self) -> str | None:
        """The tool parser to start the engine with (None: none)."""
        return None if self.tool_parser in (None, "", "none") else self.tool_parser

    def thinking_parser(self) -> str | None:
        """The reasoning parser to start the engine with (None: none)."""
        return None if self.reasoning_parser in (None, "", "none") else self.reasoning_parser

    def key(self) -> str | None:
        """The API key in clear text (None when auth is off or not yet generated)."""
        return self.api_key.get_secret_value() if isinstance(self.api_key, SecretStr) else None


class Flags:
    """Builds an engine's argv: ``--flag value`` only for the settings that are set.

    argv = ["python", "-m", "server"]
    flags = Flags(argv)
    flags.add("--max-model-len", spec.max_model_len)   # skipped when None
    flags.switch("--enable-lora", bool(spec.lora))

    Args:
        argv: The command so far; flags are appended to this list in place.
    """

    def __init__(self, argv: list[str]) -> None:
        self.argv = argv

    def add(self, flag: str, value: object) -> None:
        """Append ``flag value`` unless value is None.

        Args:
            flag: The flag, e.g. ``--max-model-len``.
            value: Its value (``str()``-ed); None appends nothing.
        """
        if value is not None:
            self.argv += [flag, str(value)]

    def switch(self, flag: str, on: bool) -> None:
        """Append a bare ``flag`` when ``on``.

        Args:
            flag: The bare flag, e.g. ``--enable-lora``.
            on: Whether to append it.
        """
        if on:
            self.argv.append(flag)


MIN_SEARCHED_SECRET = 4  # shorter secret env values are masked where named, not searched for in text


def secret_names(env: Mapping[str, str], secret_env: Sequence[str] = ()) -> set[str]:
    """The names in ``env`` whose values are secret: secret-looking (:mod:`unillm.redact`) or listed."""
    return {k for k in env if k in secret_env or is_secret_name(k)}


def masked_env(env: Mapping[str, str], secret_env: Sequence[str] = ()) -> dict[str, str]:
    """``env`` with the values of its :func:`secret_names` masked."""
    hidden = secret_names(env, secret_env)
    return {k: MASK if k in hidden else v for k, v in env.items()}


LAUNCH_DIR = "{launch_dir}"  # in argv/env: the private folder the core writes LaunchCommand.files into


@dataclass(frozen=True)
class LaunchFile:
    """A file the core writes into the launch's own folder before the engine starts (pure data).

    Refer to it in argv or env by :attr:`path` (``{launch_dir}/<name>``); the core replaces the
    placeholder with the real folder when it starts the engine, and ``--dry-run`` prints the text::

        options = LaunchFile("extra_llm_api_options.yaml", "max_batch_size: 8\n")
        LaunchCommand(argv=["trtllm-serve", "serve", model, "--extra_llm_api_options", options.path],
                      files=(options,))
    """

    name: str
    text: str

    def __post_init__(self) -> None:
        if not self.name or "/" in self.name or self.name.startswith("."):
            raise ValueError(f"a launch file's name is a plain file name, not {self.name!r}")

    @property
    def path(self) -> str:
        """Where the engine finds the file: ``{launch_dir}/<name>`` until the core places it."""
        return f"{LAUNCH_DIR}/{self.name}"


def _no_progress(event: Any) -> str | None:
    """The default progress reader of a :class:`StartStep`: shows nothing.

    Args:
        event: One decoded object of the step's answer.
    """
    return None


@dataclass(frozen=True)
class StartStep:
    """A call the core makes once the engine is healthy, before its first request (e.g. a model pull).

    The answer may be one JSON body or newline-delimited JSON (NDJSON, read as it arrives); the
    core hands each decoded object to ``progress``, which returns a progress line (None: nothing
    to show) or raises a :class:`~unillm.errors.UnillmError` for a failure the answer reports. An
    error status is a failed launch carrying the adapter's typed error::

        StartStep("pull llama3.2", "POST", "/api/pull", {"model": "llama3.2"}, progress=pull_line)
    """

    label: str
    method: str
    path: str
    json: Mapping[str, Any] | None = None
    progress: Callable[[Any], str | None] = field(default=_no_progress, compare=False)


@dataclass(frozen=True)
class Prerequisite:
    """What the machine must have before the command can start: checked when it starts, never by
    ``--dry-run`` (which always renders the command).

    ``kind="binary"``: a program the user installs (not a pip package), looked up on ``PATH``;
    ``kind="nvidia-driver"``: an NVIDIA GPU driver (refused with ``UnsupportedFeature`` without
    one). ``install`` says how to get it.
    """

    kind: Literal["binary", "nvidia-driver"]
    name: str
    install: str


@dataclass(frozen=True)
class LaunchCommand:
    """What an adapter returns for a spec: the argv, extra environment and health path.

    Printing it (``repr``, ``str``, ``render()``) masks every secret: the ``secrets`` values
    wherever they appear, and the ``env`` values of secret-looking names (``HF_TOKEN``, see
    :mod:`unillm.redact`) and of ``secret_env`` names, and the values of secret flags in argv
    (``--api-key KEY``, ``--hf-token=TOKEN``); read ``argv``/``env`` to get them in clear.
    ``secrets`` gains those env and flag values (4 characters or more), so the engine's log
    masks them too.
    """

    argv: list[str]
    env: Mapping[str, str] = field(default_factory=dict)
    health_path: str = "/health"
    secrets: tuple[str, ...] = ()
    secret_env: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()  # what ``--dry-run`` says about the command (e.g. AMX), as comments
    files: tuple[LaunchFile, ...] = ()  # written into the launch's folder before the start
    after_start: tuple[StartStep, ...] = ()  # made in order once healthy, before the first request
    requires: tuple[Prerequisite, ...] = ()  # checked before the start (not by --dry-run)

    def __post_init__(self) -> None:
        found = [self.env[k] for k in secret_names(self.env, self.secret_env)]
        found += [value for _, value in secret_flag_values(self.argv)]
        searched = [v for v in found if len(v) >= MIN_SEARCHED_SECRET]
        object.__setattr__(self, "secrets", tuple(dict.fromkeys((*self.secrets, *searched))))

    def placed(self, folder: str) -> LaunchCommand:
        """This command with ``{launch_dir}`` in argv and env replaced by ``folder``.

        Args:
            folder: The folder the core wrote :attr:`files` into.
        """
        return replace(
            self,
            argv=[a.replace(LAUNCH_DIR, folder) for a in self.argv],
            env={k: v.replace(LAUNCH_DIR, folder) for k, v in self.env.items()},
        )

    def described(self) -> tuple[str, ...]:
        """What ``--dry-run`` prints before the command line: notes, prerequisites, files, steps."""
        lines = [*self.notes]
        lines += [f"needs {p.name} ({p.kind}): {p.install}" for p in self.requires]
        for f in self.files:
            lines += [f"{f.path}:", *(f"  {line}" for line in self._mask(f.text).splitlines())]
        lines += [f"once healthy: {s.label} ({s.method} {s.path})" for s in self.after_start]
        return tuple(lines)

    def render(self) -> str:
        """The command as a shell line, with every secret masked."""
        hidden = secret_names(self.env, self.secret_env)
        env = " ".join(f"{k}={MASK if k in hidden else shlex.quote(v)}" for k, v in sorted(self.env.items()))
        masked = masked_argv(self.argv)  # a masked word shown as ***, the others shell-quoted
        line = " ".join(m if m != a else shlex.quote(a) for m, a in zip(masked, self.argv, strict=True))
        return self._mask(f"{env} {line}" if env else line)

    def __repr__(self) -> str:
        return self._mask(
            f"LaunchCommand(argv={self.argv!r}, env={masked_env(self.env, self.secret_env)!r}, "
            f"health_path={self.health_path!r}, secrets={('***',) * len(self.secrets)!r})"
        )

    def _mask(self, text: str) -> str:
        for s in self.secrets:
            if s:
                text = text.replace(s, "***")
        return text


@dataclass(frozen=True)
class CpuRecipe:
    """An engine's recipe for a CPU-only machine, returned by ``Adapter.cpu_recipe`` (pure).

    ``settings`` are LaunchSpec fields: the caller's own fields win, ``env`` is merged (the
    caller's keys win) and ``extra_args`` go before the caller's. The core creates ``dirs``
    and then runs ``prepare`` (the I/O a recipe needs, e.g. converting LoRA adapters).
    ``engine_env`` names the managed env under ``$UNILLM_CACHE/envs`` to run the engine from
    when it is not the engine's own (``unillm setup <engine>``). A non-empty ``experimental``
    says why the recipe is not product-grade yet (shown when it is used).

        CpuRecipe(settings={"dtype": "bfloat16", "env": {"VLLM_CPU_KVCACHE_SPACE": "1"}},
                  dirs=(workdir / "tmp",))
    """

    settings: Mapping[str, Any]
    dirs: tuple[Path, ...] = ()
    engine_env: str | None = None
    experimental: str = ""
    prepare: Callable[[LaunchSpec], LaunchSpec] | None = None


def build_spec(spec: LaunchSpec | None, settings: dict[str, Any]) -> LaunchSpec:
    """A LaunchSpec from an explicit spec and/or keyword settings, with readable errors."""
    try:
        if spec is None:
            return LaunchSpec(**settings)
        if not settings:
            return spec
        return LaunchSpec.model_validate({**spec.model_dump(exclude_unset=True), **settings})
    except ValidationError as e:
        problems = validation_problems(e)
        raise InvalidOptions(f"invalid launch settings: {problems}") from None
