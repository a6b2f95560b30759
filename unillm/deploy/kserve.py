"""A unillm deployment as KServe's ``LLMInferenceService`` (``serving.kserve.io/v1alpha1``), pure.

    manifests = render_kserve(read_deployment("unillm.toml"))   # [ {apiVersion, kind, ...} ]

One resource serves the model: KServe creates the engine pods (vLLM, its default template runs
``vllm serve /mnt/models``), the storage initializer that downloads the model, the gateway route,
the inference pool and the scheduler (the Inference Gateway's endpoint picker) from it. What the
config says is carried into the resource's own fields where KServe has one (model URI and name,
replicas, parallelism, LoRA adapters, prefill/decode, router), and every other engine setting
into the ``main`` container's args, rendered by the engine's own adapter exactly as ``unillm
launch`` renders them. Whatever KServe cannot express is refused with a typed error, before
anything is written: the mapping is in ``docs/guide/kubernetes.md``.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

from pydantic import SecretStr

from unillm.adapter.base import Adapter
from unillm.adapter.launch_spec import LaunchSpec, Parallel, PDRole, secret_names
from unillm.adapter.registry import get_adapter
from unillm.deploy.crd_schema import INT32_MAX, validate_manifest
from unillm.deploy.settings import Deployment, KubernetesSettings
from unillm.errors import InvalidOptions, UnsupportedFeature
from unillm.redact import secret_flag_values

__all__ = ["API_VERSION", "KIND", "MODEL_DIR", "render_kserve"]

API_VERSION = "serving.kserve.io/v1alpha1"
KIND = "LLMInferenceService"
#: Where KServe puts the model in the engine pod; its template serves this path.
MODEL_DIR = "/mnt/models"
_MODEL_SCHEMES = ("hf", "s3", "pvc", "oci")  # what KServe's storage code accepts for the model
_LORA_SCHEMES = ("hf", "s3", "pvc")  # and for LoRA adapters (no oci://)
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
_DNS_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_NAME_MAX = 63
_FEATURE = "deployment as a KServe LLMInferenceService"
# Pod-local settings of a local launch: where the process binds and which interpreter runs it.
# A pod has its own (KServe serves on port 8000); they are not carried and not refused.
# The environment variable vLLM reads for a secret flag's value, which a Secret can set.
_FLAG_ENV = {"--api-key": "VLLM_API_KEY", "--hf-token": "HF_TOKEN"}
_LOCAL_ONLY = ("host", "port", "python", "ready_timeout")
# A single-profile endpoint-picker config that scores load only (queue depth, KV-cache use).
_LEAST_LOAD = {
    "apiVersion": "inference.networking.x-k8s.io/v1alpha1",
    "kind": "EndpointPickerConfig",
    "plugins": [
        {"type": "single-profile-handler"},
        {"type": "queue-scorer"},
        {"type": "kv-cache-utilization-scorer"},
        {"type": "max-score-picker"},
    ],
    "schedulingProfiles": [
        {
            "name": "default",
            "plugins": [
                {"pluginRef": "queue-scorer", "weight": 2},
                {"pluginRef": "kv-cache-utilization-scorer", "weight": 2},
                {"pluginRef": "max-score-picker"},
            ],
        }
    ],
}


def render_kserve(deployment: Deployment) -> list[dict[str, Any]]:
    """The KServe manifests for a deployment, each validated against its CRD's schema.

    Args:
        deployment: The engine, launch spec, placement, policy and ``[deploy]`` (:func:`read_deployment`).

    Returns:
        The resources to apply, in order (one ``LLMInferenceService``).

    Raises:
        UnsupportedFeature: The engine or a setting has no KServe equivalent (the message names
            the alternative).
        InvalidOptions: A setting KServe cannot express as given (a local model path, a secret
            value, ...), or a manifest its schema refuses.
    """
    if deployment.engine != "vllm":
        raise UnsupportedFeature(
            deployment.engine,
            _FEATURE,
            why="KServe's LLMInferenceService runs vLLM (its templates start `vllm serve`)",
            alternative='Set engine = "vllm", or serve this engine with a KServe InferenceService '
            "and a ServingRuntime of your own",
        )
    adapter = get_adapter(deployment.engine)
    spec, k8s = deployment.spec, deployment.settings.kubernetes
    _refuse_unexpressible(spec)
    on_cpu = spec.cpu
    if on_cpu:
        spec = _cpu_spec(adapter, spec, k8s)
    model_uri = k8s.model_uri or _uri(spec.model, _MODEL_SCHEMES, "[launch] model", "model_uri = '{uri}'")
    _check_uri(model_uri, _MODEL_SCHEMES, "[deploy.kubernetes] model_uri")
    hub = spec.model if _HUB_ID.match(spec.model) else None
    name = _checked_name(k8s.name or _name_from(spec.served_name or hub or model_uri))
    model: dict[str, Any] = {"uri": model_uri, "name": spec.served_name or hub or name}
    lora = _lora(spec, k8s, model["name"])
    if lora:
        model["lora"] = lora
    pd = deployment.disaggregation  # with replicas != 1 refused already, as a local launch does
    if pd is not None and pd.transfer != "nixl":
        raise UnsupportedFeature(
            "vllm",
            f"prefill/decode KV transfer over {pd.transfer} on KServe",
            why="KServe's prefill/decode layout (llm-d) moves the KV cache with NIXL",
            alternative='Set transfer = "nixl" in [launch] disaggregation',
        )
    body: dict[str, Any] = {"model": model}
    role = PDRole(role="decode", transfer=pd.transfer) if pd is not None else None
    body.update(_workload(adapter, spec, k8s, on_cpu, role, lora=bool(lora)))
    body["replicas"] = pd.decode if pd is not None else deployment.replicas
    body["router"] = _router(deployment.policy, k8s, pd is not None)
    if pd is not None:
        prefill_role = PDRole(role="prefill", transfer=pd.transfer)
        prefill = _workload(adapter, spec, k8s, on_cpu, prefill_role, lora=bool(lora))
        body["prefill"] = {"replicas": pd.prefill, **prefill}
    manifest = {"apiVersion": API_VERSION, "kind": KIND, "metadata": _metadata(name, k8s), "spec": body}
    validate_manifest(manifest)
    return [manifest]


def _checked_name(name: str) -> str:
    """``name``, if Kubernetes takes it as a resource name.

    Raises:
        InvalidOptions: It is not a DNS label.
    """
    if not _DNS_LABEL.match(name) or len(name) > _NAME_MAX:
        raise InvalidOptions(
            f"[deploy.kubernetes] name {name!r} is not a DNS label (lowercase letters, digits and '-', "
            f"starting with a letter, at most {_NAME_MAX} characters)"
        )
    return name


def _metadata(name: str, k8s: KubernetesSettings) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name}
    if k8s.namespace:
        metadata["namespace"] = k8s.namespace
    metadata["labels"] = {"app.kubernetes.io/managed-by": "unillm"}
    return metadata


def _refuse_unexpressible(spec: LaunchSpec) -> None:
    """Refuse the launch settings that only make sense for a local process, or that KServe lacks."""
    refused = {
        "in_process": (spec.in_process, "runs the engine inside this Python process; a pod runs its own"),
        "prefix": (bool(spec.prefix), "wraps the local command (docker exec, ...); the pod is the wrapper"),
        "cpus": (
            spec.cpus is not None,
            "pins a local process to cores; a pod's CPUs come from its resources (requests/limits)",
        ),
        "nodes": (
            spec.nodes is not None,
            "spreads one engine over machines by hand; KServe's multi-node layout "
            "(spec.worker, a LeaderWorkerSet) is not rendered by unillm",
        ),
        "pd": (spec.pd is not None, "sets one engine's prefill/decode role; use [launch] disaggregation"),
    }
    for field, (present, why) in refused.items():
        if present:
            raise UnsupportedFeature(
                "vllm",
                f"[launch] {field} in a KServe deployment",
                why=why,
                alternative=f"Remove {field} from [launch] to deploy",
            )


def _cpu_spec(adapter: Adapter, spec: LaunchSpec, k8s: KubernetesSettings) -> LaunchSpec:
    """The spec with the engine's CPU recipe merged in, minus the recipe's local folders."""
    from unillm.launching.cpu import merge_recipe

    if k8s.image is None:
        raise InvalidOptions(
            "cpu = true needs a CPU build of vLLM: KServe's default image is CUDA. Set [deploy.kubernetes] "
            "image = ... (e.g. a vllm-cpu release image, as in KServe's CPU samples)"
        )
    workdir = Path("/unillm-cpu-workdir")  # a marker: env pointing into it is the recipe's local folders
    recipe = adapter.cpu_recipe(spec, workdir)
    if recipe.prepare is not None or recipe.engine_env is not None:
        raise UnsupportedFeature(
            adapter.name,
            "its CPU recipe in a KServe deployment",
            why="the recipe prepares files or an environment on this machine",
            alternative="Set the recipe's settings in [launch] yourself and cpu = false",
        )
    merged = merge_recipe(spec, recipe)
    env = {k: v for k, v in merged.env.items() if not v.startswith(str(workdir))}
    return merged.model_copy(update={"env": env})


def _uri(location: str, schemes: tuple[str, ...], what: str, setting: str) -> str:
    """A cluster URI for a model or adapter location: a hub id becomes ``hf://``; a local path is refused.

    ``setting`` is the TOML that would give the URI, with ``{uri}`` where it goes.
    """
    if "://" in location:
        return location
    if _HUB_ID.match(location) and not Path(location).exists():
        return f"hf://{location}"
    raise InvalidOptions(
        f"{what} {location!r} is a local path, which the cluster cannot read: upload it and give "
        f"its URI as [deploy.kubernetes] {setting.replace('{uri}', schemes[1] + '://bucket/path')} "
        f"({', '.join(s + '://' for s in schemes)}; pvc://CLAIM/path for a PersistentVolumeClaim)"
    )


def _check_uri(uri: str, schemes: tuple[str, ...], what: str) -> None:
    scheme, sep, rest = uri.partition("://")
    if not sep or scheme not in schemes or not rest:
        raise InvalidOptions(
            f"{what} {uri!r}: KServe reads {', '.join(s + '://' for s in schemes)} URIs only"
        )


def _name_from(source: str) -> str:
    """A DNS label from a model id or URI: its last path segment, lowercased, other characters as '-'."""
    last = source.rstrip("/").rsplit("/", 1)[-1].lower()
    label = re.sub(r"[^a-z0-9]+", "-", last).strip("-")
    if not label or not label[0].isalpha():
        label = f"llm-{label}".rstrip("-")
    return label[:_NAME_MAX].rstrip("-")


def _lora(spec: LaunchSpec, k8s: KubernetesSettings, model_name: str) -> dict[str, Any]:
    """``spec.model.lora``: each adapter's name and URI, and the rank/count limits."""
    unknown = sorted(set(k8s.lora_uris) - set(spec.lora))
    if unknown:
        raise InvalidOptions(
            f"[deploy.kubernetes] lora_uris names {unknown}, which [launch] lora does not have "
            f"(it has {sorted(spec.lora)})"
        )
    if not spec.lora:
        return {}
    adapters = []
    for name, path in spec.lora.items():
        if name == model_name:
            raise InvalidOptions(f"LoRA adapter {name!r} has the model's name; KServe needs them distinct")
        where = f"[launch] lora {name!r}"
        uri = k8s.lora_uris.get(name) or _uri(
            path, _LORA_SCHEMES, where, f"lora_uris = {{{name} = '{{uri}}'}}"
        )
        _check_uri(uri, _LORA_SCHEMES, where)
        adapters.append({"name": name, "uri": uri})
    lora: dict[str, Any] = {"adapters": adapters}
    if spec.max_lora_rank is not None:
        lora["maxRank"] = spec.max_lora_rank
    if spec.max_loras is not None:
        lora["maxAdapters"] = spec.max_loras
    return lora


