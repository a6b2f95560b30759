"""Aphrodite Engine's own translation: the guided-decoding fields, the sampling extras and the
launch command (flag names from Aphrodite Engine's OpenAI server arguments, a vLLM 0.6 fork)."""

from typing import Any

import pytest
from unillm_aphrodite import AphroditeAdapter

import unillm
from unillm.adapter import EngineInfo, LaunchSpec, Parallel, Request, Speculative
from unillm.testing.fault_server import FaultServer

ADAPTER = AphroditeAdapter()
INFO = EngineInfo(engine="aphrodite", model="tiny")


def _body(**options: Any) -> dict[str, Any]:
    request = Request(prompt=None, messages=({"role": "user", "content": "Hi"},), stream=False, **options)
    return dict(ADAPTER.build(request, INFO).json or {})


@pytest.mark.parametrize(
    ("output", "field", "value"),
    [
        (unillm.JsonSchema({"type": "object"}), "guided_json", {"type": "object"}),
        (unillm.Regex("[0-9]{3}"), "guided_regex", "[0-9]{3}"),
        (unillm.Choice(["yes", "no"]), "guided_choice", ["yes", "no"]),
    ],
)
def test_constraints_go_in_the_guided_fields(output: object, field: str, value: object) -> None:
    body = _body(output=output)
    assert body[field] == value
    assert "response_format" not in body
    assert not {"guided_json", "guided_regex", "guided_choice"} - {field} & body.keys()


def test_sampling_extras_are_sent_under_their_names() -> None:
    body = _body(top_k=20, min_p=0.1, repetition_penalty=1.1, max_tokens=4)
    assert (body["top_k"], body["min_p"], body["repetition_penalty"]) == (20, 0.1, 1.1)


@pytest.mark.anyio
async def test_a_grammar_is_refused_before_sending_saying_why() -> None:
    with FaultServer(model="tiny") as server:
        async with unillm.LLM(AphroditeAdapter(), server.url) as llm:
            assert (await llm.generate("Hi", output=unillm.Regex(r"Hello, [a-z]+!"))).text
            for syntax in ("ebnf", "lark"):
                with pytest.raises(unillm.UnsupportedFeature) as refused:
                    await llm.generate("Hi", output=unillm.Grammar('root ::= "a"', syntax=syntax))
                assert "backend" in refused.value.why
        sent = server.seen()
    assert len(sent) == 1 and sent[0].body["guided_regex"] == r"Hello, [a-z]+!"


def test_the_launch_maps_the_common_settings() -> None:
    spec = LaunchSpec(
        model="/models/m",
        port=9000,
        served_name="m",
        dtype="bfloat16",
        max_model_len=2048,
        parallel=Parallel(tensor=2),
        lora={"a": "/l/a", "b": "/l/b"},
        speculative=Speculative(method="ngram", num_tokens=3, lookup_max=4),
        prefix_caching=True,
        api_key="secret-key",
        python="/env/bin/python",
    )
    cmd = ADAPTER.command(spec)
    argv = cmd.argv
    assert argv[:3] == ["/env/bin/python", "-m", "aphrodite.endpoints.openai.api_server"]
    pairs = {argv[i]: argv[i + 1] for i in range(len(argv) - 1) if argv[i].startswith("--")}
    assert pairs["--model"] == "/models/m" and pairs["--port"] == "9000"
    assert pairs["--tensor-parallel-size"] == "2" and pairs["--max-model-len"] == "2048"
    assert pairs["--speculative-model"] == "[ngram]" and pairs["--num-speculative-tokens"] == "3"
    assert pairs["--ngram-prompt-lookup-max"] == "4" and pairs["--api-keys"] == "secret-key"
    lora_at = argv.index("--lora-modules")
    assert argv[lora_at + 1 : lora_at + 3] == ["a=/l/a", "b=/l/b"]
    assert "--enable-lora" in argv and "--enable-prefix-caching" in argv
    assert "secret-key" not in cmd.render()


@pytest.mark.parametrize(
    "spec",
    [
        LaunchSpec(model="m", parallel=Parallel(data=2)),
        LaunchSpec(model="m", speculative=Speculative(method="eagle", draft_model="/d")),
        LaunchSpec(model="m", runtime_lora=True),
        LaunchSpec(model="m", task="embed"),
    ],
)
def test_settings_it_cannot_map_are_refused(spec: LaunchSpec) -> None:
    with pytest.raises(unillm.UnsupportedFeature) as refused:
        ADAPTER.command(spec)
    assert refused.value.engine == "aphrodite" and refused.value.why


def test_setup_refuses_a_cpu_install() -> None:
    assert ADAPTER.install(gpu=True).packages == ("aphrodite-engine",)
    with pytest.raises(unillm.UnsupportedFeature):
        ADAPTER.install(gpu=False)
