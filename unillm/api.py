"""The two ways in: connect to a running engine, or launch one.

llm = unillm.connect("vllm", "http://gpu-1:8000", api_key="...")
fleet = unillm.connect("vllm", ["http://gpu-1:8000", "http://gpu-2:8000"], policy="prefix")
async with unillm.launch("vllm", model="/models/tiny", max_model_len=512) as llm: ...
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, NamedTuple, TypedDict, overload

from unillm.adapter.launch_spec import Disaggregation, LaunchSpec, build_spec
from unillm.client.llm import LLM
from unillm.client.priority_gate import Reserve
from unillm.client.transport import Pool, RetryPolicy, Timeouts
from unillm.errors import InvalidOptions
from unillm.options import Options

if TYPE_CHECKING:
    from unillm.fleet.fleet import Fleet
    from unillm.fleet.picker import Policy
    from unillm.launching.fleet_launch import FleetLaunch
    from unillm.launching.ray_cluster import RayLaunch
    from unillm.launching.ray_plan import Ray
    from unillm.launching.supervisor import ClientSettings, Launch, LaunchProgress, ProgressHook


def print_progress(progress: LaunchProgress) -> None:
    """The default ``progress`` of :func:`launch`: one updating line on a terminal, a line every
    10 s otherwise (:func:`unillm.launching.supervisor.print_progress`, imported only when an
    engine is launched, so that ``connect`` loads no launch machinery)."""
    from unillm.launching import supervisor

    supervisor.print_progress(progress)


@overload
def connect(
    engine: str,
    base_url: str,
    *,
    model: str | None = None,
    api_key: str | None = None,
    defaults: Options | None = None,
    timeouts: Timeouts = Timeouts(),
    retry: RetryPolicy | None = None,
    pool: Pool = Pool(),
    reserve: Reserve | None = None,
) -> LLM: ...


@overload
def connect(
    engine: str,
    base_url: list[str] | tuple[str, ...],
    *,
    model: str | None = None,
    api_key: str | None = None,
    defaults: Options | None = None,
    timeouts: Timeouts = Timeouts(),
    policy: Policy = "round_robin",
    prefix_chars: int = 256,
    pool: Pool = Pool(),
    reserve: Reserve | None = None,
) -> Fleet: ...


def connect(
    engine: str,
    base_url: str | list[str] | tuple[str, ...],
    *,
    model: str | None = None,
    api_key: str | None = None,
    defaults: Options | None = None,
    timeouts: Timeouts = Timeouts(),
    retry: RetryPolicy | None = None,
    policy: Policy | None = None,
    prefix_chars: int = 256,
    pool: Pool = Pool(),
    reserve: Reserve | None = None,
) -> LLM | Fleet:
    """Talk to a running engine: ``unillm.connect("vllm", "http://127.0.0.1:8000")``.

    ``model`` defaults to the engine's served model; ``defaults`` are options applied to every
    request (overridden per call); ``pool`` sizes each engine's connection pool
    (:class:`~unillm.Pool`). Nothing is sent until the first request, but the arguments are
    checked now: a malformed ``base_url`` or an ``api_key`` that cannot be a header (a trailing
    newline, non-ASCII) raises InvalidOptions (the key is not echoed). A password in the URL
    (``http://user:pw@host``) is sent as basic auth and printed as ``***`` (``llm.base_url``).

    A list of URLs gives a :class:`~unillm.fleet.fleet.Fleet` of replicas of one model, routed by
    ``policy`` ("round_robin", "least_load", "prefix", "session", "cache_aware"):
    ``unillm.connect("vllm", ["http://a:8000", "http://b:8000"], policy="prefix")``.

    Args:
        engine: The adapter's name ("vllm", "sglang", "tgi", "mlx", "llamacpp", ...).
        base_url: The engine's URL, or a list of replica URLs for a fleet.
        model: The model to ask for; None uses the engine's served model.
        api_key: Sent as a bearer token; never echoed in messages or reprs.
        defaults: Options applied to every request, overridden per call.
        timeouts: Connect/read/pool limits in seconds (:class:`~unillm.Timeouts`).
        retry: How one engine retries overloads and dropped connections; None is the default
            :class:`~unillm.RetryPolicy`. Refused for a list of URLs.
        policy: How a fleet picks a replica; only with a list of URLs.
        prefix_chars: How many leading prompt characters the "prefix" policy hashes.
        pool: Connection-pool sizes per engine (:class:`~unillm.Pool`).
        reserve: Engine slots kept free for urgent requests, per engine (:class:`~unillm.Reserve`,
            with its ``capacity``: the engine's ``max_num_seqs``); None sends every request at once.

    Returns:
        An :class:`~unillm.LLM` for one URL, a :class:`~unillm.Fleet` for a list.

    Raises:
        InvalidOptions: A malformed URL or key, a reserve without capacity, or an argument that
            does not fit one/many URLs.
        UnknownEngine: No adapter is installed under ``engine``.
    """
    _refuse_misfits(isinstance(base_url, str), policy, retry)
    common = _ClientArgs(model=model, api_key=api_key, defaults=defaults, timeouts=timeouts, pool=pool)
    if isinstance(base_url, str):
        return LLM(engine, base_url, retry=retry or RetryPolicy(), reserve=reserve, **common)
    from unillm.fleet.fleet import Fleet

    policy = policy or "round_robin"
    return Fleet.connect(
        engine, base_url, policy=policy, prefix_chars=prefix_chars, reserve=reserve, **common
    )


class _ClientArgs(TypedDict):
    """What ``connect`` passes alike to one LLM and to a Fleet."""

    model: str | None
    api_key: str | None
    defaults: Options | None
    timeouts: Timeouts
    pool: Pool


def _refuse_misfits(one: bool, policy: Policy | None, retry: RetryPolicy | None) -> None:
    """Refuse ``policy`` for one URL and ``retry`` for a list of them.

    Raises:
        InvalidOptions: An argument that does not fit one/many URLs.
    """
    if one and policy is not None:
        raise InvalidOptions("policy= routes between replicas: pass a list of base URLs")
    if not one and retry is not None:
        raise InvalidOptions(
            "retry= is for one engine; a fleet fails over between its replicas and "
            "cools down overloaded ones itself (see unillm.Fleet)"
        )


@overload
def launch(
    engine: str,
    spec: LaunchSpec | None = None,
    *,
    replicas: Literal[1] = 1,
    router: None = None,
    policy: Policy = "round_robin",
    disaggregation: None = None,
    cluster: None = None,
    progress: ProgressHook | None = print_progress,
    log_path: Path | None = None,
    defaults: Options | None = None,
    timeouts: Timeouts = Timeouts(),
    retry: RetryPolicy = RetryPolicy(),
    pool: Pool = Pool(),
    reserve: Reserve | None = None,
    **settings: Any,
) -> Launch: ...


@overload
def launch(
    engine: str,
    spec: LaunchSpec | None = None,
    *,
    replicas: int = 1,
    policy: Policy = "round_robin",
    cluster: Ray,
    progress: ProgressHook | None = print_progress,
    defaults: Options | None = None,
    timeouts: Timeouts = Timeouts(),
    retry: RetryPolicy = RetryPolicy(),
    pool: Pool = Pool(),
    reserve: Reserve | None = None,
    **settings: Any,
) -> RayLaunch: ...


@overload
def launch(
    engine: str,
    spec: LaunchSpec | None = None,
    *,
    replicas: int = 1,
    router: str | None = None,
    policy: Policy = "round_robin",
    disaggregation: Disaggregation | None = None,
    replica_env: Sequence[Mapping[str, str]] = (),
    replica_cpus: Sequence[Sequence[int]] = (),
    cluster: Ray | None = None,
    progress: ProgressHook | None = print_progress,
    log_path: Path | None = None,
    defaults: Options | None = None,
    timeouts: Timeouts = Timeouts(),
    retry: RetryPolicy = RetryPolicy(),
    pool: Pool = Pool(),
    reserve: Reserve | None = None,
    **settings: Any,
) -> Launch | FleetLaunch | RayLaunch: ...


def launch(
    engine: str,
    spec: LaunchSpec | None = None,
    *,
    replicas: int = 1,
    router: str | None = None,
    policy: Policy = "round_robin",
    disaggregation: Disaggregation | None = None,
    replica_env: Sequence[Mapping[str, str]] = (),
    replica_cpus: Sequence[Sequence[int]] = (),
    cluster: Ray | None = None,
    progress: ProgressHook | None = print_progress,
    log_path: Path | None = None,
    defaults: Options | None = None,
    timeouts: Timeouts = Timeouts(),
    retry: RetryPolicy = RetryPolicy(),
    pool: Pool = Pool(),
    reserve: Reserve | None = None,
    **settings: Any,
) -> Launch | FleetLaunch | RayLaunch:
    """Start an engine; ``async with`` the result to get a connected LLM, stopped on exit.

        async with unillm.launch("vllm", model="Qwen/Qwen2.5-0.5B-Instruct",
                                 parallel=unillm.Parallel(tensor=2)) as llm:
            ...

    Args:
        engine: The adapter's name ("vllm", "sglang", "tgi", "mlx", "llamacpp", ...).
        spec: A prepared launch spec; ``settings`` are merged over it.
        replicas: How many engines to start; more than one gives a client-side
            :class:`~unillm.fleet.fleet.Fleet` routed by ``policy`` (:mod:`unillm.launching.fleet_launch`).
        router: A router to start in front ("vllm-router" or "smg"), giving an ``LLM`` pointed at it.
        policy: How the replicas (or the router) pick an engine per request.
        disaggregation: Prefill/decode engine counts to start behind the router.
        replica_env: Extra environment per engine, one mapping per replica (e.g. ``CUDA_VISIBLE_DEVICES``).
        replica_cpus: CPU cores per engine, one list per replica (Linux; ``cpu=True`` splits them).
        cluster: A Ray cluster to place the engines' replicas on, e.g. ``unillm.Ray(address)``
            (:mod:`unillm.launching.ray_cluster`; ``pip install 'unillm-sdk[ray]'``); None: this machine.
        progress: Called with each launch step; None is silent.
        log_path: Where the engine's output goes (one engine only); None: the temp folder's.
        defaults: Options applied to every request, overridden per call.
        timeouts: Connect/read/pool limits in seconds for the connected client.
        retry: How the connected client retries overloads and dropped connections.
        pool: Connection-pool sizes per engine.
        reserve: Engine slots kept for urgent requests (:class:`~unillm.Reserve`; capacity: max_num_seqs).
        **settings: :class:`~unillm.LaunchSpec` fields (model, lora, speculative, python, env,
            extra_args, ...), e.g. ``model="..."``, ``max_model_len=512``.

    Returns:
        A :class:`~unillm.Launch` (one engine), :class:`~unillm.launching.fleet_launch.FleetLaunch`
        or, with ``cluster``, :class:`~unillm.launching.ray_cluster.RayLaunch`; ``async with`` it.

    Raises:
        InvalidOptions: A setting the spec refuses, ``log_path`` with several processes, a bad reserve.
    """
    from unillm.launching.supervisor import ClientSettings

    client = ClientSettings(defaults=defaults, timeouts=timeouts, retry=retry, pool=pool, reserve=reserve)
    layout = _Layout(replicas, router, policy, disaggregation, replica_env, replica_cpus, cluster, log_path)
    return _start(engine, build_spec(spec, settings), progress, client, layout)


class _Layout(NamedTuple):
    """What ``launch`` starts besides the engine's own settings: how many, behind what, where."""

    replicas: int
    router: str | None
    policy: Policy
    disaggregation: Disaggregation | None
    replica_env: Sequence[Mapping[str, str]]
    replica_cpus: Sequence[Sequence[int]]
    cluster: Ray | None
    log_path: Path | None


def _start(
    engine: str, spec: LaunchSpec, progress: ProgressHook | None, client: ClientSettings, layout: _Layout
) -> Launch | FleetLaunch | RayLaunch:
    """The launch these settings ask for: replicas on a Ray cluster, one engine, or a fleet."""
    from unillm.launching.supervisor import Launch

    replicas, router, policy, disaggregation, replica_env, replica_cpus, cluster, log_path = layout

    if cluster is not None:
        from unillm.launching.ray_cluster import RayLaunch

        if (
            router is not None
            or disaggregation is not None
            or replica_env
            or replica_cpus
            or log_path is not None
        ):
            raise InvalidOptions(
                "a Ray launch places replicas with client-side routing: router=, disaggregation=, "
                "replica_env=, replica_cpus= and log_path= do not apply (each node keeps its engine's log)"
            )
        return RayLaunch(
            engine, spec, cluster=cluster, replicas=replicas, policy=policy, progress=progress, client=client
        )
    if replicas == 1 and router is None and disaggregation is None and not (replica_env or replica_cpus):
        return Launch(engine, spec, log_path=log_path, progress=progress, client=client)
    from unillm.launching.fleet_launch import FleetLaunch

    if log_path is not None:
        raise InvalidOptions(
            "a fleet writes one log per process: pass log_dir via "
            "unillm.launching.fleet_launch.FleetLaunch(..., log_dir=...), not log_path"
        )
    return FleetLaunch(
        engine,
        spec,
        replicas=replicas,
        router=router,
        policy=policy,
        disaggregation=disaggregation,
        replica_env=replica_env,
        replica_cpus=replica_cpus,
        progress=progress,
        client=client,
    )
