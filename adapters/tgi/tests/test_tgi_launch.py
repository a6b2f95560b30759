"""Golden tests of TGI launch commands (launcher and container forms), and supervision of the
launcher form through unillm's Launch with a stand-in launcher on PATH."""

from __future__ import annotations

import os
import stat
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr
from unillm_tgi import Runtime, TGIAdapter, detect_runtime
from unillm_tgi.launch import IMAGE, command

import unillm
from unillm.adapter.launch_spec import LaunchSpec, Parallel, Speculative
from unillm.adapter.registry import get_adapter
from unillm.errors import UnknownLora, UnsupportedFeature
from unillm.launching.supervisor import Launch

KEY = "s3cret-key"
SPEC = LaunchSpec(
    model="/models/llama",
    host="127.0.0.1",
    port=8080,
    api_key=SecretStr(KEY),
    parallel=Parallel(tensor=2),
    dtype="bfloat16",
    max_model_len=4096,
    max_num_seqs=32,
    memory_fraction=0.9,
    prefix_caching=False,
    lora={"sql": "/adapters/sql", "org/poem": "org/poem"},
    speculative=Speculative(method="ngram", num_tokens=3),
    env={"HF_HUB_OFFLINE": "1"},
    extra_args=["--trust-remote-code"],
)
ENGINE_ARGS = [
    "--num-shard",
    "2",
    "--dtype",
    "bfloat16",
    "--max-input-tokens",
    "4095",
    "--max-total-tokens",
    "4096",
    "--max-batch-size",
    "32",
    "--cuda-memory-fraction",
    "0.9",
    "--lora-adapters",
    "sql=/adapters/sql,org/poem",
    "--speculate",
    "3",
]
ENV = {"API_KEY": KEY, "PREFIX_CACHING": "0"}


def runtime(name: str, **kw: object) -> Runtime:
    return Runtime(name=name, cache_dir="/hf-cache", **kw)  # type: ignore[arg-type]


#: The golden argv of each form for SPEC: the launcher itself, and TGI's image under docker.
FORMS = {
    "launcher": [
        "text-generation-launcher",
        "--model-id",
        "/models/llama",
        "--hostname",
        "127.0.0.1",
        "--port",
        "8080",
        *ENGINE_ARGS,
        "--shard-uds-path",
        "/tmp/unillm-tgi-8080",
        "--prometheus-port",
        "0",
        "--trust-remote-code",
    ],
    "docker": [
        "docker",
        "run",
        "--rm",
        "--name",
        "unillm-tgi-8080",
        "--gpus",
        "all",
        "--shm-size",
        "1g",
        "-p",
        "127.0.0.1:8080:80",
        "-v",
        "/hf-cache:/data",
        "-v",
        "/models/llama:/models/llama:ro",
        "-v",
        "/adapters/sql:/adapters/sql:ro",
        "-e",
        "HF_TOKEN",
        "-e",
        "API_KEY",
        "-e",
        "PREFIX_CACHING",
        "-e",
        "HF_HUB_OFFLINE",
        IMAGE,
        "--model-id",
        "/models/llama",
        "--hostname",
        "0.0.0.0",
        "--port",
        "80",
        *ENGINE_ARGS,
        "--trust-remote-code",
    ],
}


@pytest.mark.parametrize("form", FORMS)
def test_launcher_and_docker_golden_forms(form: str) -> None:
    cmd = command(SPEC, runtime(form))
    assert cmd.argv == FORMS[form]
    assert cmd.env == ENV and cmd.health_path == "/health" and cmd.secrets == (KEY,)


def test_podman_form_uses_cdi_gpus_and_a_custom_image() -> None:
    spec = LaunchSpec(model="Qwen/Qwen2.5-0.5B-Instruct", port=9000, api_key=None)
    cmd = command(
        spec,
        runtime(
            "podman", image="ghcr.io/huggingface/text-generation-inference:3.3.4", gpus="0,1", shm_size="2g"
        ),
    )
    assert cmd.argv == [
        "podman",
        "run",
        "--rm",
        "--name",
        "unillm-tgi-9000",
        "--device",
        "nvidia.com/gpu=0,1",
        "--shm-size",
        "2g",
        "-p",
        "127.0.0.1:9000:80",
        "-v",
        "/hf-cache:/data",
        "-e",
        "HF_TOKEN",
        "ghcr.io/huggingface/text-generation-inference:3.3.4",
        "--model-id",
        "Qwen/Qwen2.5-0.5B-Instruct",
        "--hostname",
        "0.0.0.0",
        "--port",
        "80",
    ]
    assert cmd.env == {} and cmd.secrets == ()


def test_container_without_gpus_has_no_gpu_flags() -> None:
    cmd = command(LaunchSpec(model="m", port=1, api_key=None), runtime("docker", gpus=None))
    assert "--gpus" not in cmd.argv and "--device" not in cmd.argv


def test_the_api_key_is_in_the_environment_and_masked_never_in_argv() -> None:
    for name in ("launcher", "docker", "podman"):
        cmd = command(SPEC, runtime(name))
        assert KEY not in " ".join(cmd.argv)
        assert KEY not in cmd.render() and "API_KEY=***" in cmd.render()


@pytest.mark.parametrize(
    ("dtype", "flag"), [("float16", "float16"), ("half", "float16"), ("bf16", "bfloat16"), ("auto", None)]
)
def test_dtype_names_map_to_tgis(dtype: str, flag: str | None) -> None:
    argv = command(LaunchSpec(model="m", port=1, dtype=dtype, api_key=None), runtime("launcher")).argv
    assert (argv[argv.index("--dtype") + 1] if "--dtype" in argv else None) == flag