def _parallelism(parallel: Parallel) -> dict[str, Any]:
    """``parallelism``: KServe refuses pipeline and data parallelism together, as its webhook does."""
    if parallel.pipeline > 1 and parallel.data > 1:
        raise UnsupportedFeature(
            "vllm",
            "pipeline and data parallelism together on KServe",
            why="its LLMInferenceService takes one of them per workload",
            alternative="Use tensor with pipeline, or tensor with data",
        )
    out: dict[str, Any] = {}
    if parallel.tensor > 1:
        out["tensor"] = parallel.tensor
    if parallel.pipeline > 1:
        out["pipeline"] = parallel.pipeline
    if parallel.data > 1:
        out["data"] = out["dataLocal"] = parallel.data  # one pod holds every data-parallel rank
    if parallel.expert:
        out["expert"] = True
    return out


def _workload(
    adapter: Adapter,
    spec: LaunchSpec,
    k8s: KubernetesSettings,
    on_cpu: bool,
    role: PDRole | None,
    *,
    lora: bool,
) -> dict[str, Any]:
    """``parallelism`` and the pod ``template`` of one workload (the main one, or prefill)."""
    out: dict[str, Any] = {}
    parallelism = _parallelism(spec.parallel)
    if parallelism:
        out["parallelism"] = parallelism
    args, engine_env = _engine_args(adapter, spec, role, lora=lora)
    container: dict[str, Any] = {"name": "main"}
    if k8s.image:
        container["image"] = k8s.image
    if args:
        container["args"] = args
    env = _env(spec, k8s, engine_env, role)
    if env:
        container["env"] = env
    resources = _resources(spec.parallel, k8s, on_cpu)
    if resources:
        container["resources"] = {"limits": dict(resources), "requests": dict(resources)}
    out["template"] = {"containers": [container]}
    return out


