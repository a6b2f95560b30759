"""In-process vLLM without an engine: request bodies to worker jobs, results to answers, refusals."""

from __future__ import annotations

from typing import Any

import pytest
from unillm_vllm import VLLMAdapter
from unillm_vllm.inprocess import settings
from unillm_vllm.inprocess.translate import (
    CHAT_PATH,
    COMPLETIONS_PATH,
    IN_PROCESS_SUFFIX,
    Refused,
    answer_body,
    job,
)
from unillm_vllm.inprocess.transport import queue_gauges

from unillm.adapter.base import EngineInfo
from unillm.adapter.launch_spec import LaunchSpec, Nodes
from unillm.batch.lines import parse_line
from unillm.batch.render import success_line
from unillm.capabilities import Feature
from unillm.errors import InvalidOptions, UnsupportedFeature
from unillm.metrics import EngineMetrics
from unillm.options import Choice, make_request

ADAPTER = VLLMAdapter(launched=True, tool_parser=None)
INFO = EngineInfo(engine="vllm", model="tiny", version=f"0.32.0{IN_PROCESS_SUFFIX}")


def built(prompt: str | None = None, messages: Any = None, output: Any = None, **options: Any) -> Any:
    request = make_request(prompt, messages, output, options, stream=False)
    return ADAPTER.build(request, INFO), request


def test_a_chat_body_becomes_messages_and_sampling_params_under_vllms_names() -> None:
    call, _ = built(
        messages=[{"role": "user", "content": "Hi"}],
        max_tokens=8,
        temperature=0.5,
        top_k=4,
        seed=3,
        stop=["x"],
        thinking=False,
        extra_body={"ignore_eos": True},
    )
    work = job(call.path, call.json, "7")
    assert work == {
        "id": "7",
        "messages": [{"role": "user", "content": "Hi"}],
        "chat_template_kwargs": {"enable_thinking": False},
        "params": {
            "max_tokens": 8,
            "temperature": 0.5,
            "top_k": 4,
            "seed": 3,
            "stop": ["x"],
            "ignore_eos": True,
        },
    }


def test_a_prompt_with_a_constraint_keeps_it_as_structured_outputs() -> None:
    call, _ = built("Pick", output=Choice(["red", "blue"]), max_tokens=4)
    work = job(call.path, call.json, "1")
    assert (work["prompt"], work["structured_outputs"], work["params"]) == (
        "Pick",
        {"choice": ["red", "blue"]},
        {"max_tokens": 4},
    )


def test_text_content_parts_are_joined_for_the_chat_template() -> None:
    parts = [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]
    work = job(CHAT_PATH, {"messages": [{"role": "user", "content": parts}]}, "1")
    assert work["messages"] == [{"role": "user", "content": "ab"}]


