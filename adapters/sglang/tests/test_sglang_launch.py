"""Golden tests of SGLang launch commands, from the unified LaunchSpec (nothing is started)."""

from __future__ import annotations

import re
import subprocess
import sys
from typing import Any

import pytest
from pydantic import SecretStr
from unillm_sglang import SGLangAdapter

from unillm.adapter.launch_spec import LaunchSpec, Parallel, Speculative
from unillm.errors import InvalidOptions, UnsupportedFeature

ADAPTER = SGLangAdapter()
BASE = [
    "python",
    "-m",
    "sglang.launch_server",
    "--model-path",
    "/m",
    "--host",
    "127.0.0.1",
    "--enable-metrics",
    "--enable-cache-report",
]


def argv_of(**settings: Any) -> list[str]:
    return ADAPTER.command(LaunchSpec(model="/m", api_key=None, **settings)).argv


def tail_of(**settings: Any) -> list[str]:
    argv = argv_of(**settings)
    assert argv[: len(BASE)] == BASE
    return argv[len(BASE) :]


def test_minimal_command() -> None:
    command = ADAPTER.command(LaunchSpec(model="/m", api_key=None))
    assert command.argv == BASE
    assert command.env == {} and command.health_path == "/health"


@pytest.mark.parametrize(
    ("settings", "flags"),
    [
        ({"port": 30000}, ["--port", "30000"]),
        ({"served_name": "tiny"}, ["--served-model-name", "tiny"]),
        ({"parallel": Parallel(tensor=4)}, ["--tp-size", "4"]),
        ({"parallel": Parallel(pipeline=2)}, ["--pp-size", "2"]),
        ({"parallel": Parallel(data=2)}, ["--dp-size", "2"]),
        ({"parallel": Parallel(tensor=8, expert=True)}, ["--tp-size", "8", "--ep-size", "8"]),
        ({"dtype": "bfloat16"}, ["--dtype", "bfloat16"]),
        ({"max_model_len": 4096}, ["--context-length", "4096"]),
        ({"max_num_seqs": 32}, ["--max-running-requests", "32"]),
        ({"memory_fraction": 0.8}, ["--mem-fraction-static", "0.8"]),
        ({"quantization": "fp8"}, ["--quantization", "fp8"]),
        ({"prefix_caching": False}, ["--disable-radix-cache"]),
        ({"prefix_caching": True}, []),  # RadixAttention is on by default
        ({"extra_args": ["--device", "cpu"]}, ["--device", "cpu"]),
    ],
)
def test_launch_setting_maps_to_sglang_flag(settings: dict[str, Any], flags: list[str]) -> None:
    assert tail_of(**settings) == flags


def test_python_of_the_engine_env_runs_the_module() -> None:
    assert argv_of(python="/envs/sglang/bin/python")[:3] == [
        "/envs/sglang/bin/python",
        "-m",
        "sglang.launch_server",
    ]


def test_expert_parallel_needs_tensor_parallel_ranks() -> None:
    with pytest.raises(InvalidOptions, match="tensor"):
        argv_of(parallel=Parallel(expert=True))


# -- LoRA ------------------------------------------------------------------------------------


def test_lora_paths_and_limits() -> None:
    assert tail_of(lora={"sql": "/a/sql", "poem": "/a/poem"}, max_lora_rank=16, max_loras=4) == [
        "--enable-lora",
        "--lora-paths",
        "sql=/a/sql",
        "poem=/a/poem",
        "--max-lora-rank",
        "16",
        "--max-loras-per-batch",
        "4",
    ]


def test_runtime_lora_without_adapters_reserves_all_modules_at_the_given_rank() -> None:
    assert tail_of(runtime_lora=True, max_lora_rank=8) == [
        "--enable-lora",
        "--lora-target-modules",
        "all",
        "--max-lora-rank",
        "8",
    ]


def test_runtime_lora_without_adapters_needs_a_rank() -> None:
    with pytest.raises(InvalidOptions, match="max_lora_rank"):
        argv_of(runtime_lora=True)


def test_runtime_lora_with_adapters_infers_shapes_from_them() -> None:
    assert tail_of(runtime_lora=True, lora={"sql": "/a"}) == ["--enable-lora", "--lora-paths", "sql=/a"]


def test_lora_limits_without_lora_are_refused() -> None:
    with pytest.raises(InvalidOptions, match="lora"):
        argv_of(max_lora_rank=8)


