"""What a deployment is made of: the config's engine, ``[launch]`` and ``policy``, and ``[deploy]``.

    engine = "vllm"
    policy = "prefix"              # how requests pick an engine: the key a local fleet reads
    [launch]                       # the same table unillm.from_config launches locally
    model = "Qwen/Qwen2.5-7B-Instruct"
    parallel = {tensor = 2}
    replicas = 3                   # or disaggregation = {prefill = P, decode = D, transfer = "nixl"}
    [deploy.kubernetes]            # cluster-only settings
    namespace = "llm"

Replicas, prefill/decode and the routing policy are read where a local or Ray launch reads them
(``[launch]`` through :func:`unillm.config.cluster.split_launch`, and the top-level ``policy``);
``[deploy]`` holds only ``[deploy.kubernetes]``: what only a cluster needs (names, model URIs for
local paths, image, accelerator, secrets). ``[launch.cluster]`` (a Ray cluster) and ``[launch]
router`` (a local router process) are ignored here: KServe places the pods and its scheduler
routes. Reading is the only I/O here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from unillm.adapter.launch_spec import Disaggregation, LaunchSpec, build_spec
from unillm.config.cluster import split_launch
from unillm.errors import InvalidOptions, validation_problems
from unillm.fleet.picker import POLICIES, Policy

__all__ = ["DeploySettings", "Deployment", "KubernetesSettings", "read_deployment"]


class KubernetesSettings(BaseModel):
    """``[deploy.kubernetes]``: what only a cluster needs.

    Attributes:
        name: The resource's name (a DNS label); None: made from the served name or model id.
        namespace: The namespace; None: kubectl's current one.
        model_uri: Where the cluster gets the model (``hf://``, ``s3://``, ``pvc://``, ``oci://``),
            when ``[launch] model`` is a local path; None: the hub id as ``hf://``.
        lora_uris: Per adapter name, where the cluster gets it (``hf://``, ``s3://``, ``pvc://``).
        image: The engine container's image; None: KServe's default vLLM (CUDA) image.
        accelerator: The extended resource GPUs are requested as.
        resources: More requests and limits of the engine container (``{cpu = "4", memory = "32Gi"}``).
        scheduler: Put KServe's scheduler (the Inference Gateway's endpoint picker) in front.
        gateway: An existing Gateway (``name`` or ``namespace/name``); None: KServe's default one.
        secret_env: Engine environment read from Secrets: variable name -> Secret name (the key
            is the variable's name), e.g. ``{HF_TOKEN = "hf-token"}``.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str | None = Field(None, min_length=1)
    namespace: str | None = Field(None, pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", max_length=63)
    model_uri: str | None = Field(None, min_length=1)
    lora_uris: dict[str, str] = {}
    image: str | None = Field(None, min_length=1)
    accelerator: str = Field("nvidia.com/gpu", min_length=1)
    resources: dict[str, str] = {}
    scheduler: bool = True
    gateway: str | None = Field(None, min_length=1)
    secret_env: dict[str, str] = {}


class DeploySettings(BaseModel):
    """``[deploy]``: the cluster-only settings (replicas, policy and prefill/decode are the launch's).

    Attributes:
        kubernetes: The ``[deploy.kubernetes]`` table.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    kubernetes: KubernetesSettings = KubernetesSettings()


@dataclass(frozen=True)
class Deployment:
    """One config, read: the engine, its launch spec and placement, and ``[deploy]`` (pure data).

    Attributes:
        engine: The adapter's name.
        spec: The engine's settings (``[launch]`` without its placement keys).
        settings: The ``[deploy]`` table.
        replicas: Engines serving the model (``[launch] replicas``).
        disaggregation: Prefill/decode engine counts (``[launch] disaggregation``); None: no roles.
        policy: How the router picks an engine (the top-level ``policy``); None: its default.
    """

    engine: str
    spec: LaunchSpec
    settings: DeploySettings
    replicas: int = 1
    disaggregation: Disaggregation | None = None
    policy: Policy | None = None


def read_deployment(
    source: str | Path | Mapping[str, Any], env: Mapping[str, str] | None = None
) -> Deployment:
    """Read a unillm config (``.toml``/``.yaml`` or a mapping) for a deployment.

    Args:
        source: The config file or mapping (``engine``, ``[launch]``, optional ``policy`` and
            ``[deploy.kubernetes]``).
        env: Environment whose ``UNILLM_*`` variables override config keys; None is ``os.environ``.

    Returns:
        The engine, its validated launch spec, replicas or prefill/decode, policy and ``[deploy]``.

    Raises:
        ConfigError: The config does not read or validate, or ``[deploy]`` has a key that lives
            elsewhere now (``replicas``, ``policy``, ``disaggregation``).
        InvalidOptions: It has no ``[launch]`` table, or ``[launch]``, ``policy`` or ``[deploy]``
            is invalid.
    """
    from unillm.config.load import load_config

    config = load_config(source, env)
    if config.launch is None:
        raise InvalidOptions(
            "a deployment starts engines: the config needs a [launch] table (model = ..., "
            "parallel = ...) rather than base_url, which connects to engines already running"
        )
    settings, placement = split_launch(config.launch)  # its cluster and router: not KServe's
    if config.model and "model" not in settings:
        settings["model"] = config.model
    if config.api_key is not None and "api_key" not in settings:
        settings["api_key"] = config.api_key
    spec = build_spec(None, settings)
    if config.policy is not None and config.policy not in POLICIES:
        raise InvalidOptions(f"unknown routing policy {config.policy!r}; use one of {', '.join(POLICIES)}")
    try:
        deploy = DeploySettings.model_validate(config.deploy or {})
    except ValidationError as e:
        raise InvalidOptions(f"invalid [deploy]: {validation_problems(e, 'deploy')}") from None
    policy = cast("Policy | None", config.policy)
    return Deployment(config.engine, spec, deploy, placement.replicas, placement.disaggregation, policy)
