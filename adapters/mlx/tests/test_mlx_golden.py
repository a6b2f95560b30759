"""MLXAdapter as a pure translation table: launch commands, request bodies, answers and errors.

Wire fixtures in data/ were recorded from a real mlx_lm.server 0.32.2 on this machine.
"""

from __future__ import annotations

import json
import re
import shlex
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
from unillm_mlx import IN_PROCESS_SUFFIX, SERVER_MAIN, MLXAdapter

import unillm
from unillm.adapter.base import EngineInfo
from unillm.adapter.launch_spec import LaunchSpec, Parallel, Speculative
from unillm.adapter.registry import get_adapter
from unillm.capabilities import Feature, check
from unillm.cli.main import main
from unillm.options import OutputSpec, make_request

DATA = Path(__file__).parent / "data"
SERVER = EngineInfo(engine="mlx", model="default_model", version=None)
INPROC = EngineInfo(engine="mlx", model="/m", version="0.32.2" + IN_PROCESS_SUFFIX)


def req(
    prompt: str | None = "hi", output: OutputSpec | None = None, stream: bool = False, **options: Any
) -> Any:
    messages = None if prompt is not None else [{"role": "user", "content": "hi"}]
    return make_request(prompt, messages, output, options, stream=stream)


# -- launch ------------------------------------------------------------------------------------
def test_mlx_command_launches_mlx_lm_server_offline_for_a_local_model() -> None:
    cmd = MLXAdapter().command(
        LaunchSpec(model="/models/tiny", port=8080, python="/env/bin/python", api_key=None)
    )
    assert cmd.argv == [
        "/env/bin/python",
        "-c",
        SERVER_MAIN,
        "--model",
        "/models/tiny",
        "--host",
        "127.0.0.1",
        "--port",
        "8080",
    ]
    assert cmd.env == {"HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": "/models/tiny"}
    assert cmd.health_path == "/health"


def test_mlx_command_leaves_the_hub_online_for_a_hub_model() -> None:
    cmd = MLXAdapter().command(LaunchSpec(model="mlx-community/Qwen3-0.6B-4bit", api_key=None))
    assert cmd.env == {}


def test_mlx_command_speculates_with_a_draft_model_and_no_prompt_cache() -> None:
    spec = LaunchSpec(
        model="/m", api_key=None, speculative=Speculative(method="draft", draft_model="/d", num_tokens=5)
    )
    argv = MLXAdapter().command(spec).argv
    assert argv[-6:] == ["--draft-model", "/d", "--num-draft-tokens", "5", "--prompt-cache-size", "0"]


def test_mlx_command_maps_prefix_caching_off_and_max_num_seqs() -> None:
    argv = (
        MLXAdapter()
        .command(
            LaunchSpec(
                model="/m",
                api_key=None,
                prefix_caching=False,
                max_num_seqs=4,
                extra_args=["--log-level", "DEBUG"],
            )
        )
        .argv
    )
    assert argv[-6:] == ["--decode-concurrency", "4", "--prompt-cache-size", "0", "--log-level", "DEBUG"]


def test_mlx_command_names_no_lora_at_launch_because_requests_carry_the_path() -> None:
    argv = MLXAdapter().command(LaunchSpec(model="/m", api_key=None, lora={"sql": "/a/sql"})).argv
    assert "--adapter-path" not in argv


@pytest.mark.parametrize(
    ("settings", "feature"),
    [
        ({"parallel": Parallel(tensor=2)}, "parallel"),
        ({"speculative": Speculative(method="ngram", num_tokens=3)}, "speculative method 'ngram'"),
        ({"quantization": "awq"}, "quantization"),
        ({"dtype": "bfloat16"}, "dtype"),
        ({"served_name": "tiny"}, "served_name"),
        ({"max_model_len": 512}, "max_model_len"),
        ({"memory_fraction": 0.5}, "memory_fraction"),
        ({"max_lora_rank": 8}, "max_lora_rank"),
        ({"runtime_lora": True}, "runtime_lora"),
        ({"host": "0.0.0.0", "api_key": "secret"}, "api_key"),
        (
            {"speculative": Speculative(method="draft", draft_model="/d"), "prefix_caching": True},
            "prefix_caching with a draft model",
        ),
    ],
)
def test_mlx_command_refuses_settings_mlx_lm_server_lacks(settings: dict[str, Any], feature: str) -> None:
    with pytest.raises(unillm.UnsupportedFeature) as e:
        MLXAdapter().command(LaunchSpec(model="/m", **settings))
    assert e.value.feature == feature and e.value.engine == "mlx"


