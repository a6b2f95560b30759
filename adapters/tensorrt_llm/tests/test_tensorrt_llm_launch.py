"""trtllm-serve launches: flags and the YAML options file (pure), refused without an NVIDIA driver
when the launch starts (never in ``--dry-run``), and a supervised launch of a stand-in
``trtllm-serve`` (tests/fake_trtllm_serve.py) that reads the file the core wrote next to it."""

from __future__ import annotations

import stat
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import SecretStr
from trtllm_protocol import SERVE_FLAGS
from unillm_tensorrt_llm import TensorRTLLMAdapter

from unillm import Launch, LaunchSpec
from unillm.adapter.launch_spec import LAUNCH_DIR, Parallel, Speculative
from unillm.errors import UnsupportedFeature
from unillm.launching import supervisor

ADAPTER = TensorRTLLMAdapter()


def command(**settings: Any) -> Any:
    return ADAPTER.command(LaunchSpec(model="/models/qwen", port=8000, api_key=None, **settings))


def options(**settings: Any) -> Any:
    (file,) = command(**settings).files
    return yaml.safe_load(file.text)


def test_the_flags_are_trtllm_serves() -> None:
    cmd = command(
        parallel=Parallel(tensor=2, pipeline=2, expert=True),
        max_num_seqs=8,
        max_model_len=4096,
        memory_fraction=0.8,
    )
    assert cmd.argv[:3] == ["trtllm-serve", "serve", "/models/qwen"]
    flags = [a for a in cmd.argv if a.startswith("--")]
    assert set(flags) <= SERVE_FLAGS
    for flag, value in [
        ("--tp_size", "2"),
        ("--pp_size", "2"),
        ("--ep_size", "2"),
        ("--max_batch_size", "8"),
        ("--max_seq_len", "4096"),
        ("--kv_cache_free_gpu_memory_fraction", "0.8"),
    ]:
        assert cmd.argv[cmd.argv.index(flag) + 1] == value


def test_the_options_file_is_written_next_to_the_command() -> None:
    cmd = command()
    assert (
        cmd.argv[cmd.argv.index("--extra_llm_api_options") + 1] == f"{LAUNCH_DIR}/extra_llm_api_options.yaml"
    )
    assert options() == {"guided_decoding_backend": "xgrammar", "enable_iter_perf_stats": True}


@pytest.mark.parametrize(
    ("speculative", "config"),
    [
        (
            Speculative(method="ngram", num_tokens=4, lookup_max=3),
            {"decoding_type": "NGram", "max_draft_len": 4, "max_matching_ngram_size": 3},
        ),
        (
            Speculative(method="draft", num_tokens=5, draft_model="/models/d"),
            {"decoding_type": "DraftTarget", "max_draft_len": 5, "speculative_model_dir": "/models/d"},
        ),
        (
            Speculative(method="eagle3", num_tokens=3, draft_model="/models/e"),
            {"decoding_type": "Eagle", "max_draft_len": 3, "speculative_model_dir": "/models/e"},
        ),
        (Speculative(method="mtp", num_tokens=1), {"decoding_type": "MTP", "num_nextn_predict_layers": 1}),
    ],
    ids=["ngram", "draft", "eagle3", "mtp"],
)
def test_speculative_decoding_is_rendered_into_the_yaml(
    speculative: Speculative, config: dict[str, Any]
) -> None:
    assert options(speculative=speculative)["speculative_config"] == config


def test_the_structured_backend_is_the_guided_decoding_backend() -> None:
    assert options(structured_backend="llguidance")["guided_decoding_backend"] == "llguidance"


def test_loras_prefix_reuse_and_dtype_are_rendered_into_the_yaml() -> None:
    sent = options(
        lora={"sql": "/a/sql", "poem": "/a/poem"},
        max_lora_rank=16,
        max_loras=2,
        prefix_caching=False,
        dtype="bfloat16",
    )
    assert sent["lora_config"] == {
        "lora_dir": ["/a/poem", "/a/sql"],
        "max_lora_rank": 16,
        "max_loras": 2,
        "max_cpu_loras": 2,
    }
    assert (sent["kv_cache_config"], sent["dtype"]) == ({"enable_block_reuse": False}, "bfloat16")


