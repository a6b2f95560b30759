"""unillm's SGLang requests and launch commands, checked by SGLang's own request models and parser.

Covers what cannot run on this CPU (LoRA, speculative decoding, parallelism) as well as
everything else: each body the adapter builds is validated in the SGLang env by the installed
package itself (``sglang.api.v1`` contract and ``GenerateReqInput`` for ``/generate``, the OpenAI
server's pydantic models, the LoRA request structs), and each launch argv is parsed by
``launch_server``'s own argument parser. See ``sglang_contract_check.py``.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any

import cpu_env
import pytest
from pydantic import BaseModel, SecretStr
from unillm_sglang import SGLangAdapter, SGLangInfo

from unillm.adapter.launch_spec import LaunchSpec, Nodes, Parallel, PDRole, Speculative
from unillm.content import Image
from unillm.options import Choice, Grammar, Regex, make_request
from unillm.testing.verdicts import verdicts as check_cases

pytestmark = pytest.mark.engine
CHECKER = Path(__file__).with_name("sglang_contract_check.py")
INFO = SGLangInfo(engine="sglang", model="base", version="0.5.23", served_names=("base",), lora_enabled=True)
SCHEMA = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
ALL_SAMPLING: dict[str, Any] = {
    "max_tokens": 8,
    "temperature": 0.7,
    "top_p": 0.9,
    "top_k": 20,
    "min_p": 0.05,
    "stop": ["\n", "END"],
    "seed": 3,
    "presence_penalty": 0.1,
    "frequency_penalty": 0.2,
    "repetition_penalty": 1.1,
    "n": 2,
}


class Pet(BaseModel):
    kind: str
    age: int


OUTPUTS: dict[str, Any] = {
    "json": SCHEMA,
    "pydantic": Pet,
    "regex": Regex(r"\d+"),
    "choice": Choice(["a.b", "(c)"]),
    "ebnf": Grammar('root ::= "x" | "y"'),
}
VARIANTS: dict[str, dict[str, Any]] = {
    "plain": {"max_tokens": 4},
    "all-sampling": ALL_SAMPLING,
    "lora": {"lora": "sql", "max_tokens": 4},
    "stream-logprobs": {"stream": True, "top_logprobs": 2, "max_tokens": 4},
    **{f"output-{k}": {"output": v, "max_tokens": 16} for k, v in OUTPUTS.items()},
}


def _body(api: str, chat: bool, variant: dict[str, Any]) -> dict[str, Any]:
    options = dict(variant)
    output, stream = options.pop("output", None), options.pop("stream", False)
    messages = [{"role": "user", "content": "Hi"}] if chat else None
    request = make_request(None if chat else "Hi", messages, output, options, stream=stream)
    adapter = SGLangAdapter(api)  # type: ignore[arg-type]
    call = adapter.build(request, INFO)
    tagged = adapter.abortable(call)  # what the client sends: a non-streamed call carries its rid
    return dict((tagged[0] if tagged is not None else call).json or {})


def _request_cases() -> dict[str, dict[str, Any]]:
    cases: dict[str, dict[str, Any]] = {}
    for name, variant in VARIANTS.items():
        cases[f"completions/{name}"] = {"kind": "completions", "body": _body("openai", False, variant)}
        cases[f"chat/{name}"] = {"kind": "chat", "body": _body("openai", True, variant)}
        cases[f"generate/{name}"] = {"kind": "generate", "body": _body("native", False, variant)}
    for parser in (None, "qwen25"):
        info = dataclasses.replace(INFO, tool_call_parser=parser)
        for name, options in TOOL_VARIANTS.items():
            if name == "auto" and parser is None:
                continue  # refused before sending: test_sglang_tools.py
            stream = options.pop("stream", False)
            request = make_request(None, CONVERSATION, None, options, stream=stream)
            cases[f"chat/tools-{name}-parser-{parser}"] = {
                "kind": "chat",
                "body": dict(SGLangAdapter().build(request, info).json or {}),
            }
            options["stream"] = stream
    adapter = SGLangAdapter()
    tagged = adapter.abortable(adapter.build(make_request("Hi", None, None, {}, stream=False), INFO))
    assert tagged is not None
    cases["abort_request"] = {"kind": "abort", "body": dict(tagged[1].json or {})}
    cases["load_lora"] = {"kind": "load_lora", "body": dict(adapter.load_lora("sql", "/a/sql").json or {})}
    cases["unload_lora"] = {"kind": "unload_lora", "body": dict(adapter.unload_lora("sql").json or {})}
    return cases


def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


TOOLS = [Pet, add, {"type": "function", "function": {"name": "noop", "parameters": {"type": "object"}}}]
TOOL_VARIANTS: dict[str, dict[str, Any]] = {
    "auto": {"tools": TOOLS},
    "required": {"tools": TOOLS, "tool_choice": "required"},
    "named": {"tools": TOOLS, "tool_choice": "add", "stream": True},
    "none": {"tools": TOOLS, "tool_choice": "none"},
}
CONVERSATION: list[dict[str, Any]] = [
    {"role": "user", "content": ["What is on this picture?", Image(bytes.fromhex("89504e470d0a1a0a"))]},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "add", "arguments": '{"a": 1, "b": 2}'}}
        ],
    },
    {"role": "tool", "tool_call_id": "c1", "content": "3"},
    {"role": "user", "content": "And now?"},
]

LAUNCHES: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "limits": (
        {
            "served_name": "tiny",
            "port": 30001,
            "dtype": "bfloat16",
            "max_model_len": 4096,
            "max_num_seqs": 16,
            "memory_fraction": 0.85,
            "quantization": "fp8",
            "prefix_caching": False,
        },
        {
            "served_model_name": "tiny",
            "port": 30001,
            "dtype": "bfloat16",
            "context_length": 4096,
            "max_running_requests": 16,
            "mem_fraction_static": 0.85,
            "quantization": "fp8",
            "disable_radix_cache": True,
        },
    ),
    "parallel": (
        {"parallel": Parallel(tensor=4, pipeline=2, data=2, expert=True)},
        {"tp_size": 4, "pp_size": 2, "dp_size": 2, "ep_size": 4},
    ),
    "lora": (
        {"lora": {"sql": "/a/sql", "poem": "/a/poem"}, "max_lora_rank": 16, "max_loras": 4},
        {
            "enable_lora": True,
            "lora_paths": ["sql=/a/sql", "poem=/a/poem"],
            "max_lora_rank": 16,
            "max_loras_per_batch": 4,
        },
    ),
    "runtime-lora": (
        {"runtime_lora": True, "max_lora_rank": 8},
        {"enable_lora": True, "lora_target_modules": ["all"], "max_lora_rank": 8},
    ),
    "api-key": ({"api_key": SecretStr("k-1")}, {"api_key": "k-1"}),
    "api-key-with-leading-dash": ({"api_key": SecretStr("-k_1")}, {"api_key": "-k_1"}),
    "ngram": (
        {"speculative": Speculative(method="ngram", num_tokens=4)},
        {"speculative_algorithm": "NGRAM", "speculative_num_draft_tokens": 4},
    ),
    "eagle": (
        {"speculative": Speculative(method="eagle", num_tokens=3, draft_model="/d/e")},
        {
            "speculative_algorithm": "EAGLE",
            "speculative_draft_model_path": "/d/e",
            "speculative_num_steps": 3,
            "speculative_eagle_topk": 1,
            "speculative_num_draft_tokens": 4,
        },
    ),
    "eagle3": (
        {"speculative": Speculative(method="eagle3", num_tokens=2, draft_model="/d/e3")},
        {"speculative_algorithm": "EAGLE3", "speculative_num_steps": 2},
    ),
    "draft": (
        {"speculative": Speculative(method="draft", num_tokens=2, draft_model="/d/small")},
        {"speculative_algorithm": "STANDALONE", "speculative_draft_model_path": "/d/small"},
    ),
    "mtp": ({"speculative": Speculative(method="mtp", num_tokens=1)}, {"speculative_algorithm": "NEXTN"}),
    "nodes-head": (
        {"parallel": Parallel(tensor=4), "nodes": Nodes(count=2, head="10.0.0.1:5000")},
        {"nnodes": 2, "node_rank": 0, "dist_init_addr": "10.0.0.1:5000", "tp_size": 4},
    ),
    "nodes-worker": (
        {"parallel": Parallel(tensor=4), "nodes": Nodes(count=2, rank=1, head="10.0.0.1")},
        {"nnodes": 2, "node_rank": 1, "dist_init_addr": "10.0.0.1:29500"},
    ),
    "pd-prefill": (
        {"pd": PDRole(role="prefill", transfer="mooncake", port=8999)},
        {
            "disaggregation_mode": "prefill",
            "disaggregation_transfer_backend": "mooncake",
            "disaggregation_bootstrap_port": 8999,
        },
    ),
    "pd-decode": (
        {"pd": PDRole(role="decode", transfer="nixl")},
        {"disaggregation_mode": "decode", "disaggregation_transfer_backend": "nixl"},
    ),
    "tool-parser": ({"tool_parser": "hermes"}, {"tool_call_parser": "qwen25"}),
}


def _launch_cases() -> dict[str, dict[str, Any]]:
    cases = {}
    for name, (settings, expect) in LAUNCHES.items():
        spec = LaunchSpec(model="/models/m", **{"api_key": None, **settings})
        argv = SGLangAdapter().command(spec).argv
        assert argv[1:3] == ["-m", "sglang.launch_server"]
        cases[f"argv/{name}"] = {"kind": "argv", "argv": argv[3:], "expect": expect}
    return cases


CONTROLS = {  # the checker must reject these, or it proves nothing
    "control/unknown-sampling-key": {
        "kind": "generate",
        "body": {"text": "x", "sampling_params": {"max_tokens": 3}},
    },
    "control/unknown-openai-field": {
        "kind": "completions",
        "body": {"model": "m", "prompt": "x", "guided_regex": "a"},
    },
    "control/unknown-flag": {"kind": "argv", "argv": ["--model-path", "/m", "--max-model-len", "8"]},
    "control/unknown-pd-mode": {
        "kind": "argv",
        "argv": ["--model-path", "/m", "--disaggregation-mode", "encode-only"],
    },
    "control/lora-without-path": {"kind": "load_lora", "body": {"lora_name": "x"}},
    "control/abort-unknown-field": {"kind": "abort", "body": {"rid": "x", "request_id": "x"}},
}
CASES = {**_request_cases(), **_launch_cases()}


@pytest.fixture(scope="module")
def verdicts() -> dict[str, str]:
    env = {**os.environ, "SGLANG_USE_CPU_ENGINE": "1", "HF_HUB_OFFLINE": "1"}
    return check_cases(cpu_env.ensure_env(), CHECKER, {**CASES, **CONTROLS}, env=env)


@pytest.mark.parametrize("case", sorted(CASES))
def test_sglang_accepts(case: str, verdicts: dict[str, str]) -> None:
    assert verdicts[case] == "ok", f"{case}: {verdicts[case]}\n{json.dumps(CASES[case], indent=1)[:2000]}"


@pytest.mark.parametrize("case", sorted(CONTROLS))
def test_sglang_rejects_the_control(case: str, verdicts: dict[str, str]) -> None:
    assert verdicts[case] != "ok"
