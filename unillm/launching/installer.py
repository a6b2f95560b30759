"""Installing packages into an engine's venv: uv where it can stand in for pip, else pip.

uv installs an engine's env in seconds where pip takes many minutes (vLLM's CPU build on a
2-core machine: about 20 s against about 18 min). uv reads none of pip's configuration, so the pip
settings that decide *what* is installed (indexes, find-links, constraints, ...) are translated
into uv's flags. When pip is configured with something this module cannot translate, when the
caller passes pip arguments, or when uv is not installed, pip does the install: nothing a user
configured is dropped. ``UNILLM_INSTALLER=pip`` forces pip.

    >>> uv_flags({"global.find-links": "/opt/wheels", "global.timeout": "60"})[-2:]
    ['--find-links', '/opt/wheels']
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

PYPI = "https://pypi.org/simple"
_TRUE = ("1", "true", "yes", "on")
#: pip's configuration sections that apply to ``pip install``, highest precedence first.
_SECTIONS = (":env:", "install", "global")
#: pip settings that change what is installed, and uv's flag for each value (mostly pip's own name).
_LISTS = {name: f"--{name}" for name in ("index-url", "extra-index-url", "find-links", "constraint")}
_LISTS["trusted-host"] = "--allow-insecure-host"
_SWITCHES = {"no-index": "--no-index", "pre": "--prerelease=allow"}
#: pip settings that change only how pip talks or prints; ``cert`` and ``timeout`` go to uv's env.
_HARMLESS = {
    "cert",
    "timeout",
    "default-timeout",
    "retries",
    "disable-pip-version-check",
    "no-cache-dir",
    "cache-dir",
    "progress-bar",
    "quiet",
    "verbose",
    "no-input",
    "root-user-action",
    "no-warn-script-location",
    "require-virtualenv",
    "log",
    "no-color",
}


def settings(entries: Mapping[str, str]) -> dict[str, str]:
    """pip's effective install settings from ``pip config list`` entries (pure).

    Args:
        entries: ``section.key`` to value, e.g. ``{"global.find-links": "/opt/wheels"}``.

    Returns:
        Each key's value from the section pip reads first (environment, then install, then global).
    """
    found: dict[str, str] = {}
    for section in reversed(_SECTIONS):  # lower precedence first, overwritten by higher
        prefix = section + "."
        for name, value in entries.items():
            if name.startswith(prefix):
                found[name[len(prefix) :].replace("_", "-")] = value
    return found


def uv_flags(entries: Mapping[str, str]) -> list[str] | None:
    """uv's flags for pip's configuration, or None if a setting has no translation (pure).

    pip looks at every index alike, so uv is told to as well (``unsafe-best-match``).

    Args:
        entries: ``pip config list`` entries, ``section.key`` to value.

    Returns:
        The flags for ``uv pip install``; None when pip must do the install.
    """
    found = settings(entries)
    flags = ["--index-strategy", "unsafe-best-match"]
    if found.get("no-index", "").lower() not in _TRUE:
        # Of one version on several indexes uv takes the first index's files, pip the best wheel of
        # all: the main index first gives uv its full set (a mirror may keep only a pure wheel).
        main = found.pop("index-url", PYPI)
        flags += ["--index-url", main, "--extra-index-url", main]
    for key, value in found.items():
        if key in _LISTS:
            flags += [part for item in value.split() for part in (_LISTS[key], item)]
        elif key in _SWITCHES:
            if value.lower() in _TRUE:
                flags.append(_SWITCHES[key])
        elif key not in _HARMLESS:
            return None
    return flags


def uv_env(entries: Mapping[str, str]) -> dict[str, str]:
    """Environment for uv carrying pip's certificate bundle and timeout (pure).

    Args:
        entries: ``pip config list`` entries.

    Returns:
        Variables to add to uv's environment.
    """
    found = settings(entries)
    env = {}
    if "cert" in found:
        env["SSL_CERT_FILE"] = found["cert"]
    timeout = found.get("timeout") or found.get("default-timeout")
    if timeout:
        env["UV_HTTP_TIMEOUT"] = timeout
    return env


def parse_config_list(text: str) -> dict[str, str]:
    """``pip config list`` output (``global.find-links='/opt/wheels'``) as a mapping (pure).

    Args:
        text: What ``pip config list`` printed.

    Returns:
        ``section.key`` to value.

    Raises:
        ValueError: A value with an unclosed quote.
    """
    entries = {}
    for line in text.splitlines():
        name, sep, value = line.partition("=")
        if sep:
            words = shlex.split(value)
            entries[name.strip()] = " ".join(words)
    return entries


def find_uv() -> str | None:
    """uv's executable: the ``uv`` package's, else one on PATH, else None."""
    try:
        from uv import find_uv_bin
    except ImportError:
        return shutil.which("uv")
    try:
        return find_uv_bin()
    except FileNotFoundError:
        return shutil.which("uv")


class Installer:
    """``pip install`` / ``pip uninstall`` into one venv, by uv when it can stand in for pip.

    Args:
        python: The venv's interpreter (it has pip).
        pip_args: Extra pip arguments; any make pip do the install.
        run: Runs one command, raising on failure (the caller's error type).
        log: Where a progress line goes.
    """

    def __init__(
        self,
        python: Path,
        pip_args: Sequence[str],
        run: Callable[[list[str], Mapping[str, str]], None],
        log: Callable[[str], None] = print,
    ) -> None:
        self.python = python
        self.pip_args = list(pip_args)
        self._run = run
        self._log = log
        self._uv: tuple[str, list[str], dict[str, str]] | None = self._plan_uv()

    def _plan_uv(self) -> tuple[str, list[str], dict[str, str]] | None:
        uv = find_uv()
        if uv is None or self.pip_args or os.environ.get("UNILLM_INSTALLER") == "pip":
            return None
        listed = subprocess.run(
            [str(self.python), "-m", "pip", "config", "list"], capture_output=True, text=True, check=False
        )
        try:
            entries = parse_config_list(listed.stdout) if listed.returncode == 0 else None
        except ValueError:  # a value shlex cannot split (an unclosed quote): pip reads its own
            entries = None
        flags = None if entries is None else uv_flags(entries)
        if entries is None or flags is None:
            self._log("[unillm] pip's configuration has settings uv cannot take: installing with pip")
            return None
        return uv, flags, {**os.environ, **uv_env(entries)}

    @property
    def uses_uv(self) -> bool:
        """True when uv does the installs."""
        return self._uv is not None

    def install(self, requirements: Sequence[str], *extra: str) -> None:
        """Install ``requirements``; if uv fails, pip tries once more.

        Args:
            requirements: What to install (``name`` or ``name==version``).
            extra: Flags both tools take, such as ``--no-deps`` or ``-c FILE``.
        """
        if self._uv is not None:
            uv, flags, env = self._uv
            try:
                self._run(
                    [
                        uv,
                        "pip",
                        "install",
                        "--quiet",
                        "--python",
                        str(self.python),
                        *flags,
                        *extra,
                        *requirements,
                    ],
                    env,
                )
                return
            except Exception:  # the caller's own error type: pip may still manage
                self._log(f"[unillm] uv could not install {' '.join(requirements)}: trying pip")
        self._run(
            [str(self.python), "-m", "pip", "install", "--quiet", *self.pip_args, *extra, *requirements],
            os.environ,
        )

    def uninstall(self, names: Sequence[str]) -> None:
        """Remove ``names`` from the venv.

        Args:
            names: Distribution names.
        """
        if self._uv is not None:
            uv, _, env = self._uv
            self._run([uv, "pip", "uninstall", "--quiet", "--python", str(self.python), *names], env)
            return
        self._run([str(self.python), "-m", "pip", "uninstall", "--yes", "--quiet", *names], os.environ)
