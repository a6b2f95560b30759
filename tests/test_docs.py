"""What the README, the docs pages and the repository's own files say matches the code."""

from __future__ import annotations

import ast
import re
import sys
import typing
from pathlib import Path
from typing import Any

import pytest

import unillm
from unillm.adapter.launch_spec import SpeculativeMethod
from unillm.adapter.registry import first_party_engines
from unillm.options import Options

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
GUIDE = ROOT / "docs" / "guide"


def test_the_readme_stays_short() -> None:
    assert len(README.encode()) < 8 * 1024


def test_the_readme_keeps_the_commands_of_a_fresh_machine() -> None:
    for command in ("./run demo", "./run test", "./run unit"):
        assert f"{command}" in README, command


def test_every_relative_link_of_the_readme_exists() -> None:
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", README)
    assert links
    assert sorted(link for link in links if "://" not in link and not (ROOT / link).exists()) == []


def test_the_docs_list_every_speculative_method() -> None:
    page = (GUIDE / "speculative-decoding.md").read_text()
    listed = re.search(r"Speculative\(method=(\"ngram\" \|[^,]*),", page)
    assert listed is not None
    for method in typing.get_args(SpeculativeMethod):
        assert f'"{method}"' in listed.group(1), method


def test_the_docs_list_every_option() -> None:
    page = (ROOT / "docs" / "getting-started.md").read_text()
    listed = re.search(r"The same option names work on every engine: `([^`]*)`", page.replace("\n", " "))
    assert listed is not None
    names = {n.strip() for n in listed.group(1).split(",")}
    assert set(Options.__annotations__) - {"extra_body"} <= names | {"output"}
    assert "extra_body" in page


def test_the_docs_explain_the_time_and_pool_errors() -> None:
    section = (GUIDE / "errors.md").read_text()
    for name in ("PoolTimeout", "DeadlineExceeded", "EngineTimeout"):
        assert f"`{name}`" in section and hasattr(unillm, name)


def test_each_first_party_engine_has_the_extra_an_unknown_engine_error_suggests() -> None:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert first_party_engines() and set(first_party_engines()) <= set(extras)


@pytest.mark.parametrize("name", ["nope", "llama.cpp", "vllmm"])
def test_an_unknown_engine_never_suggests_an_extra_that_does_not_exist(name: str) -> None:
    with pytest.raises(unillm.UnknownEngine) as caught:
        unillm.connect(name, "http://127.0.0.1:8000")
    suggested = re.findall(r"unillm-sdk\[([^\]]+)\]", str(caught.value))
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert all(s in extras or s == "<engine>" for s in suggested), suggested
    assert "entry-point group 'unillm.adapters'" in str(caught.value)


def test_did_you_mean_for_a_misspelt_engine() -> None:
    with pytest.raises(unillm.UnknownEngine, match="Did you mean 'vllm'"):
        unillm.connect("vllmm", "http://127.0.0.1:8000")


def test_the_sglang_cpu_recipe_cites_only_files_in_the_repository() -> None:
    path = ROOT / "adapters" / "sglang" / "tests" / "cpu_env.py"
    doc = ast.get_docstring(ast.parse(path.read_text())) or ""
    cited = set(re.findall(r"[\w./-]+\.(?:md|py|txt|json|toml)\b", doc))
    assert cited, "the recipe's docstring names its files"
    files = {p.name for p in ROOT.rglob("*") if ".git" not in p.parts} | {
        str(p.relative_to(ROOT)) for p in ROOT.rglob("*") if ".git" not in p.parts
    }
    assert sorted(c for c in cited if c not in files) == []


def test_the_quickstart_notebook_connects_where_its_launch_command_serves(
    capsys: pytest.CaptureFixture[str],
) -> None:
    import json
    import shlex
    from urllib.parse import urlsplit

    from unillm.cli.main import main

    cells = json.loads((ROOT / "notebooks" / "quickstart.ipynb").read_text())["cells"]
    markdown = "".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
    code = "".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")
    command = re.search(r"`unillm (launch [^`]+)`", markdown)
    url = re.search(r'"base_url": "([^"]+)"', code)
    assert command is not None and url is not None
    assert main([*shlex.split(command.group(1)), "--dry-run", "--python", sys.executable]) == 0
    served = shlex.split(capsys.readouterr().out)
    assert served[served.index("--port") + 1] == str(urlsplit(url.group(1)).port)


