"""Bad configuration is a ConfigError, never a raw exception (issue 16, defects 16 and 17).

Config files must be UTF-8 and, in YAML, free of aliases (no "billion laughs" expansion);
numbers in [timeouts]/[retry]/[pool] are numbers, not booleans; an empty UNILLM_MODEL is refused.
``unillm route import`` of a malformed file prints one line and exits 2.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from unillm.cli.main import main
from unillm.client.llm import LLM
from unillm.config.load import from_config, load_config
from unillm.errors import ConfigError

CONNECT = {"engine": "vllm", "base_url": "http://127.0.0.1:8000"}

ALIAS_BOMB = """\
engine: vllm
base_url: http://127.0.0.1:8000
defaults:
  extra_body:
    a: &a ["x", "x", "x", "x", "x", "x", "x", "x", "x"]
    b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]
    c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]
    d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c]
    e: [*d, *d, *d, *d, *d, *d, *d, *d, *d]
"""


def test_a_config_file_that_is_not_utf8_is_a_config_error(tmp_path: Path) -> None:
    path = tmp_path / "unillm.toml"
    path.write_bytes(b'engine = "vllm"\nmodel = "caf\xe9"\n')
    with pytest.raises(ConfigError, match="not UTF-8"):
        load_config(path)


@pytest.mark.parametrize("source", [5, None, b"unillm.toml", ["engine"]])
def test_a_source_that_is_neither_a_path_nor_a_mapping_is_a_config_error(source: Any) -> None:
    with pytest.raises(ConfigError, match=r"file path .* or a mapping"):
        from_config(source)


@pytest.mark.parametrize("table", ["retry", "timeouts", "pool"])
def test_a_boolean_where_a_number_belongs_is_a_config_error(table: str) -> None:
    field = {"retry": "attempts", "timeouts": "read", "pool": "max_connections"}[table]
    with pytest.raises(ConfigError, match=table):
        load_config({**CONNECT, table: {field: True}})


def test_whole_numbers_stay_numbers_in_the_tables() -> None:
    config = load_config({**CONNECT, "retry": {"attempts": 2}, "pool": {"max_connections": 8}})
    assert config.retry == {"attempts": 2.0}
    assert config.pool == {"max_connections": 8}


def test_an_empty_unillm_model_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="model"):
        load_config(CONNECT, env={"UNILLM_MODEL": ""})


def test_an_empty_engine_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="engine"):
        load_config({**CONNECT, "engine": ""})


def test_a_yaml_alias_is_refused_not_expanded(tmp_path: Path) -> None:
    path = tmp_path / "unillm.yaml"
    path.write_text(ALIAS_BOMB)
    with pytest.raises(ConfigError, match="aliases"):
        load_config(path)


def test_a_yaml_config_without_aliases_still_loads(tmp_path: Path) -> None:
    path = tmp_path / "unillm.yaml"
    path.write_text("engine: vllm\nbase_url: http://127.0.0.1:8000\ndefaults:\n  max_tokens: 8\n")
    assert load_config(path).defaults == {"max_tokens": 8}


# -- unillm route import (defect 17) ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "text"),
    [
        ("vsr", "routing: [unclosed\n"),
        ("vsr", "a: &x 1\nb: *x\n"),
        ("vsr", "- just\n- a list\n"),
        ("vsr", "signals:\n  keywords: [just-a-string]\n"),
        ("litellm", "{not json"),
        ("litellm", json.dumps({"routes": ["not-a-route"]})),
        ("litellm", json.dumps({"routes": [{"name": "r", "utterances": 5}]})),
    ],
)
def test_route_import_of_a_malformed_file_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str, text: str
) -> None:
    path = tmp_path / ("router.yaml" if kind == "vsr" else "routes.json")
    path.write_text(text)
    assert main(["route", "import", kind, str(path)]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert len(err.strip().splitlines()) == 1
    assert str(path) in err or "config" in err


def test_route_import_of_a_file_that_is_not_utf8_is_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "router.yaml"
    path.write_bytes(b"\xff\xfe")
    assert main(["route", "import", "vsr", str(path)]) == 2
    assert "not UTF-8" in capsys.readouterr().err


# -- issue 29: a value nested past any recursion is a ConfigError ------------------------------------
def nested(depth: int) -> list[Any]:
    value: list[Any] = []
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize(
    "raw",
    [
        "[" * 100_000,
        "[" * 100_000 + "]" * 100_000,
        '{"a":' * 100_000 + "1" + "}" * 100_000,
        "[" * 300 + "]" * 300,
    ],
)
@pytest.mark.parametrize("variable", ["UNILLM_DEFAULTS__STOP", "UNILLM_DEFAULTS__EXTRA_BODY"])
def test_an_environment_value_nested_too_deeply_is_a_config_error(variable: str, raw: str) -> None:
    with pytest.raises(ConfigError, match=variable):
        load_config(CONNECT, env={variable: raw})


def test_a_mapping_nested_too_deeply_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="nest more than"):
        load_config({**CONNECT, "defaults": {"extra_body": {"a": nested(100_000)}}}, env={})


def test_overrides_nested_too_deeply_are_a_config_error() -> None:
    with pytest.raises(ConfigError, match="overrides"):
        load_config(CONNECT, env={}, defaults={"extra_body": {"a": nested(100_000)}})


@pytest.mark.parametrize("depth", [300, 100_000])
@pytest.mark.parametrize("suffix", [".toml", ".yaml"])
def test_a_file_nested_too_deeply_is_a_config_error(tmp_path: Path, suffix: str, depth: int) -> None:
    deep = "[" * depth + "]" * depth
    path = tmp_path / f"unillm{suffix}"
    if suffix == ".toml":
        path.write_text(
            f'engine = "vllm"\nbase_url = "http://127.0.0.1:8000"\n[defaults]\nextra_body = {{a = {deep}}}\n'
        )
    else:
        path.write_text(
            f"engine: vllm\nbase_url: http://127.0.0.1:8000\ndefaults:\n  extra_body:\n    a: {deep}\n"
        )
    with pytest.raises(ConfigError, match="nest"):
        load_config(path, env={})


def test_a_value_nested_a_few_levels_still_loads() -> None:
    config = load_config(CONNECT, env={"UNILLM_DEFAULTS__EXTRA_BODY": json.dumps({"a": nested(20)})})
    assert config.defaults["extra_body"] == {"a": nested(20)}


# -- issue 29: [pool] http names the wire, as Pool(http=...) does -----------------------------------
@pytest.mark.parametrize("wire", ["aiohttp", "httpx", "http2"])
def test_pool_http_in_a_config_file_picks_the_wire(tmp_path: Path, wire: str) -> None:
    path = tmp_path / "unillm.toml"
    path.write_text(
        f'engine = "vllm"\nbase_url = "http://127.0.0.1:8000"\n[pool]\nhttp = "{wire}"\nmax_connections = 8\n'
    )
    llm = from_config(path, env={})
    assert isinstance(llm, LLM)
    assert (llm._pool.http, llm._pool.max_connections) == (wire, 8)


def test_pool_http_from_the_environment_picks_the_wire() -> None:
    assert load_config(CONNECT, env={"UNILLM_POOL__HTTP": "httpx"}).pool == {"http": "httpx"}


@pytest.mark.parametrize("value", ["curl", 5, True, ["httpx"]])
def test_pool_http_that_names_no_wire_is_a_config_error(value: Any) -> None:
    with pytest.raises(ConfigError, match=r"pool: http is the HTTP library \('aiohttp', 'httpx', 'http2'\)"):
        load_config({**CONNECT, "pool": {"http": value}}, env={})


def test_a_pool_number_given_as_a_string_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="max_connections is a number, not '8'"):
        load_config({**CONNECT, "pool": {"max_connections": "8"}}, env={})
