"""Configuration files and mappings -> LLM or Launch, with UNILLM_* overrides (nothing starts)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
from fake_adapter import FakeAdapter, registered

from unillm.client.llm import LLM
from unillm.client.transport import RetryPolicy, Timeouts
from unillm.config.load import Config, from_config, load_config
from unillm.errors import ConfigError
from unillm.launching.supervisor import Launch

PY = "/usr/bin/python3"
SECRET = "sk-config-secret-123"

TOML = """\
engine = "vllm"
base_url = "http://127.0.0.1:8000/"
model = "tiny"

[defaults]
max_tokens = 32
temperature = 0.0
"""

YAML = """\
engine: vllm
base_url: http://127.0.0.1:8000/
model: tiny
defaults:
  max_tokens: 32
  temperature: 0.0
"""

LAUNCH_TOML = f"""\
engine = "vllm"

[launch]
model = "Qwen/Qwen2.5-0.5B-Instruct"
python = "{PY}"
max_model_len = 512
lora = {{ sql = "/adapters/sql" }}

[launch.parallel]
tensor = 2
"""

LAUNCH_YAML = f"""\
engine: vllm
launch:
  model: Qwen/Qwen2.5-0.5B-Instruct
  python: {PY}
  max_model_len: 512
  lora:
    sql: /adapters/sql
  parallel:
    tensor: 2
