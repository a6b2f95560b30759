"""The ``unillm`` command: ``engines`` and ``launch --dry-run`` (nothing is started)."""

from __future__ import annotations

import json
from typing import Any

import pytest

import unillm.api
from unillm.capabilities import Feature
from unillm.cli.main import main
from unillm.launching.cpu_features import BOOT_DIR, boot_note
from unillm.launching.supervisor import Launch

PY = "/usr/bin/python3"
GENERATED = "generated-key-0123456789"
ENTRY = f"{PY} -m vllm.entrypoints.openai.api_server"
DETAILS = "--enable-prompt-tokens-details"  # always on: Usage.cached_tokens
NOTE = f"# {boot_note()}\n"  # every engine process requests AMX tile state (a no-op without AMX)
BOOT = f"PYTHONPATH={BOOT_DIR}"


@pytest.fixture(autouse=True)
def _fixed_port_and_key(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make dry-run output deterministic: port 8000 and a known generated key."""
    monkeypatch.setattr("unillm.launching.supervisor.free_port", lambda host="127.0.0.1": 8000)
    monkeypatch.setattr("unillm.launching.supervisor.secrets.token_urlsafe", lambda n=None: GENERATED)
    monkeypatch.delenv("PYTHONPATH", raising=False)


def dry_run(*args: str) -> list[str]:
    return ["launch", "vllm", "--model", "M", "--dry-run", "--python", PY, *args]


# -- engines ---------------------------------------------------------------------------------


def test_engines_prints_a_table_with_vllm_and_every_feature(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["engines"]) == 0
    out = capsys.readouterr().out
    header = out.splitlines()[0].split()
    assert header[0] == "feature"
    assert "vLLM" in header
    for feature in Feature:
        assert feature.value in out


def test_engines_table_marks_native_support_with_yes(capsys: pytest.CaptureFixture[str]) -> None:
    main(["engines"])
    lines = capsys.readouterr().out.splitlines()
    [regex] = [line for line in lines if line.startswith(Feature.REGEX.value)]
    assert regex.split()[-1] == "yes"


def test_engines_json_is_valid_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["engines", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert "vllm" in data
    assert set(data["vllm"]) == {f.value for f in Feature}
    assert data["vllm"][Feature.JSON_SCHEMA.value] == {"level": "native", "why": "", "alternative": ""}


# -- launch --dry-run ----------------------------------------------------------------------------


def test_dry_run_prints_the_exact_command_with_the_key_masked(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code = main(dry_run("--max-model-len", "512", "--lora", "a=/x", "--", "--enforce-eager"))
    out, err = capsys.readouterr()
    assert code == 0
    assert out == NOTE + (
        f"{BOOT} VLLM_API_KEY=*** {ENTRY} --model M --host 127.0.0.1 {DETAILS} --port 8000 "
        "--max-model-len 512 --enable-lora --lora-modules a=/x --enforce-eager\n"
    )
    assert GENERATED not in out + err


def test_dry_run_never_prints_an_explicit_key(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(dry_run("--api-key", "sk-cli-secret-42")) == 0
    out, err = capsys.readouterr()
    assert "sk-cli-secret-42" not in out + err
    assert out == f"{NOTE}{BOOT} VLLM_API_KEY=*** {ENTRY} --model M --host 127.0.0.1 {DETAILS} --port 8000\n"


def test_dry_run_with_api_key_none_has_no_key(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(dry_run("--api-key", "none")) == 0
    assert (
        capsys.readouterr().out == f"{NOTE}{BOOT} {ENTRY} --model M --host 127.0.0.1 {DETAILS} --port 8000\n"
    )


def test_default_api_key_is_generated_not_the_word_auto(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    launches: list[Launch] = []
    real = unillm.api.launch

    def spy(*args: Any, **kwargs: Any) -> Launch:
        launches.append(real(*args, **kwargs))
        return launches[-1]

    monkeypatch.setattr(unillm.api, "launch", spy)
    assert main(dry_run()) == 0
    [run] = launches
    assert run.spec.key() == GENERATED
    assert run.command().env["VLLM_API_KEY"] == GENERATED


def test_dry_run_maps_every_flag(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(
        dry_run(
            "--api-key",
            "none",
            "--port",
            "9000",
            "--host",
            "0.0.0.0",
            "--served-name",
            "tiny",
            "--dtype",
            "bfloat16",
            "--max-num-seqs",
            "8",
            "--memory-fraction",
            "0.5",
            "--quantization",
            "awq",
            "--tensor-parallel",
            "2",
            "--pipeline-parallel",
            "2",
            "--data-parallel",
            "2",
            "--expert-parallel",
            "--no-prefix-caching",
            "--lora",
            "a=/x",
            "--lora",
            "b=/y",
            "--max-lora-rank",
            "16",
            "--max-loras",
            "2",
            "--runtime-lora",
            "--speculative",
            "ngram",
            "--speculative-tokens",
            "3",
            "--env",
            "FOO=bar",
        )
    )
    assert code == 0
    assert capsys.readouterr().out == NOTE + (
        f"FOO=bar {BOOT} VLLM_ALLOW_RUNTIME_LORA_UPDATING=True "
        f"{ENTRY} --model M --host 0.0.0.0 {DETAILS} --port 9000 --served-model-name tiny "
        "--tensor-parallel-size 2 --pipeline-parallel-size 2 --data-parallel-size 2 "
        "--enable-expert-parallel --dtype bfloat16 --max-num-seqs 8 "
        "--gpu-memory-utilization 0.5 --quantization awq --no-enable-prefix-caching "
        "--enable-lora --lora-modules a=/x b=/y --max-lora-rank 16 --max-loras 2 "
        "--speculative-config "
        """'{"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 3}'\n"""
    )


def test_dry_run_maps_the_admission_flags(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(dry_run("--api-key", "none", "--scheduling", "priority", "--max-queued-requests", "8")) == 0
    assert "--max-num-queued-reqs 8 --scheduling-policy priority" in capsys.readouterr().out


def test_dry_run_with_draft_model(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(dry_run("--api-key", "none", "--speculative", "draft", "--draft-model", "/models/d")) == 0
    out = capsys.readouterr().out
    config = """'{"method": "draft_model", "num_speculative_tokens": 4, "model": "/models/d"}'"""
    assert config in out


@pytest.mark.parametrize("value", ["a", "=/x", "a:/x"])
def test_bad_lora_value_exits_2_with_a_message(
    value: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(dry_run("--lora", value)) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert "--lora" in err
    assert repr(value) in err


def test_bad_env_value_exits_2_with_a_message(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(dry_run("--env", "NOVALUE")) == 2
    assert "--env" in capsys.readouterr().err


def test_bad_launch_setting_exits_2_with_a_message(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(dry_run("--max-model-len", "long")) == 2
    assert "max_model_len" in capsys.readouterr().err


@pytest.mark.parametrize(
    "args",
    [
        ("--speculative", "draft"),  # draft needs --draft-model
        ("--speculative", "medusa"),  # unknown method
        ("--speculative", "ngram", "--speculative-tokens", "0"),
        ("--tensor-parallel", "0"),
    ],
)
def test_bad_speculative_or_parallel_setting_exits_2_with_a_message(
    args: tuple[str, ...],
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(dry_run(*args)) == 2
    assert "unillm:" in capsys.readouterr().err


def test_unknown_engine_exits_2_with_a_message(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["launch", "nope", "--model", "M", "--dry-run", "--python", PY]) == 2
    err = capsys.readouterr().err
    assert "UnknownEngine" in err
    assert "nope" in err


def test_launch_without_model_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["launch", "vllm", "--dry-run"])
    assert info.value.code == 2
    assert "--model" in capsys.readouterr().err


def test_no_command_is_a_usage_error() -> None:
    with pytest.raises(SystemExit) as info:
        main([])
    assert info.value.code == 2


# -- launch --config ------------------------------------------------------------------------


def write_config(tmp_path: Any, text: str) -> str:
    path = tmp_path / "unillm.toml"
    path.write_text(text)
    return str(path)


REPLICAS = f'engine = "vllm"\n[launch]\nmodel = "M"\npython = "{PY}"\nreplicas = 2\nport = 9000\n'


def test_launch_config_dry_run_prints_each_replica_of_the_file(
    tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["launch", "--config", write_config(tmp_path, REPLICAS), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert out.count(ENTRY) == 2
    assert "--port 9000" in out and "--port 9001" in out


def test_launch_config_with_flags_too_is_refused_naming_them(
    tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config(tmp_path, REPLICAS)
    assert main(["launch", "--config", config, "--dry-run", "--max-num-seqs", "4", "--cpu"]) == 2
    err = capsys.readouterr().err
    assert "--cpu" in err and "--max-num-seqs" in err and "[launch]" in err


@pytest.mark.parametrize(
    ("text", "why"),
    [
        (
            'engine = "vllm"\nbase_url = "http://127.0.0.1:8000"\n',
            "needs a [launch] table",
        ),  # running engines
        ('engine = "vllm"\n[launch]\nmodel = "M"\nreplicas = 0\n', "replicas"),  # does not validate
    ],
)
def test_a_launch_config_that_cannot_launch_exits_2_saying_why(
    tmp_path: Any, capsys: pytest.CaptureFixture[str], text: str, why: str
) -> None:
    assert main(["launch", "--config", write_config(tmp_path, text), "--dry-run"]) == 2
    assert why in capsys.readouterr().err


def test_dry_run_says_which_cores_the_engine_runs_on(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(dry_run("--api-key", "none", "--cpus", "0-1,3")) == 0
    assert "runs on CPU cores 0,1,3 only" in capsys.readouterr().out
    for bad in ("a", "3-1", "0,,1"):
        assert main(dry_run("--cpus", bad)) == 2
    assert "give core numbers and ranges" in capsys.readouterr().err


def test_a_cache_aware_fleet_says_why_it_routes_by_its_tree(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(dry_run("--replicas", "2", "--policy", "cache_aware")) == 0
    captured = capsys.readouterr()
    assert "cache_aware: KV-cache events not used (no tokenizer.json in M" in captured.err
    assert "--kv-events-config" not in captured.out
