"""The test kit's scripts run as files from ``unillm/testing/`` (the tiny models' builders, in an
engine's env), so that folder is first on their ``sys.path``: a module there named like an
installed package (``requests.py``) shadows it, and the builder dies importing the engine."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import unillm.testing

KIT = Path(unillm.testing.__file__).parent


def test_no_test_kit_module_is_named_like_an_installed_package() -> None:
    shadowing = [
        p.name for p in sorted(KIT.glob("*.py")) if p.stem != "__init__" and importlib.util.find_spec(p.stem)
    ]
    assert shadowing == [], f"rename these in {KIT}: they shadow installed packages {shadowing}"
