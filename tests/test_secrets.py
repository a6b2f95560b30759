"""Secrets the caller passes never show: API keys, URL passwords, secret env values (issue 16).

Bad keys are refused at connect/launch without echoing them; a password in a base URL and the
values of secret-looking env names (HF_TOKEN, *_API_KEY, and names listed in ``secret_env``) are
masked in repr, errors, spans, ``--dry-run``, ``render()``, ``LaunchError`` and the engine's log.
"""

from __future__ import annotations

import base64
import logging
import sys
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from launch_helpers import failed_launch
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import unillm
from unillm.adapter.launch_spec import LaunchCommand, LaunchSpec
from unillm.cli.main import main
from unillm.redact import display_url, is_secret_flag, is_secret_name, masked_argv, secret_flag_values

KEY = "sk-0123456789abcdef"
PASSWORD = "hunter2-pw-42"
TOKEN = "hf_TopSecretTokenValue"


# -- API keys (defect 4) ----------------------------------------------------------------------------


@pytest.mark.parametrize("key", [KEY + "\n", KEY + "\r\n", "sk-ключ-0123", "sk 0123456789", "sk-\x00abc"])
def test_a_key_that_cannot_be_a_header_is_refused_at_connect_without_echoing_it(key: str) -> None:
    with pytest.raises(unillm.InvalidOptions, match="api_key") as caught:
        unillm.connect("vllm", "http://127.0.0.1:9", api_key=key)
    assert key.strip() not in str(caught.value)
    assert "sk-" not in str(caught.value)


def test_a_trailing_newline_in_a_key_says_to_strip_it() -> None:
    with pytest.raises(unillm.InvalidOptions, match=r"strip"):
        unillm.connect("vllm", "http://127.0.0.1:9", api_key=KEY + "\n")


def test_a_bad_key_is_refused_by_a_fleet_connect_too() -> None:
    with pytest.raises(unillm.InvalidOptions, match="api_key") as caught:
        unillm.connect("vllm", ["http://127.0.0.1:9", "http://127.0.0.1:10"], api_key=KEY + "\n")
    assert KEY not in str(caught.value)


def test_a_bad_key_is_refused_by_launch_without_echoing_it() -> None:
    with pytest.raises(unillm.InvalidOptions, match="api_key") as caught:
        unillm.launch("vllm", model="m", api_key=KEY + "\n", python=sys.executable, progress=None)
    assert KEY not in str(caught.value)


def test_a_bad_key_in_a_launch_spec_is_not_echoed_by_its_validation_error() -> None:
    with pytest.raises(ValueError, match="api_key") as caught:
        LaunchSpec(model="m", api_key=KEY + "\n")
    assert KEY not in str(caught.value)


@pytest.mark.parametrize("key", [123, b"sk-bytes", ["sk"]])
def test_a_key_that_is_not_a_string_is_refused(key: Any) -> None:
    with pytest.raises(unillm.InvalidOptions, match="api_key must be a string"):
        unillm.connect("vllm", "http://127.0.0.1:9", api_key=key)


def test_a_visible_ascii_key_is_sent_as_a_bearer_token() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200)

    llm = unillm.LLM("vllm", "http://127.0.0.1:9", api_key=KEY, http_transport=httpx.MockTransport(handler))
    assert anyio.run(llm.health)
    assert seen[0].headers["authorization"] == f"Bearer {KEY}"


# -- a password in the base URL (defect 11) ---------------------------------------------------------


def test_display_url_masks_the_password_and_keeps_the_user() -> None:
    assert display_url(f"http://user:{PASSWORD}@gpu-1:8000/v1") == "http://user:***@gpu-1:8000/v1"


@pytest.mark.parametrize("url", ["http://gpu-1:8000", "http://user@gpu-1:8000", "https://[::1]:8000"])
def test_display_url_leaves_a_url_without_password_as_is(url: str) -> None:
    assert display_url(url) == url


