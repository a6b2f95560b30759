"""Swapping engines in config is one line: per-engine tables, keyword overrides (nothing starts)."""

from __future__ import annotations

from pathlib import Path

import pytest

import unillm
from unillm.config.load import from_config, load_config
from unillm.errors import ConfigError
from unillm.launching.supervisor import Launch

PY = "/usr/bin/python3"
CONFIG = """\
engine = "vllm"

[defaults]
max_tokens = 32
[defaults.mlx]
max_tokens = 16
top_k = 5

[launch]
model = "/models/small"
python = "/usr/bin/python3"
env = { COMMON = "1" }
[launch.vllm]
max_model_len = 4096
env = { ONLY_VLLM = "1" }
[launch.mlx]
in_process = true
"""


@pytest.fixture
def config_file(tmp_path: Path) -> Path:
    path = tmp_path / "unillm.toml"
    path.write_text(CONFIG)
    return path


def test_only_the_configured_engines_tables_apply(config_file: Path) -> None:
    config = load_config(config_file, env={})
    assert config.launch == {
        "model": "/models/small",
        "python": PY,
        "max_model_len": 4096,
        "env": {"COMMON": "1", "ONLY_VLLM": "1"},
    }
    assert config.defaults == {"max_tokens": 32}


def test_changing_the_engine_line_picks_the_other_tables(config_file: Path) -> None:
    config_file.write_text(CONFIG.replace('engine = "vllm"', 'engine = "mlx"'))
    config = load_config(config_file, env={})
    assert config.launch == {
        "model": "/models/small",
        "python": PY,
        "in_process": True,
        "env": {"COMMON": "1"},
    }
    assert config.defaults == {"max_tokens": 16, "top_k": 5}


def test_keyword_overrides_win_and_merge_into_tables(config_file: Path) -> None:
    launch = from_config(
        config_file, env={}, engine="mlx", launch={"mlx": {"in_process": False}}, defaults={"max_tokens": 8}
    )
    assert isinstance(launch, Launch)
    assert launch.adapter.name == "mlx" and launch.spec.in_process is False
    assert launch.spec.model == "/models/small"
    assert dict(launch._connect.defaults or {}) == {"max_tokens": 8, "top_k": 5}


def test_overrides_win_over_the_environment(config_file: Path) -> None:
    config = load_config(config_file, env={"UNILLM_ENGINE": "mlx"}, engine="vllm")
    assert config.engine == "vllm"


def test_the_environment_reaches_an_engine_table(config_file: Path) -> None:
    config = load_config(config_file, env={"UNILLM_LAUNCH__VLLM__MAX_MODEL_LEN": "2048"})
    assert config.launch is not None and config.launch["max_model_len"] == 2048


def test_a_launch_table_only_for_another_engine_means_connect(tmp_path: Path) -> None:
    config = load_config(
        {"engine": "vllm", "base_url": "http://h:8000", "launch": {"mlx": {"model": "/m"}}}, env={}
    )
    assert config.launch is None and config.base_url == "http://h:8000"


def test_a_misspelt_engine_table_is_refused_with_a_hint() -> None:
    with pytest.raises(ConfigError, match=r"'vlm'.*did you mean 'vllm'"):
        load_config({"engine": "vllm", "launch": {"model": "/m", "vlm": {"dtype": "x"}}}, env={})


def test_an_unknown_override_is_refused() -> None:
    with pytest.raises(ConfigError, match="unknown config override"):
        from_config({"engine": "vllm", "base_url": "http://h:8000"}, env={}, max_tokens=3)


def test_cpu_true_in_a_launch_table_applies_the_recipe(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("UNILLM_CACHE", str(tmp_path))
    launch = unillm.from_config(
        {"engine": "vllm", "launch": {"model": "/m", "python": PY, "vllm": {"cpu": True}}}, env={}
    )
    assert isinstance(launch, Launch)
    assert launch.command().env["VLLM_CPU_KVCACHE_SPACE"] == "1"
