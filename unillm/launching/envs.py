"""Engines in their own virtual environments, installed and found by unillm.

Engines pin heavy, conflicting dependencies (torch builds, kernels), so each one gets its own
venv under ``$UNILLM_CACHE/envs/<engine>`` (default ``~/.cache/unillm``)::

    $ unillm setup vllm            # once; picks the CPU or GPU build
    >>> unillm.launch("vllm", model=...)   # then finds that interpreter by itself

Routers (``unillm setup vllm-router``, ``unillm setup smg``) get their own venv the same way.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from unillm.adapter.base import EngineInstall
from unillm.adapter.registry import get_adapter
from unillm.errors import LaunchError
from unillm.launching.installer import Installer

_MARKER = "unillm-install.json"


def cache_root() -> Path:
    """Where unillm keeps engine envs, test models and logs."""
    return Path(os.environ.get("UNILLM_CACHE") or Path.home() / ".cache" / "unillm")


def env_dir(engine: str) -> Path:
    """The managed venv folder of ``engine``."""
    return cache_root() / "envs" / engine


def _python_in(venv: Path) -> Path:
    return venv / "bin" / "python"


def managed_python(engine: str) -> Path | None:
    """The interpreter of the engine's managed env, if ``unillm setup`` completed there."""
    venv = env_dir(engine)
    return _python_in(venv) if (venv / _MARKER).is_file() else None


def has_gpu() -> bool:
    """True when an NVIDIA driver is visible."""
    return shutil.which("nvidia-smi") is not None


def setup_engine(
    engine: str,
    *,
    gpu: bool | None = None,
    pip_args: Sequence[str] = (),
    log: Callable[[str], None] = print,
) -> Path:
    """Install ``engine`` (or a router: "vllm-router", "smg") into its managed venv (idempotent).

    Returns the venv's interpreter.
    """
    plan = install_plan(engine, gpu=has_gpu() if gpu is None else gpu)
    venv = env_dir(engine)
    wanted = json.dumps(
        {"packages": plan.packages, "remove": plan.remove_after, "pip_args": list(pip_args)}, sort_keys=True
    )
    marker = venv / _MARKER
    if marker.is_file() and marker.read_text() == wanted:
        log(f"[unillm] {engine} is already set up in {venv}")
        add_missing(_python_in(venv), plan.add_ons, pip_args, log)
        return _python_in(venv)
    if venv.exists():
        shutil.rmtree(venv)
    base = _base_python(plan)
    log(f"[unillm] creating {venv} with {base}")
    _run([base, "-m", "venv", str(venv)])
    py = str(_python_in(venv))
    installer = Installer(Path(py), pip_args, _run, log)
    log(
        f"[unillm] installing {' '.join(plan.packages)} with {'uv' if installer.uses_uv else 'pip'} "
        "(a minute or two; a package built from source, such as llama-cpp-python, takes longer)"
    )
    installer.install(plan.packages)
    if plan.remove_after:
        installer.uninstall(plan.remove_after)
    add_missing(Path(py), plan.add_ons, pip_args, log)
    marker.write_text(wanted)
    log(f"[unillm] {engine} is ready: {py}")
    return Path(py)


# Run by the env's interpreter: the requirements (``name`` or ``name==version``) it lacks.
_MISSING = """
import sys
from importlib.metadata import PackageNotFoundError, version
for wanted in sys.argv[1:]:
    name, _, pin = wanted.partition("==")
    try:
        found = version(name)
    except PackageNotFoundError:
        found = None
    if found is None or (pin and found != pin):
        print(wanted)
"""


def add_missing(
    python: Path, add_ons: Sequence[str], pip_args: Sequence[str] = (), log: Callable[[str], None] = print
) -> list[str]:
    """Install the ``add_ons`` an env's interpreter lacks (or has in another version); idempotent.

    Args:
        python: The env's interpreter.
        add_ons: Requirements, ``name`` or ``name==version``.
        pip_args: Extra pip arguments (an index, ...).
        log: Where progress lines go.

    Returns:
        The requirements that were installed (empty when all were there).
    """
    if not add_ons:
        return []
    done = subprocess.run(
        [str(python), "-c", _MISSING, *add_ons], capture_output=True, text=True, check=False
    )
    missing = done.stdout.split() if done.returncode == 0 else list(add_ons)
    if missing:
        log(f"[unillm] adding {' '.join(missing)} to {python.parent.parent}")
        Installer(python, pip_args, _run, log).install(missing)
    return missing


def install_plan(name: str, *, gpu: bool) -> EngineInstall:
    """What ``unillm setup name`` installs: a router's package, or the engine adapter's plan."""
    from unillm.launching.routers import ROUTERS

    router = ROUTERS.get(name.lower())
    return router.install() if router is not None else get_adapter(name).install(gpu=gpu)


def _base_python(plan: EngineInstall) -> str:
    if plan.python is None:
        return sys.executable
    found = shutil.which(f"python{plan.python}")
    if found is None:
        raise LaunchError(
            f"python{plan.python} is needed to install this engine but is not on PATH",
            command="(setup)",
            log_tail=[],
        )
    return found


def _run(argv: list[str], env: Mapping[str, str] | None = None) -> None:
    done = subprocess.run(argv, capture_output=True, text=True, check=False, env=env)
    if done.returncode != 0:
        lines = [ln for ln in (done.stdout + done.stderr).splitlines() if "is ignored" not in ln]
        raise LaunchError("engine setup failed", command=" ".join(argv), log_tail=lines[-50:])
