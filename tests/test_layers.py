"""The layering contract covers everything: every unillm module sits in a layer, every adapter
package is held to the adapter SDK, and no private name crosses modules. (``lint-imports`` in
``./run gate`` checks the arrows; these tests check that its contracts leave nothing out.)"""

from __future__ import annotations

import ast
import sys
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from import_contracts import adapter_packages, contracts

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT: dict[str, Any] = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
# What ./run gate hands lint-imports: pyproject.toml's contracts with the adapter packages added.
CONFIG: dict[str, Any] = contracts()["tool"]["importlinter"]
ADAPTER_PACKAGES = adapter_packages()
# What adapters may import besides the SDK: the test kit (their test harness uses it).
ADAPTER_MAY_IMPORT = {"adapter", "testing"}


def contract(kind: str) -> dict[str, Any]:
    found: list[dict[str, Any]] = [c for c in CONFIG["contracts"] if c["type"] == kind]
    (one,) = found
    return one


def unillm_children() -> set[str]:
    """The modules and packages directly under unillm/ (what a layer is made of)."""
    folder = ROOT / "unillm"
    modules = {p.stem for p in folder.glob("*.py") if p.name != "__init__.py"}
    packages = {p.name for p in folder.iterdir() if (p / "__init__.py").is_file()}
    return modules | packages


def test_every_unillm_module_sits_in_exactly_one_layer() -> None:
    layers = [name.strip().strip("()") for layer in contract("layers")["layers"] for name in layer.split("|")]
    assert sorted(layers) == sorted(unillm_children())


def test_every_adapter_package_is_a_root_package_of_the_contracts() -> None:
    assert ADAPTER_PACKAGES and set(ADAPTER_PACKAGES) <= set(CONFIG["root_packages"])


def test_every_adapter_package_is_held_to_the_adapter_sdk() -> None:
    # every adapters/*/unillm_* package (./run gate adds them), forbidden all of unillm but the SDK
    rule = contract("forbidden")
    assert (rule["source_modules"], rule["forbidden_modules"]) == (ADAPTER_PACKAGES, ["unillm"])
    assert set(ADAPTER_PACKAGES) | {"unillm"} == set(CONFIG["root_packages"])


def test_pyproject_lists_no_adapter_package_for_the_contracts() -> None:
    """The adapter packages come from ``adapters/*/`` (tests/import_contracts.py), so a new adapter
    folder needs no edit of ``pyproject.toml``; a name typed there would go stale."""
    typed = [
        *PYPROJECT["root_packages"],
        *(m for c in PYPROJECT["contracts"] for m in c.get("source_modules", [])),
    ]
    assert [name for name in typed if name.startswith("unillm_")] == [], (
        "pyproject.toml [tool.importlinter]: remove the adapter packages (./run gate adds them)"
    )


def test_the_gate_checks_the_contracts_with_the_adapter_packages() -> None:
    run = (ROOT / "run").read_text()
    assert "tests/import_contracts.py" in run and 'lint-imports" "$VENV/import-contracts.toml"' in run


def test_adapters_may_import_only_the_sdk_and_their_test_recipes_the_test_kit() -> None:
    allowed = {tuple(p.strip() for p in rule.split("->")) for rule in contract("forbidden")["ignore_imports"]}
    assert allowed == {
        ("**", "unillm.adapter"),
        ("**", "unillm.adapter.**"),
        ("**.testing", "unillm.testing"),
        ("**.testing", "unillm.testing.**"),
    }


def test_adapter_packages_import_nothing_of_unillm_but_the_sdk_and_in_test_recipes_the_test_kit() -> None:
    offenders = []
    for path in sorted(ROOT.glob("adapters/*/unillm_*/**/*.py")):
        allowed = ("unillm.adapter", "unillm.testing") if path.stem == "testing" else ("unillm.adapter",)
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                ours = name == "unillm" or name.startswith("unillm.")
                if ours and not any(name == a or name.startswith(f"{a}.") for a in allowed):
                    offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}: {name}")
    assert offenders == [], "adapters import the adapter SDK (unillm.adapter) only: " + ", ".join(offenders)


def test_no_module_imports_a_private_name_from_another() -> None:
    offenders = []
    files = [*ROOT.glob("unillm/**/*.py"), *ROOT.glob("adapters/*/unillm_*/**/*.py")]
    for path in sorted(files):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("unillm"):
                private = [
                    a.name for a in node.names if a.name.startswith("_") and not a.name.startswith("__")
                ]
                if private:
                    offenders.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.module}.{private}")
    assert offenders == []
