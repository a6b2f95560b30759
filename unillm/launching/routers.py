"""Standalone routers in front of engine replicas: their command lines, rendered purely.

    tool = get_router("smg")
    cmd = tool.command(RouterSpec(workers=("http://127.0.0.1:8001", "http://127.0.0.1:8002"),
                                  policy="prefix", port=30000))
    cmd.render()        # python -m smg.launch_router --worker-urls ... --policy prefix_hash ...

Routers are not engine adapters: they speak the engines' OpenAI-compatible API in front of
them, so the client talks to a router with the engine's own adapter. Each router here is one
class that renders argv, environment and health path from a :class:`RouterSpec` (no I/O), and
says how ``unillm setup <router>`` installs it into its own managed environment. The
supervisor starts and watches the process like an engine's.

The unified routing policies map onto each router's own: ``round_robin``, ``least_load``,
``prefix`` (requests sharing a prompt prefix go to the same replica, for its prefix cache),
``session`` (a caller's key pins a conversation to one replica) and ``cache_aware`` (each
router's own approximate prefix tree, balanced against load): the same names as the
client-side fleet's (:mod:`unillm.fleet.picker`). A policy a router does not have is refused with
:class:`~unillm.errors.UnsupportedFeature` before anything starts.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar

from unillm.adapter.base import EngineInstall
from unillm.adapter.launch_spec import Flags, LaunchCommand, TransferBackend
from unillm.errors import InvalidOptions, UnsupportedFeature
from unillm.fleet.picker import POLICIES, Policy


@dataclass(frozen=True)
class PrefillWorker:
    """A prefill worker for a router in PD mode: its URL and KV bootstrap port (None: none)."""

    url: str
    bootstrap_port: int | None = None


@dataclass(frozen=True)
class RouterSpec:
    """What a router needs: the replicas (or PD workers) behind it, its policy and address.

    ``api_key`` is the key the replicas require (the router sends it to them). ``metrics_port``
    is where the router serves its Prometheus metrics (both routers default to 29000, so two
    routers on one host need their own).
    """

    workers: tuple[str, ...] = ()
    policy: Policy = "round_robin"
    host: str = "127.0.0.1"
    port: int = 30000
    api_key: str | None = None
    python: str | None = None
    metrics_port: int | None = None
    prefill: tuple[PrefillWorker, ...] = ()
    decode: tuple[str, ...] = ()
    transfer: TransferBackend | None = None
    engine: str = "vllm"
    extra_args: tuple[str, ...] = ()

    @property
    def disaggregated(self) -> bool:
        """True in prefill/decode mode."""
        return bool(self.prefill or self.decode)


class RouterTool(ABC):
    """One standalone router: how to install it and its command line (pure)."""

    name: ClassVar[str]
    package: ClassVar[str]
    module: ClassVar[str]
    engines: ClassVar[tuple[str, ...]]  # engines it routes for
    policies: ClassVar[Mapping[str, str]]  # unified policy -> the router's own
    session_key: ClassVar[str]  # where the router reads a session key for ``session``
    health_path: ClassVar[str] = "/health"

    def install(self) -> EngineInstall:
        """How ``unillm setup <router>`` installs it (its own venv, this Python)."""
        return EngineInstall(packages=(self.package,))

    def policy(self, policy: str) -> str:
        """The router's own name for a unified policy; refused when it has none."""
        if policy not in POLICIES:
            raise InvalidOptions(f"unknown routing policy {policy!r}; use one of {', '.join(POLICIES)}")
        own = self.policies.get(policy)
        if own is None:
            have = ", ".join(p for p in POLICIES if p in self.policies)
            raise UnsupportedFeature(
                self.name,
                f"routing policy {policy!r}",
                why=f"{self.name} has no such policy",
                alternative=f"Use one of {have}, or the client-side fleet (no router=)",
            )
        return own

    def command(self, spec: RouterSpec) -> LaunchCommand:
        """argv and environment that start the router for ``spec``."""
        if spec.engine not in self.engines:
            raise UnsupportedFeature(
                self.name,
                f"routing for {spec.engine}",
                why=f"{self.name} routes for {', '.join(self.engines)}",
                alternative="Use the client-side fleet (no router=)",
            )
        if spec.disaggregated == bool(spec.workers):
            raise InvalidOptions(
                f"{self.name}: give either workers (regular mode) or prefill and "
                "decode workers (PD mode), not both or neither"
            )
        if spec.disaggregated and not (spec.prefill and spec.decode):
            raise InvalidOptions(f"{self.name}: PD mode needs at least one prefill and one decode worker")
        argv = [spec.python or "python", "-m", self.module, "--host", spec.host, "--port", str(spec.port)]
        flags = Flags(argv)
        if spec.disaggregated:
            argv += self.pd_flags(spec)
        else:
            argv += ["--worker-urls", *spec.workers]
        argv += ["--policy", self.policy(spec.policy)]
        flags.add("--prometheus-port", spec.metrics_port)
        argv += self.own_flags(spec)
        argv += spec.extra_args
        key = spec.api_key
        return LaunchCommand(
            argv=argv, env=self.own_env(spec), health_path=self.health_path, secrets=(key,) if key else ()
        )

    def own_env(self, spec: RouterSpec) -> dict[str, str]:
        """Environment the router reads (default: none)."""
        return {}

    def pd_flags(self, spec: RouterSpec) -> list[str]:
        """The prefill/decode worker flags (``--prefill URL [BOOTSTRAP] --decode URL``)."""
        flags = [self.pd_switch]
        for w in spec.prefill:
            flags += ["--prefill", w.url, *([str(w.bootstrap_port)] if w.bootstrap_port else [])]
        for url in spec.decode:
            flags += ["--decode", url]
        return flags

    pd_switch: ClassVar[str]

    @abstractmethod
    def own_flags(self, spec: RouterSpec) -> list[str]:
        """Router-specific flags beyond the common ones."""


