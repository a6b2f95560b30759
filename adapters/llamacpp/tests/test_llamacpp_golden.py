"""LlamaCppAdapter as a pure translation table: launch commands, request bodies, refusals, errors."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from pydantic import SecretStr
from unillm_llamacpp import ENGINE_PACKAGE, LlamaCppAdapter, LlamaCppInfo
from unillm_llamacpp.grammar import GrammarError, check_gbnf, choice_gbnf, regex_gbnf
from unillm_llamacpp.schema import SchemaNotEnforced, class_escape, server_schema
from unillm_llamacpp.serve import API_KEY_ENV, SERVER_MAIN

import unillm
from unillm.adapter.launch_spec import LaunchSpec, Parallel, Speculative
from unillm.adapter.registry import get_adapter
from unillm.capabilities import Feature, check
from unillm.errors import InvalidOptions, InvalidRequest, UnknownLora, UnsupportedFeature
from unillm.options import OutputSpec, make_request
from unillm.results import ToolCall, assistant_message

INFO = LlamaCppInfo(engine="llamacpp", model="tiny", version="0.3.36", aliases=("tiny", "sql"))
ADAPTER = LlamaCppAdapter()


def req(
    prompt: str | None = "hi", output: OutputSpec | None = None, stream: bool = False, **options: Any
) -> Any:
    messages = None if prompt is not None else [{"role": "user", "content": "hi"}]
    return make_request(prompt, messages, output, options, stream=stream)


def settings_of(argv: list[str]) -> dict[str, Any]:
    assert argv[1:3] == ["-c", SERVER_MAIN]
    return dict(json.loads(argv[3]))


# -- launch ------------------------------------------------------------------------------------
def test_command_serves_the_model_and_each_lora_under_its_name() -> None:
    spec = LaunchSpec(
        model="/m/tiny.gguf",
        served_name="tiny",
        port=8123,
        python="/env/bin/python",
        lora={"sql": "/m/sql.gguf"},
        max_model_len=512,
        api_key=SecretStr("k-1"),
        speculative=Speculative(method="ngram", num_tokens=3),
        prefix_caching=True,
    )
    cmd = ADAPTER.command(spec)
    assert cmd.argv[0] == "/env/bin/python"
    base = {
        "model": "/m/tiny.gguf",
        "n_ctx": 512,
        "cache": True,
        "draft_model": "prompt-lookup-decoding",
        "draft_model_num_pred_tokens": 3,
    }
    assert settings_of(cmd.argv) == {
        "host": "127.0.0.1",
        "port": 8123,
        "interrupt_requests": False,
        "models": [
            {**base, "model_alias": "tiny"},
            {**base, "model_alias": "sql", "lora_path": "/m/sql.gguf"},
        ],
    }
    assert cmd.env == {API_KEY_ENV: "k-1"} and "k-1" not in cmd.render()
    assert cmd.health_path == "/openapi.json"


def test_command_turns_the_prompt_cache_off_when_asked() -> None:
    spec = LaunchSpec(model="/m/tiny.gguf", api_key=None, prefix_caching=False)
    assert [m["cache"] for m in settings_of(ADAPTER.command(spec).argv)["models"]] == [False]


@pytest.mark.parametrize(
    ("settings", "feature"),
    [
        ({"model": "/m/tiny"}, "a non-GGUF model"),
        ({"lora": {"sql": "/peft/sql"}}, "LoRA 'sql'"),
        ({"speculative": Speculative(method="draft", draft_model="/d")}, "speculative method 'draft'"),
        ({"speculative": Speculative(method="ngram", lookup_max=3)}, "speculative lookup_max/lookup_min"),
        ({"parallel": Parallel(tensor=2)}, "parallel"),
        ({"runtime_lora": True}, "runtime_lora"),
        ({"max_num_seqs": 4}, "max_num_seqs > 1"),
        ({"dtype": "bfloat16"}, "dtype"),
        ({"quantization": "awq"}, "quantization"),
        ({"max_lora_rank": 8}, "max_lora_rank"),
        ({"task": "embed"}, 'task="embed"'),
    ],
)
def test_command_refuses_settings_the_server_lacks(settings: dict[str, Any], feature: str) -> None:
    spec = LaunchSpec(**{"model": "/m/tiny.gguf", "api_key": None, **settings})
    with pytest.raises(UnsupportedFeature) as e:
        ADAPTER.command(spec)
    assert (e.value.engine, e.value.feature) == ("llamacpp", feature) and e.value.why and e.value.alternative


def test_install_is_the_server_extra_of_the_pinned_version() -> None:
    assert ADAPTER.install(gpu=False).packages == (ENGINE_PACKAGE,) == ("llama-cpp-python[server]==0.3.36",)


def test_adapter_is_registered_and_bound_by_launch() -> None:
    assert isinstance(get_adapter("llamacpp"), LlamaCppAdapter)
    bound = ADAPTER.bind(LaunchSpec(model="/m.gguf", lora={"sql": "/s.gguf"}))
    assert bound.loras == {"sql": "/s.gguf"}


# -- requests ----------------------------------------------------------------------------------
def test_sampling_fields_use_llama_cpp_names() -> None:
    body = ADAPTER.build(req(top_k=5, min_p=0.1, repetition_penalty=1.2, seed=3, stream=True), INFO).json
    assert body is not None
    assert (body["top_k"], body["min_p"], body["repeat_penalty"], body["seed"]) == (5, 0.1, 1.2, 3)
    assert body["stream"] is True and "stream_options" not in body


@pytest.mark.parametrize("output", [unillm.Regex(r"\d{2}"), unillm.Choice(["yes", "no"])])
def test_regex_and_choice_go_as_gbnf(output: OutputSpec) -> None:
    body = ADAPTER.build(req(output=output), INFO).json
    assert body is not None
    check_gbnf(body["grammar"])


def get_weather(city: str) -> str:
    """Get the current weather in a city."""
    return city


def test_an_assistant_tool_call_message_goes_with_a_string_content() -> None:
    # llama-cpp-python's request model refuses "content": null (a validation 500): r.message()'s
    call = ToolCall(id="c1", name="get_weather", arguments='{"city": "Oslo"}', parsed={"city": "Oslo"})
    messages = [
        {"role": "user", "content": "Weather in Oslo?"},
        assistant_message("", [call]),
        {"role": "tool", "tool_call_id": "c1", "content": "snowy"},
        assistant_message("It is snowy.", []),
    ]
    request = make_request(None, messages, None, {"tools": [get_weather]}, stream=False)
    body = ADAPTER.build(request, INFO).json
    assert body is not None
    assert [m.get("content") for m in body["messages"]] == ["Weather in Oslo?", "", "snowy", "It is snowy."]
    assert body["messages"][1]["tool_calls"][0]["function"]["name"] == "get_weather"
    assert messages[1]["content"] is None  # the caller's transcript is left as it was


def test_json_schema_goes_to_chat_response_format_and_is_refused_with_a_prompt() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    body = ADAPTER.build(req(None, output=schema), INFO).json
    assert body is not None and body["response_format"] == {"type": "json_object", "schema": schema}
    with pytest.raises(UnsupportedFeature) as e:
        ADAPTER.build(req("hi", output=schema), INFO)
    assert "messages" in e.value.alternative


def test_a_bad_grammar_is_refused_before_sending() -> None:
    with pytest.raises(InvalidOptions, match="root"):
        ADAPTER.build(req(output=unillm.Grammar('expr ::= "a"')), INFO)
    with pytest.raises(InvalidOptions, match="not valid GBNF"):
        ADAPTER.build(req(output=unillm.Grammar('root ::= "a')), INFO)
    with pytest.raises(InvalidOptions, match="not valid GBNF"):
        ADAPTER.build(req(output=unillm.Grammar("root ::= undefined-rule")), INFO)


def test_a_regex_gbnf_cannot_express_is_refused_naming_the_alternative() -> None:
    for pattern in (r"(?=a)a", r"(a)\1", r"a\bb", r"(?i)abc"):
        with pytest.raises(UnsupportedFeature) as e:
            ADAPTER.build(req(output=unillm.Regex(pattern)), INFO)
        assert e.value.feature == Feature.REGEX.value and "Grammar" in e.value.alternative


def test_lora_names_are_checked_against_the_served_names() -> None:
    body = ADAPTER.build(req(lora="sql"), INFO).json
    assert body is not None and body["model"] == "sql"
    for unknown in ("poem", "tiny"):
        with pytest.raises(UnknownLora, match="default model"):
            ADAPTER.build(req(lora=unknown), INFO)


def test_capabilities_refuse_what_the_server_ignores() -> None:
    caps = ADAPTER.capabilities("0.3.36")
    for options in ({"n": 2}, {"tools": [{"name": "f", "parameters": {}}], "tool_choice": "auto"}):
        with pytest.raises(UnsupportedFeature):
            check(caps, req(None, **options))
    assert not caps.supports(Feature.LORA_RUNTIME) and not caps.supports(Feature.GRAMMAR_LARK)
    assert caps.supports(Feature.SPEC_NGRAM) and not caps.supports(Feature.SPEC_DRAFT)


# -- answers -----------------------------------------------------------------------------------
def test_parse_info_reads_aliases_and_the_version_from_openapi() -> None:
    answers = {
        "models": {"data": [{"id": "tiny"}, {"id": "sql"}]},
        "openapi": {"info": {"version": "0.3.36"}},
    }
    info = ADAPTER.parse_info(answers, None)
    assert (info.model, info.version, info.aliases) == ("tiny", "0.3.36", ("tiny", "sql"))


def test_validation_errors_answered_500_become_invalid_request() -> None:
    body = json.dumps(
        {
            "error": {
                "message": "[{'type': 'less_than_equal', 'loc': ('body', 'top_p'), "
                "'msg': 'Input should be less than or equal to 1'}]",
                "type": "internal_server_error",
            }
        }
    ).encode()
    assert isinstance(ADAPTER.parse_error(500, body, None, INFO), InvalidRequest)


# -- grammar translation -----------------------------------------------------------------------
@pytest.mark.parametrize(
    "pattern", [r"20\d{2}-[01]\d-[0-3]\d", r"^(yes|no)$", r"[^\d]x+", r"a.c?\s*\w{1,3}", r'"q\\[\]\-^]']
)
def test_regex_gbnf_is_valid_gbnf(pattern: str) -> None:
    check_gbnf(regex_gbnf(pattern))


def test_choice_gbnf_escapes_quotes_and_newlines() -> None:
    grammar = choice_gbnf(['say "hi"', "two\nlines"])
    check_gbnf(grammar)
    assert re.fullmatch(r'root ::= "say \\x22hi\\x22" \| "two\\x0Alines"', grammar), grammar


@pytest.mark.parametrize(
    ("grammar", "why"),
    [
        ('start ::= "a"', "named root"),
        ('root ::= "a', "not valid GBNF"),
        ("root ::= other", "not"),
        ('root ::= my_rule\nmy_rule ::= "a"', "letters, digits and '-'"),
        ('root ::= root "a" | "b"', "left-recursive"),
        ('root ::= e? x\nx ::= "" | root "a"\ne ::= "e"', "left-recursive"),
        ('root ::= ("a" [b]?){0,1001}', "2 rules, times 1001"),  # llama.cpp: "exceeds sane defaults"
        ('root ::= (("a")){0,1001}', "2 rules, times 1001"),
    ],
)
def test_check_gbnf_refuses_what_llama_cpp_rejects(grammar: str, why: str) -> None:
    with pytest.raises(GrammarError, match=why):
        check_gbnf(grammar)


def test_a_repeated_group_is_refused_once_it_expands_to_more_than_2000_rules() -> None:
    groups = " ".join(f'("{i}")?' for i in range(999))  # 999 groups, 999 optional rules, 1 outer group
    check_gbnf(f"root ::= ({groups})?")
    with pytest.raises(GrammarError, match="2001 rules, times 1"):
        check_gbnf(f'root ::= ({groups} ("x")?)?')
    check_gbnf('root ::= ("a" [b]?){0,1000} ("a"){0,3000}')  # 2 x 1000; a one-rule item is not limited


def test_check_gbnf_accepts_comments_groups_repetition_and_right_recursion() -> None:
    check_gbnf('# sums\nroot ::= "(" expr ")" # one\nexpr ::= num ("+" expr)?\nnum ::= [0-9]{1,2} | "x"*')


# -- JSON schemas as the server enforces them -------------------------------------------------
def test_bounded_integers_are_sent_as_enums_and_the_rest_untouched() -> None:
    schema = {
        "type": "object",
        "properties": {
            "n": {"type": "integer", "minimum": 1, "maximum": 3},
            "k": {"type": "integer", "exclusiveMinimum": 0, "exclusiveMaximum": 10, "multipleOf": 3},
            "tags": {"type": "array", "items": {"type": "string", "maxLength": 4}, "maxItems": 2},
        },
        "$defs": {"d": {"type": "integer", "minimum": 0, "maximum": 1}},
    }
    sent = server_schema(schema)
    assert sent["properties"]["n"] == {"enum": [1, 2, 3]}
    assert sent["properties"]["k"] == {"enum": [3, 6, 9]}
    assert sent["properties"]["tags"] == schema["properties"]["tags"]  # type: ignore[index]
    assert sent["$defs"]["d"] == {"enum": [0, 1]}


@pytest.mark.parametrize(
    ("schema", "why"),
    [
        ({"type": "number", "minimum": 0.5}, "non-integer"),
        ({"type": "integer", "minimum": 0}, "both a minimum and a maximum"),
        ({"type": "integer", "minimum": 0, "maximum": 10**6}, "both a minimum and a maximum"),
        ({"type": "array", "items": {"type": "integer"}, "uniqueItems": True}, "uniqueItems"),
        ({"type": "string", "pattern": "[0-9]+"}, "anchored"),
        ({"type": "string", "format": "email"}, "format"),
        ({"not": {"type": "null"}}, "'not'"),
    ],
)
def test_keywords_the_converter_ignores_are_refused(schema: dict[str, Any], why: str) -> None:
    with pytest.raises(SchemaNotEnforced, match=why):
        server_schema({"type": "object", "properties": {"x": schema}})
    with pytest.raises(UnsupportedFeature) as e:
        ADAPTER.build(req(None, output={"type": "object", "properties": {"x": schema}}), INFO)
    assert e.value.feature == Feature.JSON_SCHEMA.value and "Grammar" in e.value.alternative


def test_a_pydantic_model_with_bounds_goes_as_enums() -> None:
    from pydantic import BaseModel, Field

    class Ticket(BaseModel):
        eta_days: int = Field(ge=0, le=30)

    body = ADAPTER.build(req(None, output=Ticket), INFO).json
    assert body is not None
    assert body["response_format"]["schema"]["properties"]["eta_days"]["enum"] == list(range(31))


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "string", "maxLength": 32767},
        {"type": "array", "items": {"type": "integer"}, "maxItems": 1500},
        {"type": "string", "pattern": "^[a-f0-9]{1,2000}$"},
    ],
)
def test_repetitions_the_server_would_crash_on_are_refused(schema: dict[str, Any]) -> None:
    with pytest.raises(SchemaNotEnforced, match="SIGSEGV"):
        server_schema({"type": "object", "properties": {"x": schema}})


@pytest.mark.parametrize("pattern", [r"^[a-zA-Z0-9_\.]+$", r"^[\d]+$", r"^[^\s]+$", r"^a[\/b]$"])
def test_an_escape_in_a_character_class_the_server_would_crash_on_is_refused(pattern: str) -> None:
    # JSONSchemaBench Github_trivial/o10018's "^[a-zA-Z0-9_\.]+$" killed the server (SIGSEGV)
    with pytest.raises(SchemaNotEnforced, match=r"inside \[\.\.\.\].*SIGSEGV"):
        server_schema({"type": "object", "properties": {"key": {"type": "string", "pattern": pattern}}})


@pytest.mark.parametrize(
    "pattern", [r"^[a-z.]+$", r"^\.[a-z]\d$", r"^[\]\[\-\\]$", r"^\[a\.\]$", r"^[\x41-\u0042\n]$"]
)
def test_escapes_the_grammar_parser_reads_and_escapes_outside_classes_are_sent(pattern: str) -> None:
    schema = {"type": "string", "pattern": pattern}
    assert server_schema(schema) == schema


GBNF_CHECK = """
import glob, json, os, sys
import llama_cpp
from llama_cpp import Llama
gguf = sorted(glob.glob(os.path.expanduser("~/.cache/unillm/gguf/model-*.gguf")))[0]
vocab = llama_cpp.llama_model_get_vocab(Llama(model_path=gguf, vocab_only=True, verbose=False)._model.model)
grammar = lambda esc: ("root ::= [a" + esc + "]+\\n").encode()
init = llama_cpp.llama_sampler_init_grammar
print(json.dumps([bool(init(vocab, grammar(e), b"root")) for e in sys.argv[1:]]))
"""


@pytest.mark.engine
def test_the_class_escapes_refused_are_those_llama_cpps_grammar_parser_refuses() -> None:
    import subprocess
    from pathlib import Path

    if not list((Path.home() / ".cache/unillm/gguf").glob("model-*.gguf")):
        pytest.skip("no GGUF test model in ~/.cache/unillm/gguf")
    escapes = [
        r"\.",
        r"\\",
        r"\]",
        r"\[",
        '\\"',
        r"\-",
        r"\n",
        r"\t",
        r"\r",
        r"\x41",
        r"\u0041",
        r"\d",
        r"\w",
        r"\s",
        r"\/",
        r"\^",
        r"\$",
        r"\(",
    ]
    python = Path.home() / ".cache/unillm/envs/llamacpp/bin/python"
    run = subprocess.run(
        [str(python), "-c", GBNF_CHECK, *escapes], capture_output=True, text=True, check=True
    )
    parsed = json.loads(run.stdout.strip().splitlines()[-1])
    assert parsed == [class_escape(f"^[a{e}]+$") is None for e in escapes]
    assert not all(parsed) and any(parsed)


CONVERTER_CHECK = r"""
import json, sys
from llama_cpp.llama_grammar import LlamaGrammar