def test_display_url_masks_a_password_in_a_url_that_does_not_parse() -> None:
    assert PASSWORD not in display_url(f"http://user:{PASSWORD}@host:abc")


def test_repr_and_base_url_of_an_llm_mask_the_url_password() -> None:
    llm = unillm.connect("vllm", f"http://user:{PASSWORD}@127.0.0.1:9")
    assert PASSWORD not in repr(llm)
    assert llm.base_url == "http://user:***@127.0.0.1:9"


def test_repr_of_a_fleet_masks_the_url_passwords() -> None:
    fleet = unillm.connect("vllm", [f"http://u:{PASSWORD}@127.0.0.1:9", f"http://u:{PASSWORD}@127.0.0.1:10"])
    assert PASSWORD not in repr(fleet)
    assert PASSWORD not in str(fleet.base_urls)


def recording_llm(seen: list[httpx.Request]) -> unillm.LLM:
    """An LLM whose URL carries a password; every request it sends lands in ``seen`` (answered 200)."""

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200)

    return unillm.LLM(
        "vllm", f"http://user:{PASSWORD}@127.0.0.1:9", http_transport=httpx.MockTransport(handler)
    )


def test_the_url_password_still_reaches_the_engine_as_basic_auth() -> None:
    seen: list[httpx.Request] = []
    llm = recording_llm(seen)
    assert anyio.run(llm.health)
    expected = base64.b64encode(f"user:{PASSWORD}".encode()).decode()
    assert seen[0].headers["authorization"] == f"Basic {expected}"


def test_a_clone_keeps_the_url_password_for_the_connection() -> None:
    seen: list[httpx.Request] = []
    llm = recording_llm(seen)
    assert anyio.run(llm.clone().health)
    assert seen[0].headers["authorization"].startswith("Basic ")


@pytest.mark.anyio
async def test_an_unreachable_engine_error_masks_the_url_password() -> None:
    llm = unillm.connect(
        "vllm",
        f"http://user:{PASSWORD}@127.0.0.1:9",
        model="m",
        retry=unillm.RetryPolicy(attempts=1),
        timeouts=unillm.Timeouts(connect=2),
    )
    with pytest.raises(unillm.EngineUnavailable) as caught:
        await llm.generate("hi", max_tokens=1)
    assert PASSWORD not in str(caught.value)
    assert "user:***@" in str(caught.value)


@pytest.mark.anyio
async def test_an_error_span_masks_the_url_password() -> None:
    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    unillm.instrument(tracer_provider=provider)
    try:
        llm = unillm.connect(
            "vllm", f"http://user:{PASSWORD}@127.0.0.1:9", model="m", retry=unillm.RetryPolicy(attempts=1)
        )
        with pytest.raises(unillm.EngineUnavailable):
            await llm.generate("hi", max_tokens=1)
    finally:
        unillm.uninstrument()
    [span] = spans.get_finished_spans()
    assert PASSWORD not in str(span.status.description)
    assert PASSWORD not in str(dict(span.attributes or {}))
    assert all(PASSWORD not in str(e.attributes) for e in span.events)


def test_a_bad_url_error_masks_its_password() -> None:
    with pytest.raises(unillm.InvalidOptions) as caught:
        unillm.connect("vllm", f"http://user:{PASSWORD}@host:99999")
    assert PASSWORD not in str(caught.value)


# -- secret env values of a launch (defect 12) ------------------------------------------------------