class VllmRouter(RouterTool):
    """vLLM's router (PyPI ``vllm-router``; Rust core, a fork of SGLang's gateway).

    ``prefix`` is its ``cache_aware`` policy, which asks each vLLM worker to render the prompt
    (``/v1/chat/completions/render``); ``session`` is ``consistent_hash`` on the
    ``X-Session-ID`` header (or ``session_params.session_id`` in the body). It has no
    least-load policy for regular mode (its ``power_of_two`` needs PD mode).

    It checks no key itself. In regular mode it forwards the client's ``Authorization`` header
    to the worker, which checks it; in PD mode it sends ``Bearer $OPENAI_API_KEY`` from its own
    environment instead (its ``--api-key`` is not used there), so the key goes in that variable
    and never in argv.
    """

    name = "vllm-router"
    package = "vllm-router==0.1.17"
    module = "vllm_router.launch_router"
    engines = ("vllm",)
    policies: ClassVar[Mapping[str, str]] = {
        "round_robin": "round_robin",
        "prefix": "cache_aware",
        "session": "consistent_hash",
        "cache_aware": "cache_aware",
    }
    session_key = "header X-Session-ID"
    pd_switch = "--vllm-pd-disaggregation"

    def own_flags(self, spec: RouterSpec) -> list[str]:
        if spec.disaggregated and spec.transfer is not None:
            return ["--kv-connector", spec.transfer]
        return []

    def own_env(self, spec: RouterSpec) -> dict[str, str]:
        return {"OPENAI_API_KEY": spec.api_key} if spec.api_key else {}


class Smg(RouterTool):
    """The Shepherd Model Gateway (PyPI ``smg``; successor of sglang-router), for SGLang and vLLM.

    ``prefix`` is its ``prefix_hash`` policy (consistent hashing of the prompt's leading tokens
    with bounded load, like the client-side fleet's), ``session`` is ``consistent_hashing`` on the
    ``X-SMG-Routing-Key`` header, ``least_load`` its ``least_load``.

    ``--api-key`` makes it check clients' keys and send the same key to the workers. It reads
    the key only from argv (no environment variable): masked wherever unillm prints the
    command, but visible in ``ps``.
    """

    name = "smg"
    package = "smg==1.13.0"
    module = "smg.launch_router"
    engines = ("vllm", "sglang")
    policies: ClassVar[Mapping[str, str]] = {
        "round_robin": "round_robin",
        "least_load": "least_load",
        "prefix": "prefix_hash",
        "session": "consistent_hashing",
        "cache_aware": "cache_aware",
    }
    session_key = "header X-SMG-Routing-Key"
    pd_switch = "--pd-disaggregation"

    def own_flags(self, spec: RouterSpec) -> list[str]:
        # One token: a generated key may start with "-", which argparse would take for a flag.
        flags = [f"--api-key={spec.api_key}"] if spec.api_key else []
        # Over HTTP smg detects the workers' engine; in PD mode it must know vLLM's two-step
        # protocol (prefill with max_tokens=1, then decode) from SGLang's bootstrap rooms.
        return flags + (["--backend", spec.engine] if spec.disaggregated else [])


ROUTERS: dict[str, RouterTool] = {t.name: t for t in (VllmRouter(), Smg())}


def get_router(name: str) -> RouterTool:
    """The router registered as ``name`` ("vllm-router" or "smg")."""
    tool = ROUTERS.get(name.lower())
    if tool is None:
        raise InvalidOptions(f"unknown router {name!r}; unillm can start: {', '.join(ROUTERS)}")
    return tool
