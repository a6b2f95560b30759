"""Engine envs installed by uv with pip's settings carried over, or by pip when they cannot be."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path

import pytest

from unillm.launching import installer
from unillm.launching.installer import Installer, parse_config_list, settings, uv_env, uv_flags

# What `pip config list` printed on a machine with a local wheel folder and a torch cap.
LISTED = """\
:env:.find-links='/opt/wheels'
:env:.default-timeout='180'
global.cert='/etc/ssl/certs/ca-certificates.crt'
global.constraint='/etc/xdg/pip/constraints.txt'
global.extra-index-url='file:///opt/pypi/simple file:///opt/pypi-more/simple'
global.find-links='/elsewhere'
"""


def test_pip_config_list_is_read_with_the_environment_over_the_files() -> None:
    found = settings(parse_config_list(LISTED))
    assert found["find-links"] == "/opt/wheels"  # PIP_FIND_LINKS wins over global.find-links
    assert found["extra-index-url"] == "file:///opt/pypi/simple file:///opt/pypi-more/simple"


def test_every_setting_that_picks_packages_becomes_a_uv_flag() -> None:
    assert uv_flags(parse_config_list(LISTED)) == [
        "--index-strategy",
        "unsafe-best-match",
        "--index-url",
        "https://pypi.org/simple",
        "--extra-index-url",
        "https://pypi.org/simple",
        "--constraint",
        "/etc/xdg/pip/constraints.txt",
        "--extra-index-url",
        "file:///opt/pypi/simple",
        "--extra-index-url",
        "file:///opt/pypi-more/simple",
        "--find-links",
        "/opt/wheels",
    ]
    assert uv_env(parse_config_list(LISTED)) == {
        "SSL_CERT_FILE": "/etc/ssl/certs/ca-certificates.crt",
        "UV_HTTP_TIMEOUT": "180",
    }


def test_an_install_section_setting_overrides_global_and_switches_translate() -> None:
    entries = {
        "global.index-url": "https://a/simple",
        "install.index-url": "https://b/simple",
        "global.pre": "true",
    }
    assert uv_flags(entries) == [
        "--index-strategy",
        "unsafe-best-match",
        "--index-url",
        "https://b/simple",
        "--extra-index-url",
        "https://b/simple",
        "--prerelease=allow",
    ]
    assert uv_flags({"global.no-index": "yes"}) == ["--index-strategy", "unsafe-best-match", "--no-index"]


@pytest.mark.parametrize("setting", ["global.client-cert", "install.user", "global.no-binary", "install.src"])
def test_a_setting_uv_cannot_take_leaves_the_install_to_pip(setting: str) -> None:
    assert uv_flags({"global.find-links": "/w", setting: "x"}) is None


def _commands(monkeypatch: pytest.MonkeyPatch, *, fail_uv: bool = False, **kwargs: object) -> list[list[str]]:
    calls: list[list[str]] = []

    def run(argv: list[str], env: Mapping[str, str]) -> None:
        calls.append(argv)
        if fail_uv and argv[:3] == ["/bin/uv", "pip", "install"]:
            raise RuntimeError("no solution")

    monkeypatch.setattr(installer, "find_uv", lambda: "/bin/uv")
    monkeypatch.delenv("UNILLM_INSTALLER", raising=False)
    kwargs.setdefault("pip_args", ())
    tool = Installer(Path(sys.executable), run=run, log=lambda _: None, **kwargs)  # type: ignore[arg-type]
    tool.install(["engine==1"], "--no-deps")
    tool.uninstall(["triton"])
    return calls


def test_uv_installs_when_pip_is_configured_with_what_it_can_take(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _commands(monkeypatch)
    assert calls[0][:6] == ["/bin/uv", "pip", "install", "--quiet", "--python", sys.executable]
    assert calls[0][-2:] == ["--no-deps", "engine==1"] and "unsafe-best-match" in calls[0]
    assert calls[1] == ["/bin/uv", "pip", "uninstall", "--quiet", "--python", sys.executable, "triton"]


def test_pip_arguments_from_the_caller_make_pip_install(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _commands(monkeypatch, pip_args=["--index-url", "https://x/simple"])
    py = sys.executable
    assert calls == [
        [py, "-m", "pip", "install", "--quiet", "--index-url", "https://x/simple", "--no-deps", "engine==1"],
        [py, "-m", "pip", "uninstall", "--yes", "--quiet", "triton"],
    ]


def test_when_uv_fails_pip_tries_once_more(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _commands(monkeypatch, fail_uv=True)
    assert [c[0] for c in calls[:2]] == ["/bin/uv", sys.executable]
    assert calls[1][1:4] == ["-m", "pip", "install"]


def test_unillm_installer_pip_forces_pip(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("UNILLM_INSTALLER", "pip")
    monkeypatch.setattr(installer, "find_uv", lambda: "/bin/uv")
    tool = Installer(Path(sys.executable), (), run=lambda argv, env: None, log=lambda _: None)
    assert tool.uses_uv is False


def test_a_config_list_pip_alone_can_read_leaves_the_install_to_pip(monkeypatch: pytest.MonkeyPatch) -> None:
    class Listed:
        returncode, stdout = 0, "global.index-url='https://unclosed\n"

    monkeypatch.setattr("subprocess.run", lambda *a, **k: Listed())
    monkeypatch.setattr(installer, "find_uv", lambda: "/bin/uv")
    monkeypatch.delenv("UNILLM_INSTALLER", raising=False)
    tool = Installer(Path(sys.executable), (), run=lambda argv, env: None, log=lambda _: None)
    assert tool.uses_uv is False
