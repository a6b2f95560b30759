"""Manifests as text (YAML, or JSON: kubectl reads both) and as files, all written or none.

text = dump_all(manifests, "yaml")
paths = write_manifests(manifests, Path("k8s"), "yaml")   # one file per resource
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from unillm.errors import InvalidOptions

__all__ = ["Format", "dump", "dump_all", "file_name", "write_manifests"]

Format = Literal["yaml", "json"]


def dump(manifest: dict[str, Any], fmt: Format) -> str:
    """One manifest as YAML or JSON text.

    Args:
        manifest: The resource.
        fmt: "yaml" (needs PyYAML: ``unillm-sdk[deploy]``) or "json".

    Returns:
        The text, ending in a newline.

    Raises:
        InvalidOptions: YAML was asked for and PyYAML is not installed.
    """
    if fmt == "json":
        return json.dumps(manifest, indent=2) + "\n"
    try:
        import yaml
    except ImportError:
        raise InvalidOptions(
            "YAML output needs PyYAML: pip install 'unillm-sdk[deploy]' "
            "(or pass --json: kubectl reads JSON too)"
        ) from None
    text: str = yaml.safe_dump(manifest, sort_keys=False, default_flow_style=False)
    return text


def dump_all(manifests: Sequence[dict[str, Any]], fmt: Format) -> str:
    """Several manifests as one text: YAML documents separated by ``---``, or a JSON ``List``.

    Args:
        manifests: The resources.
        fmt: "yaml" or "json".

    Returns:
        The text.
    """
    if fmt == "json" and len(manifests) > 1:
        return dump({"apiVersion": "v1", "kind": "List", "items": list(manifests)}, "json")
    return "---\n".join(dump(m, fmt) for m in manifests)


def file_name(manifest: dict[str, Any], fmt: Format) -> str:
    """The file a manifest is written to: ``<name>.<kind>.<yaml|json>``, lowercased.

    Args:
        manifest: The resource.
        fmt: "yaml" or "json".

    Returns:
        The file name.
    """
    return f"{manifest['metadata']['name']}.{manifest['kind'].lower()}.{fmt}"


def write_manifests(manifests: Sequence[dict[str, Any]], folder: Path, fmt: Format) -> list[Path]:
    """Write one file per manifest into ``folder`` (created), each complete or not at all.

    Every text is rendered first, then written to a temporary file beside its target and renamed
    over it, so an error leaves no half-written file.

    Args:
        manifests: The resources.
        folder: Where the files go.
        fmt: "yaml" or "json".

    Returns:
        The files written, in order.

    Raises:
        InvalidOptions: The folder cannot be created or written.
    """
    texts = [(folder / file_name(m, fmt), dump(m, fmt)) for m in manifests]
    staged: list[tuple[str, Path]] = []
    try:
        folder.mkdir(parents=True, exist_ok=True)
        for target, text in texts:
            fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{target.name}.", suffix=".tmp")
            staged.append((tmp, target))
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(text)
        for tmp, target in staged:
            os.replace(tmp, target)
    except OSError as e:
        for tmp, _ in staged:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        raise InvalidOptions(f"cannot write the manifests into {folder}: {e.strerror or e}") from None
    return [target for target, _ in texts]
