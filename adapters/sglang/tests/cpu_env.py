"""Build (once, cached) the CPU-only SGLang environment the test suite launches.

    python adapters/sglang/tests/cpu_env.py      # prints the interpreter path when ready

This is TEST INFRASTRUCTURE, never the product: ``unillm setup sglang`` installs the real
thing on GPU machines. SGLang 0.5.23 on PyPI pulls CUDA-only kernels, so here the env is put
together by hand, in four steps (verified on a 2-core x86-64 machine without a GPU):

1. a venv with CPU torch 2.13.0 (the wheel this machine keeps; elsewhere PyTorch's CPU index);
2. ``sglang==0.5.23 --no-deps`` plus its non-CUDA dependencies, pinned by
   ``sglang_cpu_constraints.txt`` (frozen from a verified build);
3. ``torchvision --no-deps`` (only imported by SGLang's configs); its PyPI wheel is CUDA-linked, so
   its C++ ops never load against CPU torch and its two op-registration modules crash at import:
   they are replaced by empty modules (the ops stay unavailable; text models never call them);
4. a stub ``sgl_kernel`` package: SGLang imports a few CPU kernels from it at module level
   (``copy_all_layer_kv_cache_cpu``, ...), but the CPU build of sgl-kernel is not on PyPI. Every
   name imports; calling one raises NotImplementedError. With ``--attention-backend
   torch_native --sampling-backend pytorch`` none is called for a dense Llama.

Idempotent: a marker file records the recipe; a changed recipe rebuilds the env.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from unillm.launching.installer import Installer

HERE = Path(__file__).resolve().parent
CONSTRAINTS = HERE / "sglang_cpu_constraints.txt"
SGLANG = "sglang==0.5.23"
TORCH = "torch==2.13.0+cpu"
TORCHVISION = "torchvision==0.28.0"
PYTHON = "3.11"
# SGLang 0.5.23's install requirements minus CUDA kernels/toolkits, audio/video and bench-only
# packages, plus three undeclared imports (IPython, dill, soundfile are imported at startup).
DEPS = (
    "aiohttp",
    "blobfile",
    "compressed-tensors",
    "distro",
    "easydict",
    "einops",
    "fastapi",
    "gguf",
    "interegular",
    "llguidance",
    "msgspec",
    "numpy",
    "openai",
    "openai-harmony",
    "orjson",
    "outlines",
    "packaging",
    "partial_json_parser",
    "pillow",
    "prometheus-client",
    "psutil",
    "pybase64",
    "pydantic",
    "python-dateutil",
    "python-multipart",
    "pyzmq",
    "regex",
    "requests",
    "scipy",
    "sentencepiece",
    "setproctitle",
    "tiktoken",
    "tokenizers",
    "transformers",
    "uvicorn",
    "uvloop",
    "watchfiles",
    "xgrammar",
    "xxhash",
    "zstandard",
    "tqdm",
    "IPython",
    "dill",
    "soundfile",
)
SGL_KERNEL_STUB = '''"""Stub of sgl_kernel for unillm's CPU test env (adapters/sglang/tests/cpu_env.py).