"""


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


# -- files and mappings ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "text"), [("unillm.toml", TOML), ("unillm.yaml", YAML), ("unillm.yml", YAML)]
)
def test_file_with_base_url_gives_an_llm(tmp_path: Path, name: str, text: str) -> None:
    llm = from_config(write(tmp_path, name, text), env={})
    assert isinstance(llm, LLM)
    assert (llm.engine, llm.base_url) == ("vllm", "http://127.0.0.1:8000")
    assert llm.defaults == {"max_tokens": 32, "temperature": 0.0}
    assert "tiny" in repr(llm)


def test_file_path_may_be_a_string(tmp_path: Path) -> None:
    assert isinstance(from_config(str(write(tmp_path, "c.toml", TOML)), env={}), LLM)


def test_mapping_with_base_url_gives_an_llm() -> None:
    llm = from_config({"engine": "vllm", "base_url": "http://gpu-1:8000"}, env={})
    assert isinstance(llm, LLM)
    assert (llm.engine, llm.base_url, llm.defaults) == ("vllm", "http://gpu-1:8000", {})


@pytest.mark.parametrize(("name", "text"), [("launch.toml", LAUNCH_TOML), ("launch.yaml", LAUNCH_YAML)])
def test_file_with_launch_table_gives_a_launch(tmp_path: Path, name: str, text: str) -> None:
    run = from_config(write(tmp_path, name, text), env={})
    assert isinstance(run, Launch)
    line = run.command().render()
    assert PY in line.split(" ")  # after the environment
    assert "--model Qwen/Qwen2.5-0.5B-Instruct" in line
    assert "--max-model-len 512" in line
    assert "--tensor-parallel-size 2" in line
    assert "--lora-modules sql=/adapters/sql" in line


def test_mapping_with_launch_table_gives_a_launch() -> None:
    run = from_config({"engine": "vllm", "launch": {"model": "m", "python": PY}}, env={})
    assert isinstance(run, Launch)
    assert f"{PY} -m vllm.entrypoints.openai.api_server --model m " in run.command().render()


def test_top_level_model_fills_the_launch_model() -> None:
    run = from_config({"engine": "vllm", "model": "top", "launch": {"python": PY}}, env={})
    assert isinstance(run, Launch)
    assert run.spec.model == "top"


def test_top_level_api_key_is_used_by_the_launch_and_masked() -> None:
    run = from_config({"engine": "vllm", "api_key": SECRET, "launch": {"model": "m", "python": PY}}, env={})
    assert isinstance(run, Launch)
    assert run.spec.key() == SECRET
    assert run.command().env["VLLM_API_KEY"] == SECRET
    assert SECRET not in run.command().render()


def test_launch_without_a_key_generates_one() -> None:
    run = from_config({"engine": "vllm", "launch": {"model": "m", "python": PY}}, env={})
    assert isinstance(run, Launch)
    key = run.spec.key()
    assert key
    assert key != "auto"


def test_launch_api_key_auto_generates_a_key() -> None:
    run = from_config({"engine": "vllm", "launch": {"model": "m", "python": PY, "api_key": "auto"}}, env={})
    assert isinstance(run, Launch)
    assert run.spec.key() not in (None, "auto")


def test_timeouts_and_retry_tables() -> None:
    config = load_config(
        {
            "engine": "vllm",
            "base_url": "http://h:1",
            "timeouts": {"connect": 2, "read": 30},
            "retry": {"attempts": 1},
        },
        env={},
    )
    assert Timeouts(**config.timeouts) == Timeouts(connect=2, read=30)
    llm = from_config(config.model_dump(exclude={"api_key"}), env={})
    assert isinstance(llm, LLM)
    assert llm._timeouts == Timeouts(connect=2.0, read=30.0)
    assert llm._retry == RetryPolicy(attempts=1)


# -- swapping engines ------------------------------------------------------------------------


class ToyAdapter(FakeAdapter):
    name = "toy"
    display_name = "Toy"


def test_swapping_only_engine_changes_the_engine() -> None:
    base = {"base_url": "http://h:8000", "model": "tiny", "defaults": {"max_tokens": 8}}
    with registered(FakeAdapter, ToyAdapter):
        one, two = (from_config({**base, "engine": e}, env={}) for e in ("fake", "toy"))
    assert isinstance(one, LLM)
    assert isinstance(two, LLM)
    assert (one.engine, two.engine) == ("fake", "toy")
    assert isinstance(two.adapter, ToyAdapter)
    assert (one.base_url, one.defaults) == (two.base_url, two.defaults)


def test_swapping_engine_by_environment() -> None:
    with registered(FakeAdapter, ToyAdapter):
        llm = from_config({"engine": "fake", "base_url": "http://h:8000"}, env={"UNILLM_ENGINE": "toy"})
    assert isinstance(llm, LLM)
    assert llm.engine == "toy"


# -- environment overrides -------------------------------------------------------------------


def base() -> dict[str, Any]:
    """A fresh mapping per use (load_config must not be able to leak state between tests)."""
    return {"engine": "vllm", "base_url": "http://h:8000", "defaults": {"max_tokens": 8}}


@pytest.mark.parametrize(
    ("env", "field", "value"),
    [
        ({"UNILLM_BASE_URL": "http://other:9000"}, "base_url", "http://other:9000"),
        ({"UNILLM_MODEL": "m2"}, "model", "m2"),
        ({"UNILLM_MODEL": "123"}, "model", "123"),  # kept as text, not read as JSON
        ({"UNILLM_ENGINE": "vllm"}, "engine", "vllm"),
    ],
)
def test_top_level_env_override(env: dict[str, str], field: str, value: str) -> None:
    assert getattr(load_config(base(), env=env), field) == value


def test_api_key_env_override() -> None:
    config = load_config(base(), env={"UNILLM_API_KEY": "12345"})
    assert config.api_key is not None
    assert config.api_key.get_secret_value() == "12345"


def test_nested_env_override_is_read_as_json() -> None:
    config = load_config(
        base(), env={"UNILLM_DEFAULTS__MAX_TOKENS": "64", "UNILLM_DEFAULTS__STOP": '["\\n", "END"]'}
    )
    assert config.defaults == {"max_tokens": 64, "stop": ["\n", "END"]}


def test_nested_env_override_that_is_not_json_stays_text() -> None:
    config = load_config(
        {"engine": "vllm", "launch": {"model": "m"}}, env={"UNILLM_LAUNCH__DTYPE": "bfloat16"}
    )
    assert config.launch == {"model": "m", "dtype": "bfloat16"}


def test_nested_env_override_creates_the_table() -> None:
    config = load_config({"engine": "vllm", "base_url": "http://h"}, env={"UNILLM_TIMEOUTS__READ": "30"})
    assert config.timeouts == {"read": 30.0}


def test_env_override_reaches_the_llm(tmp_path: Path) -> None:
    llm = from_config(
        write(tmp_path, "c.toml", TOML),
        env={"UNILLM_DEFAULTS__MAX_TOKENS": "64", "UNILLM_BASE_URL": "http://x:1"},
    )
    assert isinstance(llm, LLM)
    assert llm.defaults["max_tokens"] == 64
    assert llm.base_url == "http://x:1"


def test_unrelated_environment_variables_are_ignored() -> None:
    config = load_config(
        base(),
        env={
            "UNILLM_CACHE": "/tmp/x",
            "HOME": "/root",
            "BASE_URL": "http://nope",
            "unillm_base_url": "http://nope",
        },
    )
    assert config.base_url == "http://h:8000"


def test_process_environment_is_used_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("UNILLM_DEFAULTS__MAX_TOKENS", "99")
    assert load_config(base()).defaults == {"max_tokens": 99}


def test_env_override_does_not_mutate_the_callers_mapping() -> None:
    source = base()
    before = copy.deepcopy(source)
    load_config(source, env={"UNILLM_DEFAULTS__MAX_TOKENS": "64"})
    assert source == before


def test_env_override_into_a_non_table_raises_config_error() -> None:
    with pytest.raises(ConfigError, match="UNILLM_ENGINE__X"):
        load_config(base(), env={"UNILLM_ENGINE__X": "1"})


# -- errors ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "source",
    [
        {"engine": "vllm"},
        {"engine": "vllm", "base_url": "http://h", "launch": {"model": "m"}},
    ],
)
def test_exactly_one_of_base_url_or_launch(source: dict[str, Any]) -> None:
    with pytest.raises(ConfigError, match=r"exactly one of base_url .* \[launch\]"):
        load_config(source, env={})


def test_both_base_url_and_launch_via_env_raises() -> None:
    with pytest.raises(ConfigError, match="exactly one"):
        load_config({"engine": "vllm", "launch": {"model": "m"}}, env={"UNILLM_BASE_URL": "http://h"})


def test_missing_engine_raises() -> None:
    with pytest.raises(ConfigError, match="engine"):
        load_config({"base_url": "http://h"}, env={})


def test_unknown_key_raises_naming_it() -> None:
    with pytest.raises(ConfigError, match="base_ulr"):
        load_config({"engine": "vllm", "base_ulr": "http://h", "launch": {"model": "m"}}, env={})


@pytest.mark.parametrize(
    ("defaults", "needle"),
    [
        ({"max_tokens": 0}, "max_tokens"),
        ({"temperature": "hot"}, "temperature"),
        ({"max_token": 5}, "max_token"),
    ],
)
def test_bad_defaults_raise(defaults: dict[str, Any], needle: str) -> None:
    with pytest.raises(ConfigError, match=rf"invalid \[defaults\].*{needle}"):
        load_config({"engine": "vllm", "base_url": "http://h", "defaults": defaults}, env={})


def test_bad_defaults_from_env_raise() -> None:
    with pytest.raises(ConfigError, match="max_tokens"):
        load_config(base(), env={"UNILLM_DEFAULTS__MAX_TOKENS": "-1"})


def test_bad_timeouts_raise() -> None:
    with pytest.raises(ConfigError, match="timeouts"):
        from_config({**base(), "timeouts": {"connnect": 1}}, env={})


@pytest.mark.parametrize(
    "launch",
    [
        {"model": "m", "python": PY, "max_model_lenn": 512},
        {"model": "m", "python": PY, "max_model_len": "long"},
        {"python": PY},
    ],
)
def test_bad_launch_table_raises_config_error(launch: dict[str, Any]) -> None:
    with pytest.raises(ConfigError, match="launch"):
        from_config({"engine": "vllm", "launch": launch}, env={})


def test_launch_table_with_a_connection_setting_raises_config_error() -> None:
    with pytest.raises(ConfigError, match="defaults"):
        from_config(
            {"engine": "vllm", "launch": {"model": "m", "python": PY, "defaults": {"max_tokens": 4}}}, env={}
        )


def test_missing_file_raises(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "nope.toml", env={})


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("bad.toml", 'engine = "vllm\nbase_url = 1'),
        ("bad.toml", "[defaults\nmax_tokens = 3"),
        ("bad.yaml", "engine: [vllm\nbase_url: x"),
        ("bad.yml", "a: b: c"),
    ],
)
def test_unparsable_file_raises(tmp_path: Path, name: str, text: str) -> None:
    path = write(tmp_path, name, text)
    with pytest.raises(ConfigError, match="does not parse") as info:
        load_config(path, env={})
    assert str(path) in str(info.value)


@pytest.mark.parametrize("text", ["- engine\n- vllm\n", "just text\n", ""])
def test_yaml_without_a_top_level_mapping_raises(tmp_path: Path, text: str) -> None:
    with pytest.raises(ConfigError, match="top level"):
        load_config(write(tmp_path, "c.yaml", text), env={})


@pytest.mark.parametrize("name", ["unillm.json", "unillm.ini", "unillm"])
def test_unknown_file_type_raises(tmp_path: Path, name: str) -> None:
    with pytest.raises(ConfigError, match=r"\.toml"):
        load_config(write(tmp_path, name, "{}"), env={})


# -- secrets ---------------------------------------------------------------------------------


def test_api_key_is_not_in_repr_or_str_of_the_config() -> None:
    config = load_config({**base(), "api_key": SECRET}, env={})
    assert isinstance(config, Config)
    assert SECRET not in repr(config)
    assert SECRET not in str(config)
    assert config.api_key is not None
    assert config.api_key.get_secret_value() == SECRET


def test_api_key_from_env_is_not_in_repr_of_the_config() -> None:
    config = load_config(base(), env={"UNILLM_API_KEY": SECRET})
    assert SECRET not in repr(config)


def test_launch_api_key_is_not_in_repr_or_str_of_the_config() -> None:
    config = load_config(
        {"engine": "vllm", "launch": {"model": "m", "python": PY, "api_key": SECRET}}, env={}
    )
    assert SECRET not in repr(config)
    assert SECRET not in str(config)


def test_api_key_is_not_in_repr_or_str_of_the_llm() -> None:
    llm = from_config({**base(), "api_key": SECRET}, env={})
    assert SECRET not in repr(llm)
    assert SECRET not in str(llm)


def test_api_key_is_not_in_repr_of_the_launch_spec() -> None:
    run = from_config({"engine": "vllm", "api_key": SECRET, "launch": {"model": "m", "python": PY}}, env={})
    assert isinstance(run, Launch)
    assert SECRET not in repr(run.spec)
    assert SECRET not in repr(run)


def test_launch_variables_do_not_turn_a_connect_config_into_a_launch() -> None:
    config = load_config(
        {"engine": "vllm", "base_url": "http://127.0.0.1:8000"},
        env={"UNILLM_LAUNCH__VLLM__MAX_MODEL_LEN": "2048"},
    )
    assert config.launch is None and config.base_url == "http://127.0.0.1:8000"
    launched = load_config(
        {"engine": "vllm", "launch": {"model": "/m"}}, env={"UNILLM_LAUNCH__MAX_MODEL_LEN": "2048"}
    )
    assert launched.launch == {"model": "/m", "max_model_len": 2048}
