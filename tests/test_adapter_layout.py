"""The adapter layout conventions that let `./run`, mypy and CI find adapters without lists.

Every ``adapters/<engine>/`` package declares a ``dev`` extra (`./run` installs it), registers an
entry point, keeps its code in ``unillm_<engine>/`` (mypy's ``files`` glob) in the same files
(``__init__.py`` re-exports, ``adapter.py`` the class, ``launch.py`` the launch; docs/adapters.md)
and its tests, with a conformance-kit subclass, in ``tests/``; the core tests collect with no
adapter importable, and the core's test helpers name no engine (recipes live in the adapters).
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path
from typing import IO, Any

import pytest

from unillm.adapter.registry import ENTRY_POINT_GROUP

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent
ADAPTERS = sorted(p.parent for p in ROOT.glob("adapters/*/pyproject.toml"))
# What the engines install (never the dev venv's business): vLLM, SGLang (and its kernels), mlx-lm.
ENGINE_MODULES = ("vllm", "sglang", "sgl_kernel", "mlx", "mlx_lm", "torch", "llguidance")


def pyproject(folder: Path) -> dict[str, Any]:
    data: dict[str, Any] = tomllib.loads((folder / "pyproject.toml").read_text())
    return data


@pytest.mark.parametrize("folder", ADAPTERS, ids=lambda p: p.name)
def test_an_adapter_package_follows_the_layout(folder: Path) -> None:
    project = pyproject(folder)["project"]
    assert "dev" in project.get("optional-dependencies", {}), "declare a `dev` extra (may be [])"
    entry_points = project["entry-points"][ENTRY_POINT_GROUP]
    assert list(entry_points) == [folder.name], "one entry point, named like the folder"
    package = entry_points[folder.name].split(":")[0].split(".")[0]
    assert package.startswith("unillm_") and (folder / package / "py.typed").is_file()
    assert list((folder / "tests").glob("test_*_conformance.py")), "subclass the conformance kit"


@pytest.mark.parametrize("folder", ADAPTERS, ids=lambda p: p.name)
def test_an_adapter_package_has_the_common_files(folder: Path) -> None:
    package = folder / f"unillm_{folder.name}"
    for name in ("__init__.py", "adapter.py", "launch.py", "py.typed"):
        assert (package / name).is_file(), f"{package.name}/{name} is missing (docs/adapters.md)"
    target = pyproject(folder)["project"]["entry-points"][ENTRY_POINT_GROUP][folder.name]
    assert target.startswith(f"{package.name}:"), "the entry point names the package's public class"
    cls = target.split(":")[1]
    classes = {
        n.name for n in ast.parse((package / "adapter.py").read_text()).body if isinstance(n, ast.ClassDef)
    }
    assert cls in classes, f"{cls} is defined in {package.name}/adapter.py"
    init = ast.parse((package / "__init__.py").read_text())
    defs = (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
    defined = [n.name for n in init.body if isinstance(n, defs) and n.name != "__getattr__"]
    assert not defined, f"{package.name}/__init__.py only re-exports; move {defined} to a module"
    assert (folder / "tests" / f"test_{folder.name}_conformance.py").is_file()


def test_the_core_test_helpers_name_no_engine() -> None:
    """Engine recipes live in the adapters (``cpu_recipe``, ``unillm_<engine>.testing``): no
    ``engine == "vllm"`` in the core's CPU and test helpers."""
    engines = {f.name for f in ADAPTERS}
    offenders = []
    for path in [
        ROOT / "unillm" / "launching" / "cpu.py",
        *sorted((ROOT / "unillm" / "testing").glob("*.py")),
    ]:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Compare) and any(
                isinstance(c, ast.Constant) and c.value in engines for c in node.comparators
            ):
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert offenders == []


def test_mypy_checks_every_adapter_without_a_list() -> None:
    mypy = pyproject(ROOT)["tool"]["mypy"]
    assert mypy["strict"] is True
    assert "packages" not in mypy and "adapters/*/unillm_*" in mypy["files"]
    assert "adapters/*/tests" in (ROOT / "run").read_text(), "./run gate type-checks each adapter's tests"


def collect_without(blocked: list[str], *paths: str, output: IO[str]) -> subprocess.Popen[str]:
    """Start ``pytest --collect-only -m "not engine"`` of ``paths`` with the modules ``blocked``
    unimportable, its output to ``output`` (a file: a pipe would stall it while the other runs)."""
    program = textwrap.dedent(f"""
        import importlib.abc, sys
        import pytest

        class NoAdapters(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in {blocked!r}:
                    raise ModuleNotFoundError(f"no module named {{name!r}} (blocked)", name=name)
                return None

        sys.meta_path.insert(0, NoAdapters())
        sys.exit(pytest.main(["--collect-only", "-q", "-m", "not engine", "-p", "no:cacheprovider",
                              *{list(paths)!r}]))
    """)
    return subprocess.Popen(
        [sys.executable, "-c", program],
        cwd=ROOT,
        stdout=output,
        stderr=subprocess.STDOUT,
        text=True,
    )


@pytest.fixture(scope="module")
def collections() -> dict[str, tuple[int, str]]:
    """Both collections below, run side by side (each imports the whole suite): exit code and output."""
    adapter_packages = sorted(
        {pyproject(f)["project"]["entry-points"][ENTRY_POINT_GROUP][f.name].split(":")[0] for f in ADAPTERS}
    )
    with tempfile.TemporaryFile("w+") as mine, tempfile.TemporaryFile("w+") as theirs:
        started = {
            "no adapter": (collect_without(adapter_packages, "tests", output=mine), mine),
            "no engine": (
                collect_without(
                    list(ENGINE_MODULES), "tests", *(str(f / "tests") for f in ADAPTERS), output=theirs
                ),
                theirs,
            ),
        }
        done = {}
        for name, (process, output) in started.items():
            process.wait(timeout=300)
            output.seek(0)
            done[name] = (process.returncode, output.read())
    return done


def test_core_tests_collect_with_no_engine_adapter_importable(
    collections: dict[str, tuple[int, str]],
) -> None:
    code, out = collections["no adapter"]
    assert code == 0, out[-5000:]
    assert " collected" in out or "tests collected" in out, out[-500:]


def test_the_whole_suite_collects_with_no_engine_installed(collections: dict[str, tuple[int, str]]) -> None:
    """The adapters' tests too: an engine (or its frontend) is imported only by tests that run it."""
    code, out = collections["no engine"]
    assert code == 0, out[-5000:]
    assert " collected" in out or "tests collected" in out, out[-500:]


def test_the_adapter_guide_names_every_hook() -> None:
    from unillm.adapter.base import Adapter
    from unillm.adapter.openai_compat import OpenAICompatAdapter

    guide = (ROOT / "docs" / "adapters.md").read_text()
    hooks = {
        name
        for cls in (Adapter, OpenAICompatAdapter)
        for name in vars(cls)
        if not name.startswith("_") and callable(getattr(cls, name))
    }
    assert hooks, "no hooks found"
    named = set(re.findall(r"`(\w+)[`(]", guide))
    assert sorted(hooks - named) == []
    assert "docs/adapters.md" in (ROOT / "README.md").read_text()