def test_mlx_launch_dry_run_prints_the_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        main(
            [
                "launch",
                "mlx",
                "--model",
                "/models/tiny",
                "--port",
                "8123",
                "--api-key",
                "none",
                "--python",
                "/env/bin/python",
                "--speculative",
                "draft",
                "--draft-model",
                "/d",
                "--speculative-tokens",
                "2",
                "--dry-run",
            ]
        )
        == 0
    )
    note, command = capsys.readouterr().out.strip().split("\n", 1)
    assert note.startswith("# unillm/launching/_boot on PYTHONPATH requests AMX")
    assert re.sub(r"PYTHONPATH=\S+ ", "", command) == (
        "HF_HUB_CACHE=/models/tiny HF_HUB_OFFLINE=1 /env/bin/python -c "
        f"{shlex.quote(SERVER_MAIN)} --model /models/tiny --host 127.0.0.1 --port 8123 "
        "--draft-model /d --num-draft-tokens 2 "
        "--prompt-cache-size 0"
    )


def test_mlx_install_picks_the_mlx_build_for_the_platform(monkeypatch: pytest.MonkeyPatch) -> None:
    adapter = MLXAdapter()
    monkeypatch.setattr(sys, "platform", "linux")
    assert adapter.install(gpu=False).packages[0] == "mlx[cpu]==0.32.4"
    assert adapter.install(gpu=True).packages[0] == "mlx[cuda]==0.32.4"
    monkeypatch.setattr(sys, "platform", "darwin")
    plan = adapter.install(gpu=False)
    assert plan.packages == ("mlx==0.32.4", "mlx-lm==0.32.2", "llguidance>=1.9,<2")
    assert plan.python is None  # the caller's interpreter: mlx has wheels for 3.10-3.14


def test_mlx_adapter_is_registered_and_bound_by_launch() -> None:
    adapter = get_adapter("mlx")
    assert isinstance(adapter, MLXAdapter)
    bound = adapter.bind(LaunchSpec(model="/m", lora={"sql": "/a"}))
    assert isinstance(bound, MLXAdapter) and bound.model_path == "/m" and bound.loras == {"sql": "/a"}
    assert adapter.loras == {}  # the shared instance is untouched


# -- capabilities --------------------------------------------------------------------------------
def test_mlx_capabilities_tell_server_and_in_process_modes_apart() -> None:
    server = MLXAdapter().capabilities(None)
    inproc = MLXAdapter().capabilities(INPROC.version)
    for f in (Feature.JSON_SCHEMA, Feature.REGEX, Feature.CHOICE, Feature.GRAMMAR, Feature.GRAMMAR_LARK):
        assert server.support(f).level == "no" and "in_process=True" in server.support(f).alternative
        assert inproc.support(f).level == "emulated"
    assert server.support(Feature.SPEC_DRAFT).level == "native"
    assert not server.supports(Feature.SPEC_NGRAM) and not inproc.supports(Feature.TENSOR_PARALLEL)
    assert list(MLXAdapter().modes().values()) == [None, "0.32.2" + IN_PROCESS_SUFFIX]