def _engine_args(
    adapter: Adapter, spec: LaunchSpec, role: PDRole | None, *, lora: bool
) -> tuple[list[str], dict[str, str]]:
    """The engine flags KServe's template does not set itself, rendered by the adapter, and its env.

    KServe sets the model path, port, served name, ``--tensor-parallel-size`` and (with adapters)
    the LoRA flags; the rest comes from the adapter as ``unillm launch`` renders it. KServe's
    template passes the args through ``eval``, so each is shell-quoted.
    """
    update: dict[str, Any] = {
        "model": MODEL_DIR,
        "served_name": None,
        "port": None,
        "api_key": None,
        "env": {},
        "pd": role,
        "parallel": spec.parallel.model_copy(update={"tensor": 1}),
    }
    if lora:
        update.update({"lora": {}, "max_lora_rank": None, "max_loras": None})
    if spec.speculative is not None and spec.speculative.draft_model is not None:
        where = "[launch] speculative.draft_model"
        if not _HUB_ID.match(spec.speculative.draft_model) or Path(spec.speculative.draft_model).exists():
            raise InvalidOptions(
                f"{where} {spec.speculative.draft_model!r} is a local path, which the cluster cannot "
                "read: give a hub id (org/name), which vLLM downloads in the pod"
            )
    command = adapter.command(spec.model_copy(update=update))
    argv = command.argv
    start = argv.index("--host") + 2  # python -m <server> --model /mnt/models --host <host>
    for flag, _ in secret_flag_values(argv[start:]):
        variable = _FLAG_ENV.get(flag)
        if variable is None:
            raise InvalidOptions(
                f"[launch] extra_args {flag} holds a secret, and a manifest is readable by anyone who "
                "can read the resource: remove it, and give the engine its secrets from Secrets "
                "through the environment variables it reads ([deploy.kubernetes] secret_env)"
            )
        where = f"[launch] extra_args {flag}"
        raise _secret_refused(
            where, variable, f"{flag} in [launch] extra_args", note=" (the variable vLLM reads)"
        )
    return [shlex.quote(a) for a in argv[start:]], dict(command.env)