def _hook(name: str) -> Any:
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, ROOT / "docs" / "hooks" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_adapter_guide_tables_are_generated_from_the_code() -> None:
    from unillm.adapter.launch_spec import LaunchSpec

    tables = _hook("tables")
    assert "docs/hooks/tables.py" in (ROOT / "mkdocs.yml").read_text()
    page = (ROOT / "docs" / "adapters.md").read_text()
    assert tables.SETTINGS in page and tables.ATTRIBUTES in page
    rendered = tables.on_page_markdown(page, None)
    assert [f for f in LaunchSpec.model_fields if f"| `{f}` |" not in rendered] == []
    for attribute in (
        "structured_backends",
        "takes_compact_json",
        "ray_executor",
        "thinking_options",
        "constrains_after_thinking",
        "reasoning_parsers",
        "takes_tool_parser",
    ):
        assert f"Adapter.{attribute}`" in rendered, attribute


def test_the_generated_tables_committed_in_the_pages_are_current() -> None:
    """The tables are in the Markdown (readable on GitHub), and they say what the code says."""
    tables = _hook("tables")
    stale = tables.stale_pages()
    assert stale == [], f"generated tables out of date in {stale}: run `{tables.REGENERATE}`"
    carrying = sorted(
        str(path.relative_to(ROOT / "docs"))
        for path in (ROOT / "docs").rglob("*.md")
        if any(placeholder in path.read_text() for placeholder in tables.GENERATED)
    )
    assert carrying == sorted(tables.PAGES), "list every page with a generated table in tables.PAGES"
    for name in tables.PAGES:
        page = (ROOT / "docs" / name).read_text()
        for placeholder in tables.GENERATED:
            if placeholder in page:
                assert tables.end_marker(placeholder) in page, f"{name}: {placeholder} has no table"


def test_the_body_field_table_probes_every_option() -> None:
    from unillm.options import Options

    tables = _hook("tables")
    probed = {name for _, output, options, stream in tables.OPTION_PROBES for name in options}
    probed |= {"output", "stream"}
    missing = set(Options.__annotations__) - probed - set(tables.NOT_A_FIELD)
    assert missing == set(), f"add a row to OPTION_PROBES (docs/hooks/tables.py) for {sorted(missing)}"
    page = (ROOT / "docs" / "adapters.md").read_text()
    assert "`stream_options.include_usage: true`" in page and '`model: "sql"`' in page


def test_the_errors_page_draws_the_hierarchy_from_the_code() -> None:
    import unillm.errors as errors

    tables = _hook("tables")
    page = (GUIDE / "errors.md").read_text()
    assert tables.ERRORS in page
    rendered = tables.on_page_markdown(page, None)
    names = [n for n, c in vars(errors).items() if isinstance(c, type) and issubclass(c, errors.UnillmError)]
    assert [n for n in names if f"**`{n}`**" not in rendered] == []
    assert "| `EngineError` | `InvalidRequest`, `Unauthorized`, `NotFound`" in rendered
    assert "| `ValueError` (built-in) |" in rendered


def test_snippets_that_await_at_top_level_are_marked_as_repl_cells() -> None:
    tables = _hook("tables")
    repl = "```python\nimport unillm\n\nawait unillm.connect('vllm', 'http://x').info()\n```"
    script = "```python\nimport asyncio\n\nasync def main() -> None:\n    await asyncio.sleep(0)\n```"
    assert tables.mark_repl_cells(repl).startswith('```python title="REPL cell')
    assert tables.mark_repl_cells(script) == script


def test_the_changelog_has_a_dated_release_under_an_unreleased_section() -> None:
    changelog = (ROOT / "CHANGELOG.md").read_text()
    versions = re.findall(r"^## \[([^\]]+)\](.*)$", changelog, re.M)
    assert versions[0][0] == "Unreleased"
    assert versions[1][0] == unillm.__version__ and re.fullmatch(r" — \d{4}-\d{2}-\d{2}", versions[1][1])
