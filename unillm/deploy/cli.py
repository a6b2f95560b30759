"""``unillm deploy kubernetes``: the config's launch as a KServe LLMInferenceService.

    unillm deploy kubernetes --config unillm.toml                 # print the YAML
    unillm deploy kubernetes --config unillm.toml --out k8s/      # one file per resource
    unillm deploy kubernetes --config unillm.toml --apply         # kubectl apply, print the URL
    unillm deploy kubernetes --config unillm.toml --check         # kubectl apply --dry-run=client

Everything is rendered and validated against the CRD's schema before a file is written or
kubectl is called; a setting KServe cannot express stops it there.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Any

from unillm.config.subcommands import examples_parser
from unillm.deploy.kserve import render_kserve
from unillm.deploy.kubectl import RESOURCE, Kubectl
from unillm.deploy.output import Format, dump_all, write_manifests
from unillm.deploy.settings import read_deployment
from unillm.errors import InvalidOptions


def add_deploy_parser(sub: Any) -> None:
    """Add the ``deploy`` subcommand (``deploy kubernetes``) to the ``unillm`` parser.

    Args:
        sub: The parser's subparsers.
    """
    deploy = sub.add_parser(
        "deploy",
        help="render (and apply) cluster manifests from a unillm config",
        description="Take the same unillm config `unillm.from_config` launches locally to a cluster.",
    )
    targets = deploy.add_subparsers(required=True, metavar="TARGET", help="kubernetes")
    k8s = examples_parser(
        targets,
        "kubernetes",
        __doc__,
        summary="a KServe LLMInferenceService (vLLM), validated against its CRD",
        description="Render the config's engine, model, parallel layout, replicas, LoRA adapters, "
        "speculative decoding, prefill/decode and router policy as a KServe "
        "LLMInferenceService (serving.kserve.io/v1alpha1), validated against the CRD's "
        "schema. Settings KServe cannot express are refused before anything is written.",
    )
    k8s.add_argument("--config", required=True, help="the unillm config (.toml, .yaml, .yml)")
    k8s.add_argument("--out", metavar="DIR", help="write one file per resource here (default: print)")
    k8s.add_argument("--json", action="store_true", help="JSON instead of YAML (needs no PyYAML)")
    k8s.add_argument(
        "--check",
        action="store_true",
        help="also run kubectl apply --dry-run=client on the files (needs kubectl and a context)",
    )
    k8s.add_argument("--apply", action="store_true", help="kubectl apply the files, then print the URL")
    k8s.add_argument(
        "--wait",
        type=float,
        default=0,
        metavar="SECONDS",
        help="with --apply: wait up to SECONDS for the resource to be Ready before reading its URL",
    )
    k8s.set_defaults(run=run_kubernetes)


def run_kubernetes(args: argparse.Namespace) -> int:
    """Render, write or print, and with ``--check``/``--apply`` hand the files to kubectl.

    Args:
        args: The parsed ``deploy kubernetes`` arguments.

    Returns:
        The exit code (0).
    """
    fmt: Format = "json" if args.json else "yaml"
    if args.wait and not args.apply:
        raise InvalidOptions("--wait SECONDS waits for an applied resource: use it with --apply")
    manifests = render_kserve(read_deployment(args.config))
    text = dump_all(manifests, fmt)  # rendered (and PyYAML found) before any file or kubectl call
    use_kubectl = args.apply or args.check
    if not args.out and not use_kubectl:
        print(text, end="")
        return 0
    with tempfile.TemporaryDirectory(prefix="unillm-deploy-") as scratch:
        files = write_manifests(manifests, Path(args.out or scratch), fmt)
        if args.out:
            for f in files:
                print(f"wrote {f}", file=sys.stderr)
        if not use_kubectl:
            return 0
        kubectl = Kubectl.find()
        kubectl.require_context()
        print(kubectl.dry_run(files), end="", file=sys.stderr)
        if not args.apply:
            return 0
        print(kubectl.apply(files), end="", file=sys.stderr)
    for manifest in manifests:
        _print_url(kubectl, manifest, args.wait)
    return 0


def _print_url(kubectl: Kubectl, manifest: dict[str, Any], wait: float) -> None:
    name = manifest["metadata"]["name"]
    namespace = manifest["metadata"].get("namespace")
    model = manifest["spec"]["model"]["name"]
    if wait > 0:
        print(kubectl.wait_ready(name, namespace, wait), end="", file=sys.stderr)
    url = kubectl.url(name, namespace)
    if url is None:
        where = f" -n {namespace}" if namespace else ""
        print(
            f"{name}: no URL yet (KServe sets status.url once the route is ready). Read it with\n"
            f"  kubectl get {RESOURCE} {name}{where} -o jsonpath='{{.status.url}}'\n"
            f'then connect: unillm.connect("vllm", URL, model="{model}")'
        )
        return
    print(url)
    print(f'connect: unillm.connect("vllm", "{url}", model="{model}")', file=sys.stderr)