Names import so SGLang's modules load; calling any of them raises NotImplementedError.
"""


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)

    def missing(*args, **kwargs):
        raise NotImplementedError(f"sgl_kernel.{name} is a stub in this CPU test env")

    missing.__name__ = name
    return missing
'''
TORCHVISION_DISABLED = ("_meta_registrations.py", "_autograd_registrations.py")
TORCHVISION_NOTE = "# unillm CPU test env: torchvision's C++ ops do not load with CPU torch; disabled.\n"
MARKER = "unillm-sglang-cpu.json"


def env_dir() -> Path:
    """Where the env lives: ``$UNILLM_CACHE/envs/sglang-cpu`` (default ~/.cache/unillm)."""
    root = Path(os.environ.get("UNILLM_CACHE") or Path.home() / ".cache" / "unillm")
    return root / "envs" / "sglang-cpu"


def python_path() -> Path:
    """The interpreter of the env (it exists once :func:`ensure_env` has returned)."""
    return env_dir() / "bin" / "python"


def recipe() -> str:
    """A fingerprint of everything that goes into the env."""
    parts = [
        SGLANG,
        TORCH,
        TORCHVISION,
        PYTHON,
        *DEPS,
        SGL_KERNEL_STUB,
        TORCHVISION_NOTE,
        CONSTRAINTS.read_text(),
    ]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def is_ready() -> bool:
    """True when the env is built with the current recipe."""
    marker = env_dir() / MARKER
    return marker.is_file() and json.loads(marker.read_text()).get("recipe") == recipe()


def ensure_env(log: Callable[[str], None] = print) -> Path:
    """Build the env unless it is already there; return its interpreter. Takes 1-3 min once."""
    if is_ready():
        return python_path()
    venv = env_dir()
    venv.parent.mkdir(parents=True, exist_ok=True)
    with (venv.parent / "sglang-cpu.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another test session may be building it right now
        if is_ready():
            return python_path()
        _build(venv, log)
    return python_path()


def _build(venv: Path, say: Callable[[str], None]) -> None:
    started = time.monotonic()
    if venv.exists():
        shutil.rmtree(venv)
    base = shutil.which(f"python{PYTHON}") or sys.executable
    say(f"[sglang-cpu] building {venv} (once, 1-3 min): CPU torch + sglang --no-deps + deps")
    _run([base, "-m", "venv", str(venv)], "create the venv", say, started)
    pins = venv / "constraints.txt"
    pins.write_text(CONSTRAINTS.read_text() + f"\n{TORCH}\n")

    def install(what: str, *argv: str) -> None:
        def run(command: list[str], env: Mapping[str, str]) -> None:
            _run(command, what, say, started, env)

        Installer(python_path(), (), run, say).install(argv)

    install(f"install {TORCH}", TORCH)
    install(f"install {SGLANG} and {TORCHVISION} (--no-deps)", "--no-deps", SGLANG, TORCHVISION)
    install(f"install {len(DEPS)} non-CUDA dependencies", "-c", str(pins), *DEPS)
    site = _site_packages()
    for name in TORCHVISION_DISABLED:
        (site / "torchvision" / name).write_text(TORCHVISION_NOTE)
    (site / "sgl_kernel").mkdir(exist_ok=True)
    (site / "sgl_kernel" / "__init__.py").write_text(SGL_KERNEL_STUB)
    _run(
        [str(python_path()), "-c", "import sglang.srt.entrypoints.openai.protocol"],
        "check that SGLang imports",
        say,
        started,
    )
    (venv / MARKER).write_text(
        json.dumps({"recipe": recipe(), "sglang": SGLANG, "build_s": round(time.monotonic() - started, 1)})
    )
    say(f"[sglang-cpu] ready in {time.monotonic() - started:.0f}s: {python_path()}")


def _site_packages() -> Path:
    code = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    out = subprocess.run([str(python_path()), "-c", code], capture_output=True, text=True, check=True)
    return Path(out.stdout.strip())


def _run(
    argv: list[str],
    what: str,
    say: Callable[[str], None],
    started: float,
    env: Mapping[str, str] = os.environ,
) -> None:
    say(f"[sglang-cpu] {time.monotonic() - started:5.0f}s {what}")
    env = {**env, "SGLANG_USE_CPU_ENGINE": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    done = subprocess.run(argv, capture_output=True, text=True, check=False, env=env)
    if done.returncode != 0:
        lines = [ln for ln in (done.stdout + done.stderr).splitlines() if "is ignored" not in ln]
        tail = "\n".join(lines[-40:])
        raise RuntimeError(f"[sglang-cpu] failed to {what}: {' '.join(argv)}\n{tail}")


def launch_settings(model: str | Path, workdir: Path, **overrides: Any) -> dict[str, Any]:
    """``unillm.launch("sglang", **launch_settings(tiny.path, workdir))`` on this CPU machine.

    SGLang's CPU recipe (``unillm.cpu_settings``) run from this env, built first if needed,
    serving the model as "tiny". ``overrides`` (LaunchSpec fields) win.
    """
    import unillm

    return unillm.cpu_settings(
        "sglang",
        model,
        workdir=workdir,
        **{"served_name": "tiny", "python": str(ensure_env()), "max_model_len": 1024, **overrides},
    )


if __name__ == "__main__":
    print(ensure_env())
