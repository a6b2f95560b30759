"""``unillm new-adapter NAME`` writes an adapter package that passes its own tests, the conformance
kit, the layout conventions, the linters and strict mypy as written, and that the import contracts
pick up from its folder: a new engine touches no core file."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import import_contracts
import pytest
import test_adapter_layout as layout
import test_version as versions

from unillm.cli.main import main
from unillm.errors import InvalidOptions
from unillm.launching.envs import cache_root

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A repository root (the real pyproject.toml) whose adapters/ holds only a new ``lmdeploy``."""
    root = tmp_path_factory.mktemp("repo")
    shutil.copy(ROOT / "pyproject.toml", root / "pyproject.toml")
    (root / "unillm").symlink_to(ROOT / "unillm")  # so that the linters see unillm as first-party
    assert (
        main(["new-adapter", "lmdeploy", "--dir", str(root / "adapters"), "--display-name", "LMDeploy"]) == 0
    )
    return root


def run(*argv: str, cwd: Path, path: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {"PYTHONPATH": str(path)} if path else {}
    return subprocess.run(
        [sys.executable, "-m", *argv],
        cwd=cwd,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_the_new_adapter_passes_its_tests_with_nothing_installed(repo: Path) -> None:
    """Its conformance-kit subclass and its launch test (a fake engine process) run from the folder."""
    folder = repo / "adapters" / "lmdeploy"
    done = run("pytest", "-q", "-p", "no:cacheprovider", "tests", cwd=folder, path=folder)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert " passed" in done.stdout and "failed" not in done.stdout


def test_the_new_adapter_follows_the_layout(repo: Path) -> None:
    folder = repo / "adapters" / "lmdeploy"
    layout.test_an_adapter_package_follows_the_layout(folder)
    layout.test_an_adapter_package_has_the_common_files(folder)


def test_the_import_contracts_hold_the_new_adapter_to_the_sdk(repo: Path) -> None:
    config = import_contracts.contracts(repo)["tool"]["importlinter"]
    assert "unillm_lmdeploy" in config["root_packages"]
    [forbidden] = [c for c in config["contracts"] if c["type"] == "forbidden"]
    assert forbidden["source_modules"] == ["unillm_lmdeploy"]


def test_the_new_adapter_is_lint_and_type_clean(repo: Path) -> None:
    folder = repo / "adapters" / "lmdeploy"
    for argv in (["ruff", "check", "adapters"], ["ruff", "format", "--check", "adapters"]):
        done = run(*argv, cwd=repo)
        assert done.returncode == 0, done.stdout[-3000:]
    cache = cache_root() / "mypy" / "new-adapter"  # kept: a rerun checks only what changed
    done = run("mypy", "--strict", "--cache-dir", str(cache), "unillm_lmdeploy", cwd=folder, path=folder)
    assert done.returncode == 0, done.stdout[-3000:]


def test_the_new_adapter_requires_the_core_by_its_distribution_name(repo: Path) -> None:
    """``unillm-sdk``, not ``unillm`` (an unrelated project on the index): else ``pip install -e
    adapters/<engine>`` looks for ``unillm>=0.1`` there and fails, and so does test_version."""
    versions.test_each_adapter_requires_a_core_range_that_admits_this_version(
        repo / "adapters" / "lmdeploy" / "pyproject.toml"
    )


def test_an_existing_folder_or_a_bad_name_is_refused(repo: Path) -> None:
    from unillm.cli.adapter_template import write_adapter

    with pytest.raises(InvalidOptions, match="exists already"):
        write_adapter("lmdeploy", repo / "adapters")
    with pytest.raises(InvalidOptions, match="lower case letters"):
        write_adapter("LM-Deploy", repo / "adapters")


def test_the_launch_test_names_the_flags_the_fake_engine_reads(repo: Path) -> None:
    """The newcomer sees where to put the engine's own port and served-name flags."""
    launch_test = (repo / "adapters" / "lmdeploy" / "tests" / "test_lmdeploy_launch.py").read_text()
    assert 'fake_engine.prefix(port_flag="--port", name_flag="--served-model-name")' in launch_test
    assert "change to the engine's flags" in launch_test


def test_the_fake_engine_says_which_argument_names_the_port_flag() -> None:
    from unillm.testing import fake_engine

    with pytest.raises(SystemExit, match=r"no --port .* fake_engine\.prefix\(port_flag=\.\.\.\)"):
        fake_engine.main(["--", "engine", "--server-port", "8000"])