def reads(schema):
    try:
        LlamaGrammar.from_json_schema(json.dumps(schema), verbose=False)
        return True
    except Exception:
        return False

print(json.dumps([reads(s) for s in json.loads(sys.argv[1])]))
"""

#: Schemas llama-cpp-python's converter reads or not (and nothing else unillm refuses).
READABLE = [
    {"type": "object", "properties": {"a": {}}},
    {"type": "object", "required": ["a"]},
    {"type": "array", "items": {"type": "string"}},
    {"type": "array"},
    {"$defs": {"a": {"type": "string"}}, "type": "object", "properties": {"x": {"$ref": "#/$defs/a"}}},
    {"type": ["string", "null"]},
    {"type": "object", "additionalProperties": {"type": "integer"}},
    {"enum": [1, 2]},
    {"title": "T", "type": "object", "properties": {"a": {"type": "string", "title": "A"}}},
    {"properties": {"a": {"type": "boolean"}}},
    {"type": "string", "format": "date"},
]
UNREADABLE = [
    {"type": "object", "properties": {"a": {"description": "any value"}}},
    {"required": ["a"]},
    {"type": "array", "items": {}},
    {"$ref": "#"},
    {"type": "any"},
    {"anyOf": [{"type": "string"}, {"title": "x"}]},
    {"type": "object", "properties": {"a": {"type": "array", "items": {"required": ["b"]}}}},
    {"type": "array", "items": True},
    {"anyOf": [{"type": "string"}, True]},
    {"type": "object", "properties": {"a": False}},
]


@pytest.mark.engine
def test_the_schemas_refused_as_unreadable_are_those_the_converter_cannot_read() -> None:
    """llama-cpp-python's server answers with any JSON when its converter raises: unillm refuses
    exactly those (checked against the converter in the llama.cpp env)."""
    import subprocess
    from pathlib import Path

    python = Path.home() / ".cache/unillm/envs/llamacpp/bin/python"
    if not python.exists():
        pytest.skip("no llama.cpp env (unillm setup llamacpp)")
    schemas = READABLE + UNREADABLE
    run = subprocess.run(
        [str(python), "-c", CONVERTER_CHECK, json.dumps(schemas)], capture_output=True, text=True, check=True
    )
    read = json.loads(run.stdout.strip().splitlines()[-1])
    assert read == [True] * len(READABLE) + [False] * len(UNREADABLE)
    for schema in READABLE:
        server_schema(schema)
    for schema in UNREADABLE:
        with pytest.raises(SchemaNotEnforced):
            server_schema(schema)


def test_repetitions_up_to_the_limit_are_sent() -> None:
    schema = {"type": "string", "maxLength": 1000, "minLength": 3000}  # a minimum does not nest
    assert server_schema(schema) == schema
    assert server_schema({"type": "string", "pattern": "^[a-f0-9]{24}$"})