def test_mlx_engines_table_has_a_column_per_mode(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["engines"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "MLX in-proc" in lines[0]
    regex_row = next(line for line in lines if line.startswith("output=Regex"))
    header = lines[0]
    assert regex_row[header.index("MLX ") :].split()[:2] == ["-", "unillm"]


def test_mlx_server_mode_refuses_constraints_before_sending() -> None:
    caps = MLXAdapter().capabilities(None)
    with pytest.raises(unillm.UnsupportedFeature, match="silently ignores response_format"):
        check(caps, req(output=unillm.Regex("[0-9]+")))
    with pytest.raises(unillm.UnsupportedFeature, match="logprobs"):
        check(caps, req(logprobs=True))


# -- discovery and requests -------------------------------------------------------------------
def test_mlx_parse_info_reads_version_only_in_process() -> None:
    adapter = MLXAdapter()
    assert adapter.parse_info({"models": None, "version": None}, None) == SERVER  # empty /v1/models
    assert adapter.bind(LaunchSpec(model="/m")).parse_info({}, None).model == "/m"
    info = adapter.parse_info({"version": {"version": INPROC.version}}, "tiny")
    assert info.version == INPROC.version and info.model == "tiny"


def test_mlx_build_sends_sampling_fields_mlx_reads() -> None:
    call = MLXAdapter().build(
        req(
            None,
            stream=True,
            max_tokens=5,
            temperature=0.5,
            top_k=3,
            min_p=0.1,
            repetition_penalty=1.1,
            seed=1,
            stop=["x"],
        ),
        SERVER,
    )
    assert call.path == "/v1/chat/completions" and call.stream
    assert call.json == {
        "model": "default_model",
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": 5,
        "temperature": 0.5,
        "seed": 1,
        "stop": ["x"],
        "top_k": 3,
        "min_p": 0.1,
        "repetition_penalty": 1.1,
        "stream": True,
        "stream_options": {"include_usage": True},
    }


def test_mlx_build_lora_by_name_sends_the_model_path_and_the_adapter_path() -> None:
    adapter = MLXAdapter().bind(LaunchSpec(model="/models/tiny", lora={"sql": "/adapters/sql"}))
    info = adapter.parse_info({}, None)
    body = adapter.build(req(lora="sql"), info).json
    assert body is not None and body["model"] == "/models/tiny" and body["adapters"] == "/adapters/sql"
    plain = adapter.build(req(), info).json
    assert plain is not None and plain["model"] == "/models/tiny" and "adapters" not in plain


def test_mlx_build_lora_without_launch_facts_needs_a_path_and_the_model() -> None:
    adapter = MLXAdapter()
    with pytest.raises(unillm.UnknownLora, match="no LoRA adapter named 'sql'"):
        adapter.build(req(lora="sql"), EngineInfo(engine="mlx", model="/m"))
    with pytest.raises(unillm.UnsupportedFeature, match="explicit model path"):
        adapter.build(req(lora="/adapters/sql"), SERVER)
    body = adapter.build(req(lora="/adapters/sql"), EngineInfo(engine="mlx", model="/m")).json
    assert body is not None and (body["model"], body["adapters"]) == ("/m", "/adapters/sql")


@pytest.mark.parametrize(
    ("output", "field"),
    [
        ({"type": "object"}, {"json": {"type": "object"}}),
        (unillm.Regex("[0-9]+"), {"regex": "[0-9]+"}),
        (unillm.Choice(["a", "b"]), {"choice": ["a", "b"]}),
        (unillm.Grammar('root ::= "x"'), {"grammar": 'root ::= "x"'}),
        (unillm.Grammar('start: "x"', syntax="lark"), {"lark": 'start: "x"'}),
    ],
)
def test_mlx_in_process_build_carries_the_constraint(output: OutputSpec, field: dict[str, Any]) -> None:
    body = MLXAdapter().build(req(output=output), INPROC).json
    assert body is not None and body["structured_outputs"] == field


def test_mlx_in_process_build_sends_lora_names_and_bool_logprobs() -> None:
    body = MLXAdapter().build(req(lora="sql", logprobs=True, top_logprobs=2), INPROC).json
    assert body is not None
    assert (body["model"], body["adapters"], body["logprobs"], body["top_logprobs"]) == ("/m", "sql", True, 2)


# -- answers and errors ----------------------------------------------------------------------------
def test_mlx_parse_reads_a_recorded_chat_answer() -> None:
    body = json.loads((DATA / "mlx_chat.json").read_text())
    r = MLXAdapter().parse(body, req(None), SERVER)
    assert (r.text, r.finish_reason) == ("oder 92", "length")
    assert (r.usage.prompt_tokens, r.usage.completion_tokens) == (23, 3)


async def _stream_via_mock(sse: bytes, **options: Any) -> list[unillm.Delta]:
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/chat/completions":
            return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=sse)
        return httpx.Response(404, content=b"Not Found")

    llm = unillm.LLM(MLXAdapter(), "http://mlx", http_transport=httpx.MockTransport(handler))
    async with llm:
        return [d async for d in llm.stream(messages=[{"role": "user", "content": "hi"}], **options)]


@pytest.mark.anyio
async def test_mlx_stream_skips_keepalive_comments_and_reads_the_usage_chunk() -> None:
    deltas = await _stream_via_mock((DATA / "mlx_chat_stream.sse").read_bytes(), max_tokens=3)
    assert "".join(d.text for d in deltas) == "oder 92"
    assert deltas[-1].usage is not None and deltas[-1].usage.completion_tokens == 3
    assert deltas[-1].finish_reason == "length"


@pytest.mark.parametrize(
    ("status", "body", "request_options", "error"),
    [
        (400, b'{"error": "top_p must be at most 1"}', {}, unillm.InvalidRequest),
        (404, b'{"error": "The adapter path does not exist: /x"}', {"lora": "/x"}, unillm.UnknownLora),
        (404, b'{"error": "Repository Not Found for url: ... model x"}', {}, unillm.UnknownModel),
        (404, b"Not Found", {}, unillm.NotFound),
        (411, b'{"error": "Content-Length header is required"}', {}, unillm.EngineError),
        (500, b'{"error": "in-process MLX failed: boom"}', {}, unillm.EngineInternalError),
    ],
)
def test_mlx_parse_error_maps_mlx_error_bodies(
    status: int, body: bytes, request_options: dict[str, Any], error: type[Exception]
) -> None:
    e = MLXAdapter().parse_error(status, body, req(**request_options), SERVER)
    assert type(e) is error
    assert isinstance(e, unillm.EngineError) and e.status == status


def test_mlx_recorded_400_keeps_the_engine_message() -> None:
    recorded = json.loads((DATA / "mlx_error_400.json").read_text())
    e = MLXAdapter().parse_error(recorded["status"], recorded["body"].encode(), req(), SERVER)
    assert isinstance(e, unillm.InvalidRequest) and e.engine_message == "top_p must be at most 1"


def test_mlx_runtime_lora_calls_are_refused_on_the_server() -> None:
    e = MLXAdapter().lora_error(404, b"Not Found", SERVER)
    assert isinstance(e, unillm.UnsupportedFeature) and "no adapter endpoints" in str(e)
