"""One version source: unillm/__init__.py; the adapters read it and require a range that admits it."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from packaging.requirements import Requirement

import unillm

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent
PROJECTS = [ROOT / "pyproject.toml", *sorted(ROOT.glob("adapters/*/pyproject.toml"))]


@pytest.mark.parametrize("path", PROJECTS, ids=lambda p: p.parent.name)
def test_no_project_repeats_the_version(path: Path) -> None:
    project = tomllib.loads(path.read_text())
    assert "version" not in project["project"] and "version" in project["project"]["dynamic"]
    source = (path.parent / project["tool"]["hatch"]["version"]["path"]).resolve()
    assert source == ROOT / "unillm" / "__init__.py"


@pytest.mark.parametrize("path", PROJECTS[1:], ids=lambda p: p.parent.name)
def test_each_adapter_requires_a_core_range_that_admits_this_version(path: Path) -> None:
    deps = [Requirement(d) for d in tomllib.loads(path.read_text())["project"]["dependencies"]]
    core = next(d for d in deps if d.name == "unillm-sdk")
    assert core.url is None, "by name and version, so an index install never takes another project"
    assert core.specifier.contains(unillm.__version__)
    assert not core.specifier.contains("0.0.8"), "the unrelated `unillm` on the index is 0.0.1-0.0.8"


def test_every_engine_extra_names_an_adapter_distribution_of_this_repository() -> None:
    """By name and version (a wheel with ``file:`` requirements cannot be published), and each name
    is the ``[project] name`` of an adapters/*/ folder."""
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    adapters = {tomllib.loads(p.read_text())["project"]["name"] for p in PROJECTS[1:]}
    for name, requirements in extras.items():
        for text in requirements:
            requirement = Requirement(text)
            if requirement.name.startswith("unillm-") and requirement.name != "unillm-sdk":
                assert requirement.url is None and requirement.name in adapters, name
                assert requirement.specifier.contains(unillm.__version__), name
