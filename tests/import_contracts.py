"""The import-linter contracts ``./run gate`` checks, with every adapter package in them.

``pyproject.toml``'s ``[tool.importlinter]`` names only ``unillm`` as a root package, and the
adapters' contract (the ``forbidden`` one) no source: this adds each ``adapters/*/unillm_*``
package to both, so a new adapter folder is checked with no edit anywhere::

    python tests/import_contracts.py > contracts.toml && lint-imports contracts.toml
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent


def adapter_packages(root: Path = ROOT) -> list[str]:
    """The import names of the adapter packages under ``adapters/*/``."""
    return sorted(p.name for p in root.glob("adapters/*/unillm_*") if (p / "__init__.py").is_file())


def contracts(root: Path = ROOT) -> dict[str, Any]:
    """``[tool.importlinter]`` of ``pyproject.toml`` with the adapter packages as root packages
    and as the sources of the adapters' contract."""
    config: dict[str, Any] = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["importlinter"]
    adapters = adapter_packages(root)
    config["root_packages"] = [*config["root_packages"], *adapters]
    for contract in config["contracts"]:
        if contract["type"] == "forbidden":
            contract["source_modules"] = adapters
    return {"tool": {"importlinter": config}}


if __name__ == "__main__":
    import tomli_w

    print(tomli_w.dumps(contracts()), end="")