@pytest.mark.parametrize(
    ("settings", "feature"),
    [
        ({"parallel": Parallel(pipeline=2)}, "pipeline parallel"),
        ({"parallel": Parallel(data=2)}, "data parallel"),
        ({"parallel": Parallel(expert=True)}, "expert parallel"),
        ({"speculative": Speculative(method="draft", draft_model="/d")}, "speculative draft"),
        ({"speculative": Speculative(method="eagle3", draft_model="/d")}, "speculative eagle3"),
        ({"speculative": Speculative(method="mtp")}, "speculative mtp"),
        ({"speculative": Speculative(method="ngram", lookup_max=4)}, "lookup_max"),
        ({"runtime_lora": True}, "loras.load/unload"),
        ({"max_lora_rank": 16}, "max_lora_rank"),
        ({"dtype": "float32"}, "dtype=float32"),
        ({"dtype": "bfloat16", "quantization": "awq"}, "dtype together with quantization"),
        ({"quantization": "int4"}, "quantization=int4"),
        ({"lora": {"sql": "org/sql-adapter"}}, "LoRA name"),
    ],
)
def test_what_tgi_cannot_do_at_launch_is_refused(settings: dict[str, Any], feature: str) -> None:
    spec = LaunchSpec(model="m", port=1, api_key=None, **settings)
    with pytest.raises(UnsupportedFeature) as caught:
        command(spec, runtime("launcher"))
    assert feature in caught.value.feature and caught.value.engine == "tgi"


def test_runtime_detection_prefers_the_launcher_then_docker_then_podman() -> None:
    def which(*found: str) -> object:
        return lambda name: f"/bin/{name}" if name in found else None

    assert detect_runtime(which("text-generation-launcher", "docker"), {}) == "launcher"  # type: ignore[arg-type]
    assert detect_runtime(which("docker", "podman"), {}) == "docker"  # type: ignore[arg-type]
    assert detect_runtime(which("podman"), {}) == "podman"  # type: ignore[arg-type]
    assert detect_runtime(which(), {}) == "launcher"  # type: ignore[arg-type]
    assert detect_runtime(which("docker"), {"UNILLM_TGI_RUNTIME": "podman"}) == "podman"  # type: ignore[arg-type]


def test_the_adapter_uses_its_runtime_setting() -> None:
    adapter = TGIAdapter(runtime="podman", cache_dir="/hf-cache")
    assert adapter.command(LaunchSpec(model="m", port=5, api_key=None)).argv[0] == "podman"


@pytest.fixture
def tgi_runtime_docker(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The registered adapter, re-created with ``$UNILLM_TGI_RUNTIME=docker``."""
    monkeypatch.setenv("UNILLM_TGI_RUNTIME", "docker")
    get_adapter.cache_clear()
    yield
    get_adapter.cache_clear()


@pytest.mark.usefixtures("tgi_runtime_docker")
def test_cli_dry_run_prints_the_exact_command(capsys: pytest.CaptureFixture[str]) -> None:
    from unillm.cli.main import main

    code = main(
        [
            "launch",
            "tgi",
            "--model",
            "/models/m",
            "--port",
            "8081",
            "--tensor-parallel",
            "2",
            "--api-key",
            KEY,
            "--dry-run",
        ]
    )
    out = capsys.readouterr().out
    assert code == 0 and out.startswith("API_KEY=*** docker run --rm --name unillm-tgi-8081")
    assert "--num-shard 2" in out and KEY not in out


@pytest.mark.usefixtures("tgi_runtime_docker")
def test_unillm_launch_shows_the_container_command() -> None:
    cmd = unillm.launch("tgi", model="/models/m", port=8082, api_key=None).command()
    assert cmd.argv[:2] == ["docker", "run"] and "-p" in cmd.argv


# -- supervision of the launcher form -----------------------------------------------------------
@pytest.fixture
def launcher_on_path(tmp_path: Path) -> str:
    """A directory whose ``text-generation-launcher`` runs the stand-in (tests/fake_tgi_launcher.py)."""
    script = Path(__file__).with_name("fake_tgi_launcher.py")
    exe = tmp_path / "text-generation-launcher"
    exe.write_text(f'#!/bin/sh\nexec {sys.executable} {script} "$@"\n')
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    return f"{tmp_path}{os.pathsep}{os.environ.get('PATH', '')}"


@pytest.mark.anyio
async def test_launch_supervises_the_launcher_process(launcher_on_path: str, tmp_path: Path) -> None:
    spec = LaunchSpec(
        model="tiny-llama",
        served_name="tiny",
        max_model_len=128,
        lora={"sql": "/adapters/sql"},
        env={"PATH": launcher_on_path},
        ready_timeout=60,
    )
    launch = Launch(
        TGIAdapter(runtime="launcher", cache_dir="/unused"),
        spec,
        progress=None,
        log_path=tmp_path / "tgi.log",
    )
    async with launch as llm:
        assert launch.spec.key()  # an API key was generated and the server enforces it
        r = await llm.generate("Hi", max_tokens=3)
        assert r.engine == "tgi" and r.usage.prompt_tokens == 2 and r.finish_reason == "length"
        assert r.model == "tiny"  # served_name: TGI has no such flag, unillm reports it
        with pytest.raises(UnknownLora, match="not given at launch"):
            await llm.generate("Hi", lora="poem")  # TGI would answer with the base model
        process = launch._process
        assert process is not None and process.poll() is None
    assert process.poll() is not None  # torn down with its process group
    assert "Connected on 127.0.0.1" in (tmp_path / "tgi.log").read_text()