@pytest.mark.parametrize(
    "name", ["HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "OPENAI_API_KEY", "AWS_SECRET_ACCESS_KEY", "db_password"]
)
def test_secret_looking_names_are_secret(name: str) -> None:
    assert is_secret_name(name)


@pytest.mark.parametrize("name", ["TOKENIZERS_PARALLELISM", "VLLM_CPU_KVCACHE_SPACE", "CUDA_VISIBLE_DEVICES"])
def test_ordinary_names_are_not_secret(name: str) -> None:
    assert not is_secret_name(name)


def test_render_masks_a_secret_env_value_and_keeps_the_others() -> None:
    cmd = LaunchCommand(argv=["serve"], env={"HF_TOKEN": TOKEN, "TOKENIZERS_PARALLELISM": "false"})
    assert cmd.render() == "HF_TOKEN=*** TOKENIZERS_PARALLELISM=false serve"


def test_repr_of_a_command_masks_a_secret_env_value() -> None:
    assert TOKEN not in repr(LaunchCommand(argv=["serve"], env={"HF_TOKEN": TOKEN}))


def test_a_secret_env_value_is_masked_where_it_also_appears_in_argv() -> None:
    cmd = LaunchCommand(argv=["serve", "--hf-token", TOKEN], env={"HF_TOKEN": TOKEN})
    assert TOKEN not in cmd.render()


def test_a_short_secret_value_is_masked_by_name_but_not_searched_for_in_the_line() -> None:
    cmd = LaunchCommand(argv=["serve", "--port", "8001"], env={"USE_AUTH": "1"})
    assert cmd.render() == "USE_AUTH=*** serve --port 8001"


def test_secret_env_marks_more_names_secret() -> None:
    cmd = LaunchCommand(argv=["serve"], env={"MY_VAR": "private-value"}, secret_env=("MY_VAR",))
    assert "private-value" not in cmd.render()
    assert "private-value" not in repr(cmd)


def test_repr_of_a_launch_spec_masks_secret_env_values() -> None:
    spec = LaunchSpec(model="m", env={"HF_TOKEN": TOKEN, "MINE": "private-value"}, secret_env=["MINE"])
    assert TOKEN not in repr(spec)
    assert "private-value" not in repr(spec)
    assert TOKEN not in str(spec)


def test_a_launch_command_masks_secret_env_and_secret_env_names() -> None:
    run = unillm.launch(
        "vllm",
        model="m",
        python=sys.executable,
        progress=None,
        env={"HF_TOKEN": TOKEN, "MINE": "private-value"},
        secret_env=["MINE"],
    )
    shown = run.command().render()
    assert TOKEN not in shown
    assert "private-value" not in shown
    assert run.command().env["HF_TOKEN"] == TOKEN  # the engine still gets it


def test_dry_run_masks_secret_env_values(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(
        [
            *("launch", "vllm", "--model", "M", "--dry-run", "--python", sys.executable),
            *("--env", f"HF_TOKEN={TOKEN}", "--env", "MINE=private-value", "--secret-env", "MINE"),
        ]
    )
    out = capsys.readouterr()
    assert code == 0
    assert TOKEN not in out.out + out.err
    assert "private-value" not in out.out + out.err
    assert "HF_TOKEN=***" in out.out


# -- secret engine flags (issue 29, defect 6) -------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "masked"),
    [
        (["--api-key", KEY], ["--api-key", "***"]),
        ([f"--api-key={KEY}"], ["--api-key=***"]),
        (["--hf-token", TOKEN, "--seed", "7"], ["--hf-token", "***", "--seed", "7"]),
        ([f"--hf-token={TOKEN}"], ["--hf-token=***"]),
        (["--api-key", "k1", "k2", "--port", "8"], ["--api-key", "***", "***", "--port", "8"]),  # nargs="+"
        (
            ["--admin-api-key", "ab", "--ssl-keyfile-password=cd"],
            ["--admin-api-key", "***", "--ssl-keyfile-password=***"],
        ),
        (["--API_KEY", "ab"], ["--API_KEY", "***"]),
    ],
)
def test_masked_argv_masks_a_secret_flags_value_in_every_form(argv: list[str], masked: list[str]) -> None:
    assert masked_argv(argv) == masked


@pytest.mark.parametrize(
    "argv",
    [
        ["--max-num-batched-tokens", "8192"],
        ["--api-key-file", "/run/key"],
        ["--tokenizer", "org/tok"],
        ["--hf-token", "--seed", "7"],  # a bare --hf-token (use the cached login)
        ["serve", "api-key"],
    ],
)
def test_masked_argv_leaves_flags_that_only_look_secret(argv: list[str]) -> None:
    assert masked_argv(argv) == argv


def test_secret_flag_values_lists_each_flag_and_value() -> None:
    argv = ["serve", "--api-key", KEY, "--seed", "7", f"--hf-token={TOKEN}"]
    assert secret_flag_values(argv) == [("--api-key", KEY), ("--hf-token", TOKEN)]


@pytest.mark.parametrize("flag", ["--api-key", "--hf-token", "--admin-api-key", "-api_key", "--password=x"])
def test_flags_ending_in_a_secret_word_are_secret(flag: str) -> None:
    assert is_secret_flag(flag)


def test_render_and_repr_of_a_command_mask_a_secret_flag_in_argv() -> None:
    cmd = LaunchCommand(argv=["serve", "--api-key", "abc", f"--hf-token={TOKEN}", "--seed", "7"])
    assert cmd.render() == "serve --api-key *** --hf-token=*** --seed 7"
    assert TOKEN not in repr(cmd)


@pytest.mark.parametrize("extra", [["--api-key", KEY], [f"--api-key={KEY}"], ["--hf-token", TOKEN]])
@pytest.mark.parametrize("placement", [[], ["--replicas", "2"], ["--ray", "auto", "--replicas", "2"]])
def test_dry_run_masks_a_secret_engine_flag(
    extra: list[str], placement: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    launch = ("launch", "vllm", "--model", "M", "--dry-run", "--python", sys.executable)
    assert main([*launch, *placement, "--", "--seed", "7", *extra]) == 0
    out = capsys.readouterr()
    assert KEY not in out.out + out.err
    assert TOKEN not in out.out + out.err
    assert f"--seed 7 {extra[0].partition('=')[0]}" in out.out


@pytest.mark.parametrize(
    ("script", "settings"),
    [
        (
            "import os; print('it is', os.environ['HF_TOKEN'], os.environ['MINE']); raise SystemExit(1)",
            {"env": {"HF_TOKEN": TOKEN, "MINE": "private-value"}, "secret_env": ["MINE"]},
        ),
        (  # a secret engine flag (issue 29, defect 6)
            "import sys; print('it is', sys.argv); raise SystemExit(1)",
            {"extra_args": ["--api-key", "private-value", f"--hf-token={TOKEN}"]},
        ),
    ],
    ids=["secret env", "secret flag"],
)
@pytest.mark.anyio
async def test_a_launch_error_and_the_engine_log_mask_secrets(
    tmp_path: Path, script: str, settings: dict[str, Any]
) -> None:
    error = await failed_launch(tmp_path, script, **settings)
    assert "it is" in str(error)
    for text in (str(error), (tmp_path / "engine.log").read_text()):
        assert TOKEN not in text
        assert "private-value" not in text


def test_httpx_request_logs_do_not_hold_the_url_password(caplog: pytest.LogCaptureFixture) -> None:
    llm = unillm.LLM(
        "vllm",
        f"http://user:{PASSWORD}@127.0.0.1:9",
        http_transport=httpx.MockTransport(lambda r: httpx.Response(200)),
    )
    # the httpx logger's own level too: importing litellm (the probe's peer column) sets it to WARNING
    with caplog.at_level(logging.DEBUG), caplog.at_level(logging.DEBUG, logger="httpx"):
        assert anyio.run(llm.health)
    assert "127.0.0.1:9/health" in caplog.text
    assert PASSWORD not in caplog.text


def test_a_generated_api_key_never_starts_with_a_dash() -> None:
    """One token in 64 would (URL-safe base64): an engine's ``--api-key -x...`` reads as two options."""
    from unillm.launching.supervisor import new_api_key

    keys = [new_api_key().get_secret_value() for _ in range(2000)]
    assert not [k for k in keys if k.startswith("-")]
    assert len(set(keys)) == 2000 and {len(k) for k in keys} == {32}
