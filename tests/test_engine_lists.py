"""Every list of engines agrees with ``adapters/*/``, and a failure names the file and line to edit.

The first-party engines are the adapter folders the root ``pyproject.toml`` has an extra for
(``unillm-sdk[<engine>]``); :func:`unillm.adapter.registry.first_party_engines` reads them from the
installed metadata, and ``./run``, mypy, pytest and import-linter find every folder by
themselves. What must stay typed (the extras, prose) is checked here against the folders. A new
adapter folder without a root extra (what ``unillm new-adapter`` writes) is a contributed adapter:
it passes everything with no core file touched; giving it a root extra makes it first-party, and
then these tests say where else to name it.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from unillm.adapter.registry import first_party_engines, get_adapter

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = {p.parent.name: p.parent for p in ROOT.glob("adapters/*/pyproject.toml")}
# An extra that installs an adapter distribution: name = ["unillm-<engine>[...]>=0.1,<0.2"]
EXTRA_LINE = re.compile(r'^(?P<extra>[\w-]+) = \["(?P<dist>unillm-[\w-]+)(\[[^\]]*\])?[<>=~!]')


def toml(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = tomllib.loads(path.read_text())
    return data


def dist_name(folder: str) -> str:
    name: str = toml(FOLDERS[folder] / "pyproject.toml")["project"]["name"]
    return name


def engine_extras() -> dict[str, tuple[int, str, str]]:
    """Root extra -> (its line in pyproject.toml, the distribution, the folder) for each adapter extra."""
    found = {}
    for number, line in enumerate((ROOT / "pyproject.toml").read_text().splitlines(), 1):
        match = EXTRA_LINE.match(line)
        if match:
            folder = next((f for f in FOLDERS if dist_name(f) == match["dist"]), "")
            found[match["extra"]] = (number, match["dist"], folder)
    return found


def first_party() -> list[str]:
    """The engines of the root extras named like the folder they install (``unillm-sdk[vllm]``)."""
    return sorted(
        e for e, (_, dist, folder) in engine_extras().items() if e == folder == dist_to_engine(dist)
    )


def dist_to_engine(dist: str) -> str:
    return dist.removeprefix("unillm-").replace("-", "_")


def line_of(path: Path, text: str) -> int:
    return next(n for n, line in enumerate(path.read_text().splitlines(), 1) if text in line)


@dataclass(frozen=True)
class EngineList:
    """A typed list of engines: the text of ``path`` from ``start`` up to ``end``."""

    path: str
    start: str
    end: str
    names: str  # "display" (vLLM, ...), "extra" (`unillm-sdk[vllm]`) or "dist" (`unillm-vllm`)

    def text(self) -> str:
        whole = (ROOT / self.path).read_text()
        begin = whole.index(self.start)
        return whole[begin : whole.index(self.end, begin + len(self.start))]

    def where(self) -> str:
        return f"{self.path}:{line_of(ROOT / self.path, self.start)}"

    def expected(self, engine: str) -> str:
        if self.names == "display":
            return get_adapter(engine).display_name
        if self.names == "extra":
            return f"unillm-sdk[{engine}]"
        return dist_name(engine)


ENGINE_LISTS = [
    EngineList("pyproject.toml", 'description = "', '"\n', "display"),
    EngineList("README.md", "One **async Python SDK**", "Pluggable", "display"),
    EngineList("README.md", "## Engines", "## Client overhead", "display"),
    EngineList("README.md", "## Engines", "## Client overhead", "extra"),
    EngineList("docs/index.md", "One **async Python SDK**", "Pluggable", "display"),
    EngineList("docs/getting-started.md", "one small distribution per", "found through", "dist"),
    EngineList("docs/guide/engines.md", "# Engines", "## What each engine declares", "display"),
    EngineList("docs/guide/engines.md", "# Engines", "## What each engine declares", "extra"),
    EngineList("unillm/__init__.py", '"""unillm:', "\n", "display"),
]


def test_each_engine_extra_installs_its_adapter_folder() -> None:
    wrong = []
    for extra, (line, dist, folder) in engine_extras().items():
        if folder not in FOLDERS:
            wrong.append(
                f"pyproject.toml:{line}: unillm-sdk[{extra}] installs {dist}, which no adapters folder builds"
            )
        elif dist_name(folder) != dist:
            wrong.append(
                f"pyproject.toml:{line}: unillm-sdk[{extra}] names {dist}, "
                f"but adapters/{folder} is {dist_name(folder)}"
            )
    assert wrong == [], "\n".join(wrong)


def test_the_first_party_engines_are_read_from_the_installed_extras() -> None:
    assert list(first_party_engines()) == first_party(), (
        "the installed unillm's extras differ from pyproject.toml's: reinstall it (pip install -e . or ./run)"
    )


@pytest.mark.parametrize("listed", ENGINE_LISTS, ids=lambda e: f"{e.path}-{e.names}-{e.start[:12]}")
def test_every_list_of_engines_names_each_first_party_engine(listed: EngineList) -> None:
    text = listed.text()
    missing = [
        f"{listed.expected(e)!r} (adapters/{e})" for e in first_party() if listed.expected(e) not in text
    ]
    assert missing == [], f"{listed.where()}: the list of engines there lacks {', '.join(missing)}: add them"


@pytest.mark.parametrize("listed", [e for e in ENGINE_LISTS if e.names != "display"], ids=lambda e: e.path)
def test_no_list_of_engines_names_an_engine_that_is_not_there(listed: EngineList) -> None:
    pattern = r"`unillm-sdk\[([\w-]+)\]`" if listed.names == "extra" else r"`(unillm-[\w-]+)`"
    named = [n for n in re.findall(pattern, listed.text()) if n != "unillm-sdk"]
    known = first_party() if listed.names == "extra" else [dist_name(e) for e in first_party()]
    stale = sorted(set(named) - set(known))
    assert stale == [], f"{listed.where()}: the list of engines names {stale}, which have no adapter folder"
