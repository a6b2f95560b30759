"""A LoRA name never becomes an engine flag: names that start with '-' or hold '=', ',' or white
space are refused before anything starts or is sent, from Python, config and the CLI alike."""

from __future__ import annotations

from pathlib import Path

import pytest
from fake_adapter import FakeAdapter

import unillm
from unillm.cli.main import main
from unillm.config.load import from_config
from unillm.testing.fault_server import FaultServer

BAD = ["--allowed-local-media-path", "-x", "a=b", "a,b", "a b", "tab\tname", "", " "]


@pytest.mark.parametrize("name", BAD)
@pytest.mark.parametrize("engine", ["vllm", "sglang", "tgi", "mlx", "llamacpp"])
def test_a_launch_refuses_a_lora_name_that_could_be_read_as_a_flag(engine: str, name: str) -> None:
    with pytest.raises(unillm.InvalidOptions, match="LoRA name"):
        unillm.launch(engine, model="/m", lora={name: "/"}, python="/usr/bin/python3")


def test_a_plain_lora_name_still_launches() -> None:
    launch = unillm.launch("vllm", model="/m", lora={"sql-v2.1/x_y": "/a"}, python="/usr/bin/python3")
    assert "sql-v2.1/x_y=/a" in launch.command().argv


def test_the_cli_refuses_a_flag_as_lora_name(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["launch", "vllm", "--model", "M", "--lora=--allowed-local-media-path=/", "--dry-run"])
    out, err = capsys.readouterr()
    assert code == 2 and "LoRA name" in err and "--allowed-local-media-path" not in out


def test_config_refuses_a_flag_as_lora_name(tmp_path: Path) -> None:
    config = tmp_path / "unillm.toml"
    config.write_text('engine = "vllm"\n[launch]\nmodel = "/m"\n[launch.lora]\n"--x" = "/"\n')
    with pytest.raises(unillm.UnillmError, match="LoRA name"):
        from_config(config, env={})


@pytest.mark.anyio
@pytest.mark.parametrize("name", ["-x", "a=b", "a b"])
async def test_runtime_loading_and_requests_refuse_such_names_before_sending(name: str) -> None:
    with FaultServer(runtime_lora=True) as server:
        async with unillm.LLM(FakeAdapter(), server.url) as llm:
            with pytest.raises(unillm.InvalidOptions, match="LoRA name"):
                await llm.loras.load(name, "/a")
            with pytest.raises(unillm.InvalidOptions, match="LoRA name"):
                await llm.generate("hi", lora=name)
        assert server.count() == 0