@pytest.mark.parametrize(
    ("path", "body", "says"),
    [
        (CHAT_PATH, {"messages": [], "stream": True}, "'stream'"),
        (CHAT_PATH, {"messages": [], "logprobs": True}, "'logprobs'"),
        (CHAT_PATH, {"messages": [], "tools": []}, "'tools'"),
        (COMPLETIONS_PATH, {"prompt": "x", "response_format": {}}, "'response_format'"),
        (COMPLETIONS_PATH, {"prompt": ["a", "b"]}, "one text prompt"),
        (CHAT_PATH, {"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}, "'image_url'"),
        (CHAT_PATH, {"messages": [], "structured_outputs": {"json": {}, "regex": "a"}}, "one structured"),
        ("/v1/embeddings", {"input": "x"}, "/v1/embeddings"),
        (COMPLETIONS_PATH, {"max_tokens": 3}, "no prompt"),
    ],
)
def test_what_the_worker_cannot_honour_is_refused_with_what_to_do(
    path: str, body: dict[str, Any], says: str
) -> None:
    with pytest.raises(Refused) as e:
        job(path, body, "1")
    assert says in str(e.value)


def test_an_answer_renders_the_batch_line_the_http_path_writes() -> None:
    # the same shape as a line rendered from vLLM's server answer (test_batch_render's fields)
    item = parse_line('{"custom_id": "a", "messages": [{"role": "user", "content": "Hi"}]}', 1)
    call, request = built(messages=item.messages)
    result = {
        "id": "7",
        "prompt_tokens": 5,
        "outputs": [{"index": 0, "text": "Hello", "tokens": 2, "finish_reason": "stop"}],
    }
    body = answer_body(CHAT_PATH, "tiny", result)
    line = success_line(item, ADAPTER.parse(body, request, INFO, call))
    answer = line["response"]["body"]
    assert (line["custom_id"], line["error"], line["response"]["status_code"]) == ("a", None, 200)
    assert answer["object"] == "chat.completion"
    assert answer["choices"] == [
        {
            "index": 0,
            "message": {"role": "assistant", "content": "Hello"},
            "logprobs": None,
            "finish_reason": "stop",
        }
    ]
    assert answer["usage"] == {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7}


def test_a_completion_answer_has_text_choices_and_summed_usage_over_n() -> None:
    outputs = [
        {"index": 0, "text": "a", "tokens": 1, "finish_reason": "length"},
        {"index": 1, "text": "bc", "tokens": 2, "finish_reason": "stop"},
    ]
    body = answer_body(COMPLETIONS_PATH, "tiny", {"id": "3", "prompt_tokens": 4, "outputs": outputs})
    assert [c["text"] for c in body["choices"]] == ["a", "bc"]
    assert (body["object"], body["usage"]["completion_tokens"], body["usage"]["total_tokens"]) == (
        "text_completion",
        3,
        7,
    )


def test_the_in_process_mode_refuses_what_its_worker_lacks_before_sending() -> None:
    caps = ADAPTER.capabilities(INFO.version)
    for feature in (Feature.STREAM, Feature.LOGPROBS, Feature.TOOLS, Feature.EMBEDDINGS, Feature.LORA):
        with pytest.raises(UnsupportedFeature, match="Launch vLLM as a server"):
            caps.require(feature)
    caps.require(Feature.JSON_SCHEMA)  # constraints run in vLLM's engine
    assert ADAPTER.capabilities("0.32.0").supports(Feature.STREAM)
    assert ADAPTER.expected_version(LaunchSpec(model="/m", in_process=True)) == IN_PROCESS_SUFFIX


def test_in_process_refusal_names_a_body_field_the_worker_has_no_use_for() -> None:
    call, _ = built("x", extra_body={"priority": 1})
    refusal = ADAPTER.in_process_refusal(call)
    assert isinstance(refusal, InvalidOptions) and "'priority'" in str(refusal)
    assert ADAPTER.in_process_refusal(built("x", max_tokens=2)[0]) is None


def test_the_worker_gets_the_servers_engine_flags_without_the_servers_own() -> None:
    spec = LaunchSpec(
        model="/m",
        port=8123,
        served_name="tiny",
        dtype="bfloat16",
        max_num_seqs=8,
        tool_parser="hermes",
        in_process=True,
        env={"A": "1"},
        api_key=None,
        extra_args=["--enforce-eager"],
    )
    argv = settings.worker_argv(spec)
    assert argv[:2] == ["--model", "/m"]
    server_only = {"--host", "--port", "8123", "--tool-call-parser", "--enable-auto-tool-choice"}
    assert {*server_only, "--enable-prompt-tokens-details"}.isdisjoint(argv)  # the server's usage field
    assert {"--served-model-name", "tiny", "--dtype", "--max-num-seqs", "--enforce-eager"} <= set(argv)
    assert settings.worker_env(spec) == {"A": "1"}


@pytest.mark.parametrize(
    ("setting", "says"),
    [
        ({"task": "embed"}, "task='embed'"),
        ({"lora": {"a": "/a"}}, "lora="),
        ({"nodes": Nodes(count=2, head="h:1")}, "nodes="),
        ({"ray_address": "ray://h"}, "ray_address="),
        ({"reasoning_parser": "qwen3"}, "reasoning_parser='none'"),
    ],
)
def test_launch_settings_the_worker_cannot_honour_are_refused_before_it_starts(
    setting: dict[str, Any], says: str
) -> None:
    with pytest.raises(InvalidOptions, match="in-process vLLM") as e:
        ADAPTER.in_process(LaunchSpec(model="/m", in_process=True, python="/py", **setting))
    assert says in str(e.value)


def test_no_vllm_env_is_refused_with_how_to_get_one() -> None:
    with pytest.raises(InvalidOptions, match="unillm setup vllm"):
        ADAPTER.in_process(LaunchSpec(model="/m", in_process=True))


def test_the_queue_gauges_split_the_requests_in_the_worker_at_its_batch_size() -> None:
    text = queue_gauges(20, 8)
    names = ADAPTER.metric_names(INFO.version)
    metrics = EngineMetrics.parse(text, engine="vllm", mapping=names).normalized()
    assert (metrics.running, metrics.waiting) == (8, 12)
    assert "vllm:num_requests_waiting 0" in queue_gauges(3, 8)


# -- a worker that breaks the protocol ------------------------------------------------------
FAKE_WORKER = """
import json, sys
print(json.dumps({"ready": {"max_num_seqs": 2}}), flush=True)
for line in sys.stdin:
    job = json.loads(line)
    print(REPLY(job), flush=True)
"""


def fake_python(tmp_path: Any, reply: str) -> str:
    """An interpreter stand-in that runs a fake worker answering each job with ``reply(job)``."""
    import stat
    import sys

    script = tmp_path / "worker.py"
    script.write_text(FAKE_WORKER.replace("REPLY", reply))
    python = tmp_path / "python"
    python.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{script}"\n')
    python.chmod(python.stat().st_mode | stat.S_IEXEC)
    return str(python)


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("reply", "status"),
    [
        ('lambda job: json.dumps({"id": job["id"], "outputs": 5, "prompt_tokens": 1})', 502),
        ('lambda job: json.dumps({"id": job["id"], "error": "x", "status": "bad"})', 500),
    ],
    ids=["malformed-answer", "malformed-status"],
)
async def test_a_malformed_worker_answer_is_an_error_answer(tmp_path: Any, reply: str, status: int) -> None:
    import httpx
    from unillm_vllm.inprocess.transport import WorkerTransport

    transport = WorkerTransport(fake_python(tmp_path, f"({reply})"), [], {}, "tiny")
    async with httpx.AsyncClient(transport=transport, base_url="http://in-process") as client:
        r = await client.post(COMPLETIONS_PATH, json={"prompt": "hi", "max_tokens": 2})
    assert r.status_code == status


@pytest.mark.anyio
@pytest.mark.parametrize("line", ['"not json"', "[1, 2]"], ids=["text", "array"])
async def test_a_worker_line_that_is_no_answer_fails_the_request_instead_of_hanging(
    tmp_path: Any, line: str
) -> None:
    import anyio
    import httpx
    from unillm_vllm.inprocess.transport import WorkerTransport

    reply = "(lambda job: 'not json')" if line.startswith('"') else "(lambda job: '[1, 2]')"
    transport = WorkerTransport(fake_python(tmp_path, reply), [], {}, "tiny")
    async with httpx.AsyncClient(transport=transport, base_url="http://in-process") as client:
        with anyio.fail_after(30), pytest.raises(httpx.ReadError, match="no answer"):
            await client.post(COMPLETIONS_PATH, json={"prompt": "hi", "max_tokens": 2})
