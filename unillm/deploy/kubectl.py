"""The few ``kubectl`` calls a deployment makes: check, apply, wait, read the URL (the only cluster I/O).

kubectl = Kubectl.find()                 # KubectlError when it is not on PATH
kubectl.dry_run(files); kubectl.apply(files)
url = kubectl.url("qwen", "llm")         # status.url, or None while KServe has none yet
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from unillm.errors import UnillmError, clip_message

__all__ = ["RESOURCE", "Kubectl", "KubectlError"]

#: The resource type as kubectl names it (group-qualified, so no other CRD's short name matches).
RESOURCE = "llminferenceservice.serving.kserve.io"
_TIMEOUT = 120.0


class KubectlError(UnillmError):
    """kubectl is missing, has no cluster to talk to, or refused a command."""


@dataclass(frozen=True)
class Kubectl:
    """A ``kubectl`` binary and the calls made through it.

    Args:
        path: The kubectl executable.
    """

    path: str

    @classmethod
    def find(cls) -> Kubectl:
        """The ``kubectl`` on ``PATH``.

        Returns:
            It, ready to call.

        Raises:
            KubectlError: There is none.
        """
        found = shutil.which("kubectl")
        if found is None:
            raise KubectlError(
                "kubectl is not on PATH: install it (https://kubernetes.io/docs/tasks/tools/) and "
                "point it at the cluster, or apply the files written by --out yourself"
            )
        return cls(found)

    def has_context(self) -> bool:
        """Whether kubectl has a current cluster context (``kubectl config current-context``)."""
        try:
            return bool(self._run(["config", "current-context"]).strip())
        except KubectlError:
            return False

    def require_context(self) -> None:
        """Refuse to go on without a cluster context.

        Raises:
            KubectlError: kubectl has no current context.
        """
        if not self.has_context():
            raise KubectlError(
                "kubectl has no current context (kubectl config current-context fails): point it at "
                "the cluster (kubectl config use-context NAME) and rerun"
            )

    def dry_run(self, files: Sequence[Path]) -> str:
        """Check the files the way ``kubectl apply`` reads them, creating nothing.

        Args:
            files: The manifest files.

        Returns:
            kubectl's report (one line per resource).

        Raises:
            KubectlError: kubectl refused a file.
        """
        return self._run(["apply", "--dry-run=client", "--validate=false", *_file_args(files)])

    def apply(self, files: Sequence[Path]) -> str:
        """Create or update the resources in the cluster.

        Args:
            files: The manifest files.

        Returns:
            kubectl's report (one line per resource).

        Raises:
            KubectlError: kubectl or the cluster refused a file.
        """
        return self._run(["apply", *_file_args(files)])

    def wait_ready(self, name: str, namespace: str | None, seconds: float) -> str:
        """Wait until the resource reports ``Ready``.

        Args:
            name: The LLMInferenceService's name.
            namespace: Its namespace; None: kubectl's current one.
            seconds: The longest wait.

        Returns:
            kubectl's report.

        Raises:
            KubectlError: It was not ready in time, or kubectl failed.
        """
        args = ["wait", "--for=condition=Ready", f"{RESOURCE}/{name}", f"--timeout={int(seconds)}s"]
        return self._run([*args, *_namespace(namespace)], timeout=seconds + 30)

    def url(self, name: str, namespace: str | None) -> str | None:
        """The resource's ``status.url`` (where clients connect); None while KServe has none.

        Args:
            name: The LLMInferenceService's name.
            namespace: Its namespace; None: kubectl's current one.

        Returns:
            The URL, or None.

        Raises:
            KubectlError: kubectl failed (e.g. no such resource).
        """
        out = self._run(["get", RESOURCE, name, *_namespace(namespace), "-o", "jsonpath={.status.url}"])
        url = out.strip()
        if url and (not url.startswith(("http://", "https://")) or any(c.isspace() for c in url)):
            raise KubectlError(f"{RESOURCE}/{name} reports a status.url that is no URL: {clip_message(url)}")
        return url or None

    def _run(self, args: list[str], timeout: float = _TIMEOUT) -> str:
        argv = [self.path, *args]
        try:
            done = subprocess.run(
                argv, capture_output=True, encoding="utf-8", errors="replace", timeout=timeout, check=False
            )
        except subprocess.TimeoutExpired:
            raise KubectlError(f"kubectl {' '.join(args)} did not finish in {timeout:.0f} s") from None
        except OSError as e:
            raise KubectlError(f"cannot run {self.path}: {e.strerror}") from None
        if done.returncode != 0:
            said = clip_message((done.stderr or done.stdout).strip())
            raise KubectlError(f"kubectl {' '.join(args)} failed (exit {done.returncode}): {said}")
        return done.stdout


def _file_args(files: Sequence[Path]) -> list[str]:
    return [arg for f in files for arg in ("-f", str(f))]


def _namespace(namespace: str | None) -> list[str]:
    return ["-n", namespace] if namespace else []