def _env(
    spec: LaunchSpec, k8s: KubernetesSettings, engine_env: dict[str, str], role: PDRole | None
) -> list[dict[str, Any]]:
    """The container's env: plain values, Secret references; a secret value itself is refused."""
    hidden = secret_names(spec.env, spec.secret_env)
    if hidden:
        first = sorted(hidden)[0]
        raise _secret_refused(f"[launch] env {first}", first, "the value in [launch] env")
    if isinstance(spec.api_key, SecretStr):
        raise _secret_refused(
            "api_key", "VLLM_API_KEY", "api_key in the config", note=" (the key vLLM checks)"
        )
    both = sorted(set(k8s.secret_env) & (set(spec.env) | set(engine_env)))
    if both:
        raise InvalidOptions(f"env {both} is set both in [launch] env and [deploy.kubernetes] secret_env")
    plain = {**engine_env, **spec.env}
    env: list[dict[str, Any]] = [{"name": k, "value": v} for k, v in sorted(plain.items())]
    env += [
        {"name": k, "valueFrom": {"secretKeyRef": {"name": secret, "key": k}}}
        for k, secret in sorted(k8s.secret_env.items())
    ]
    if role is not None and role.transfer == "nixl":
        # NIXL's side channel listens on the pod's own address (as KServe's P/D samples set it)
        env.append(
            {"name": "VLLM_NIXL_SIDE_CHANNEL_HOST", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}
        )
    return env