@pytest.mark.parametrize(
    ("settings", "feature"),
    [
        ({"speculative": Speculative(method="eagle", draft_model="/m")}, "speculative eagle"),
        ({"quantization": "awq"}, "quantization=awq"),
        ({"runtime_lora": True}, "loras.load/unload at runtime"),
        ({"parallel": Parallel(data=2)}, "data parallel"),
        ({"task": "embed"}, 'task="embed"'),
        ({"served_name": "tiny"}, "served_name"),
        ({"host": "0.0.0.0", "api_key": SecretStr("k" * 12)}, "api_key"),
    ],
)
def test_what_trtllm_serve_cannot_do_is_refused(settings: dict[str, Any], feature: str) -> None:
    spec = LaunchSpec.model_validate({"model": "/models/qwen", "api_key": None, **settings})
    with pytest.raises(UnsupportedFeature) as refused:
        ADAPTER.command(spec)
    assert (refused.value.feature, refused.value.engine) == (
        feature,
        "tensorrt_llm",
    ) and refused.value.alternative


def test_dry_run_renders_the_command_and_the_file_without_a_gpu(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from unillm.cli.main import main

    monkeypatch.setattr(supervisor, "nvidia_driver_present", lambda: False)
    assert (
        main(
            [
                "launch",
                "tensorrt_llm",
                "--model",
                "/models/qwen",
                "--port",
                "8000",
                "--python",
                "/venv/bin/python",
                "--dry-run",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out.splitlines()
    assert out[-1].startswith("/venv/bin/trtllm-serve serve /models/qwen --host 127.0.0.1 --port 8000")
    assert f"# {LAUNCH_DIR}/extra_llm_api_options.yaml:" in out
    assert '#     "guided_decoding_backend": "xgrammar",' in out


@pytest.mark.anyio
async def test_without_an_nvidia_driver_the_launch_is_refused_before_it_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(supervisor, "nvidia_driver_present", lambda: False)
    launch = Launch(
        ADAPTER,
        LaunchSpec(model="Qwen/Qwen2.5-0.5B-Instruct", python=sys.executable),
        progress=None,
        log_path=tmp_path / "l.log",
    )
    with pytest.raises(UnsupportedFeature) as refused:
        async with launch:
            pass
    assert "NVIDIA driver" in refused.value.feature and "--dry-run" in refused.value.why
    assert launch._process is None


@pytest.fixture
def serve_env(tmp_path: Path) -> str:
    """A fake engine env: ``<tmp>/env/bin/python`` names it; its ``trtllm-serve`` runs the stand-in."""
    script = Path(__file__).with_name("fake_trtllm_serve.py")
    exe = tmp_path / "env" / "bin" / "trtllm-serve"
    exe.parent.mkdir(parents=True)
    exe.write_text(f'#!/bin/sh\nexec {sys.executable} {script} "$@"\n')
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    return str(exe.with_name("python"))


@pytest.mark.anyio
async def test_the_engine_reads_the_options_file_the_core_wrote(
    serve_env: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(supervisor, "nvidia_driver_present", lambda: True)
    (tmp_path / "tiny").mkdir()
    spec = LaunchSpec(
        model=str(tmp_path / "tiny"),
        python=serve_env,
        speculative=Speculative(method="ngram", num_tokens=2),
        ready_timeout=30,
        api_key=None,
    )
    launch = Launch(ADAPTER, spec, progress=None, log_path=tmp_path / "trt.log")
    async with launch as llm:
        completion = await llm.generate("Hi", max_tokens=4)
        folder = launch._folder
        assert folder is not None and (Path(folder) / "extra_llm_api_options.yaml").is_file()
    assert completion.text == "Hello, world!"
    log = (tmp_path / "trt.log").read_text()
    assert "'speculative_config': {'decoding_type': 'NGram', 'max_draft_len': 2}" in log
    assert not Path(folder).exists()  # noqa: ASYNC240 (removed with the engine)
