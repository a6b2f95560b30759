"""From one machine to a cluster with the same config: cluster manifests rendered from ``unillm.toml``.

    deployment = unillm.deploy.read_deployment("unillm.toml")   # engine, [launch], policy, [deploy]
    manifests = unillm.deploy.render_kserve(deployment)          # KServe LLMInferenceService
    $ unillm deploy kubernetes --config unillm.toml --out k8s/ [--apply]

Rendering is pure and validated against the CRD's own schema (kept in ``schemas/``, see its
README); what the target cannot express is refused with a typed error, never dropped. Files and
``kubectl`` are the only I/O, in :mod:`unillm.deploy.output` and :mod:`unillm.deploy.kubectl`.
"""

from __future__ import annotations

from unillm.deploy.crd_schema import validate_manifest
from unillm.deploy.kserve import render_kserve
from unillm.deploy.kubectl import Kubectl, KubectlError
from unillm.deploy.output import dump_all, write_manifests
from unillm.deploy.settings import Deployment, DeploySettings, KubernetesSettings, read_deployment

__all__ = [
    "DeploySettings",
    "Deployment",
    "Kubectl",
    "KubectlError",
    "KubernetesSettings",
    "dump_all",
    "read_deployment",
    "render_kserve",
    "validate_manifest",
    "write_manifests",
]