def _secret_refused(what: str, variable: str, instead: str, *, note: str = "") -> InvalidOptions:
    """The refusal of a secret value in a manifest, naming the Secret and env variable to use instead."""
    secret = variable.lower().replace("_", "-")
    return InvalidOptions(
        f"{what} holds a secret, and a manifest is readable by anyone who can read the resource: "
        f"put it in a Secret (kubectl create secret generic {secret} --from-literal={variable}=...) "
        f'and name it in [deploy.kubernetes] secret_env = {{{variable} = "{secret}"}}'
        f"{note}, without {instead}"
    )


def _resources(parallel: Parallel, k8s: KubernetesSettings, on_cpu: bool) -> dict[str, str]:
    """Requests (= limits) of the engine container: one GPU per model shard, plus what was asked."""
    if k8s.accelerator in k8s.resources:
        raise InvalidOptions(
            f"[deploy.kubernetes] resources sets {k8s.accelerator}: the GPU count comes from [launch] "
            "parallel (tensor x pipeline x data), so set that instead"
        )
    out = dict(k8s.resources)
    if not on_cpu:
        gpus = parallel.tensor * parallel.pipeline * parallel.data
        if gpus > INT32_MAX:
            raise InvalidOptions(
                f"[launch] parallel: tensor {parallel.tensor} x pipeline {parallel.pipeline} x data "
                f"{parallel.data} = {gpus} GPUs per engine, more than Kubernetes counts (at most {INT32_MAX})"
            )
        out[k8s.accelerator] = str(gpus)
    return out


def _router(policy: str | None, k8s: KubernetesSettings, disaggregated: bool) -> dict[str, Any]:
    """``router``: a managed route on the (default or named) gateway, and the scheduler per policy."""
    gateway: dict[str, Any] = {}
    if k8s.gateway:
        namespace, _, gw_name = k8s.gateway.rpartition("/")
        gateway = {"refs": [{"name": gw_name, **({"namespace": namespace} if namespace else {})}]}
    router: dict[str, Any] = {"route": {}, "gateway": gateway}
    if not k8s.scheduler:
        if disaggregated or policy is not None:
            raise InvalidOptions(
                "[deploy.kubernetes] scheduler = false leaves no router to "
                + ("pair prefill and decode engines" if disaggregated else f"apply policy {policy!r}")
                + ": keep the scheduler (the default)"
            )
        return router
    if policy in (None, "prefix"):
        router["scheduler"] = {}  # KServe's default: prefix-cache affinity weighed against load
    elif policy == "least_load" and not disaggregated:
        router["scheduler"] = {"config": {"inline": _LEAST_LOAD}}
    else:
        why = (
            "KServe's prefill/decode scheduler has its own fixed scoring"
            if disaggregated
            else "KServe's scheduler (the Inference Gateway's endpoint picker) scores endpoints by "
            "load and cached prefixes; it has no round-robin or session picker"
        )
        raise UnsupportedFeature(
            "vllm",
            f"policy {policy!r} on KServe",
            why=why,
            alternative="Leave policy unset or set 'prefix' (the scheduler's default: prefix-cache "
            "affinity weighed against load)" + ("" if disaggregated else ", or 'least_load'"),
        )
    return router