# -- speculative decoding --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("speculative", "flags"),
    [
        (
            Speculative(method="ngram", num_tokens=4),
            ["--speculative-algorithm", "NGRAM", "--speculative-num-draft-tokens", "4"],
        ),
        (
            Speculative(method="eagle", num_tokens=3, draft_model="/d/eagle"),
            [
                "--speculative-algorithm",
                "EAGLE",
                "--speculative-draft-model-path",
                "/d/eagle",
                "--speculative-num-steps",
                "3",
                "--speculative-eagle-topk",
                "1",
                "--speculative-num-draft-tokens",
                "4",
            ],
        ),
        (
            Speculative(method="eagle3", num_tokens=5, draft_model="/d/e3"),
            [
                "--speculative-algorithm",
                "EAGLE3",
                "--speculative-draft-model-path",
                "/d/e3",
                "--speculative-num-steps",
                "5",
                "--speculative-eagle-topk",
                "1",
                "--speculative-num-draft-tokens",
                "6",
            ],
        ),
        (
            Speculative(method="draft", num_tokens=2, draft_model="/d/small"),
            [
                "--speculative-algorithm",
                "STANDALONE",
                "--speculative-draft-model-path",
                "/d/small",
                "--speculative-num-steps",
                "2",
                "--speculative-eagle-topk",
                "1",
                "--speculative-num-draft-tokens",
                "3",
            ],
        ),
        (
            Speculative(method="mtp", num_tokens=1),
            [
                "--speculative-algorithm",
                "NEXTN",
                "--speculative-num-steps",
                "1",
                "--speculative-eagle-topk",
                "1",
                "--speculative-num-draft-tokens",
                "2",
            ],
        ),
    ],
)
def test_speculative_method_maps_to_sglang_algorithm(speculative: Speculative, flags: list[str]) -> None:
    assert tail_of(speculative=speculative) == flags


def test_suffix_decoding_is_refused() -> None:
    with pytest.raises(UnsupportedFeature, match="suffix"):
        argv_of(speculative=Speculative(method="suffix"))


def test_ngram_lookup_window_is_refused_with_the_sglang_knob() -> None:
    with pytest.raises(UnsupportedFeature, match="trie"):
        argv_of(speculative=Speculative(method="ngram", lookup_max=4))


# -- API key -------------------------------------------------------------------------------


def test_api_key_goes_in_argv_and_is_masked_when_rendered() -> None:
    command = ADAPTER.command(LaunchSpec(model="/m", api_key=SecretStr("s3cret-key")))
    assert command.argv[-1] == "--api-key=s3cret-key"  # SGLang reads no env variable for it
    assert command.secrets == ("s3cret-key",)
    assert "s3cret-key" not in command.render() and "--api-key=***" in command.render()


def test_a_key_starting_with_a_dash_stays_one_argument() -> None:  # generated keys may
    command = ADAPTER.command(LaunchSpec(model="/m", api_key=SecretStr("-Xy_z")))
    assert command.argv[-1] == "--api-key=-Xy_z"


def test_cli_dry_run_prints_the_exact_command() -> None:
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "unillm.cli",
            "launch",
            "sglang",
            "--model",
            "/m",
            "--python",
            "py",
            "--port",
            "30000",
            "--tensor-parallel",
            "2",
            "--max-model-len",
            "2048",
            "--lora",
            "sql=/a/sql",
            "--speculative",
            "ngram",
            "--api-key",
            "k-123",
            "--dry-run",
            "--",
            "--device",
            "cpu",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    note, command = out.split("\n", 1)
    assert note.startswith("# unillm/launching/_boot on PYTHONPATH requests AMX")
    assert re.sub(r"PYTHONPATH=\S+ ", "", command) == (
        "py -m sglang.launch_server --model-path /m --host 127.0.0.1 --enable-metrics --enable-cache-report "
        "--port 30000 --tp-size 2 --context-length 2048 --enable-lora --lora-paths sql=/a/sql "
        "--speculative-algorithm NGRAM --speculative-num-draft-tokens 4 --api-key=*** "
        "--device cpu"
    )


def test_setup_installs_the_cuda_runtime_on_gpu_machines() -> None:
    assert ADAPTER.install(gpu=True).packages == ("sglang",)


def test_setup_on_a_cpu_machine_says_the_cpu_build_is_not_on_pypi() -> None:
    with pytest.raises(UnsupportedFeature, match="CPU kernel build is not on PyPI"):
        ADAPTER.install(gpu=False)
