"""What a deployment is made of: the config's engine and ``[launch]`` spec, plus its ``[deploy]`` table.

    engine = "vllm"
    [launch]                       # the same table unillm.from_config launches locally
    model = "Qwen/Qwen2.5-7B-Instruct"
    parallel = {tensor = 2}
    [deploy]                       # what unillm.launch takes besides the spec
    replicas = 3
    policy = "prefix"
    [deploy.kubernetes]            # cluster-only settings
    namespace = "llm"

``[deploy]`` holds the fleet settings ``unillm.launch`` takes as keywords (``replicas``,
``policy``, ``disaggregation``); ``[deploy.kubernetes]`` what only a cluster needs (names, model
URIs for local paths, image, accelerator, secrets). Reading is the only I/O here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from unillm.adapter.launch_spec import Disaggregation, LaunchSpec, build_spec
from unillm.errors import InvalidOptions, validation_problems
from unillm.fleet.picker import Policy

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
    """``[deploy]``: the fleet settings ``unillm.launch`` takes besides the spec, and the cluster's.

    Attributes:
        replicas: Engines (pods) serving the model.
        policy: How the router picks an engine per request; None: the router's default.
        disaggregation: Prefill/decode engine counts instead of ``replicas``.
        kubernetes: The ``[deploy.kubernetes]`` table.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    replicas: int = Field(1, ge=1)
    policy: Policy | None = None
    disaggregation: Disaggregation | None = None
    kubernetes: KubernetesSettings = KubernetesSettings()


@dataclass(frozen=True)
class Deployment:
    """One config, read: the engine, the launch spec and the ``[deploy]`` settings (pure data)."""

    engine: str
    spec: LaunchSpec
    settings: DeploySettings


def read_deployment(
    source: str | Path | Mapping[str, Any], env: Mapping[str, str] | None = None
) -> Deployment:
    """Read a unillm config (``.toml``/``.yaml`` or a mapping) for a deployment.

    Args:
        source: The config file or mapping (``engine``, ``[launch]``, optional ``[deploy]``).
        env: Environment whose ``UNILLM_*`` variables override config keys; None is ``os.environ``.

    Returns:
        The engine, its validated launch spec and the deploy settings.

    Raises:
        ConfigError: The config does not read or validate.
        InvalidOptions: It has no ``[launch]`` table, or ``[launch]``/``[deploy]`` are invalid.
    """
    from unillm.config.load import load_config

    config = load_config(source, env)
    if config.launch is None:
        raise InvalidOptions(
            "a deployment starts engines: the config needs a [launch] table (model = ..., "
            "parallel = ...) rather than base_url, which connects to engines already running"
        )
    settings = dict(config.launch)
    if config.model and "model" not in settings:
        settings["model"] = config.model
    if config.api_key is not None and "api_key" not in settings:
        settings["api_key"] = config.api_key
    spec = build_spec(None, settings)
    try:
        deploy = DeploySettings.model_validate(config.deploy or {})
    except ValidationError as e:
        raise InvalidOptions(f"invalid [deploy]: {validation_problems(e, 'deploy')}") from None
    return Deployment(config.engine, spec, deploy)
