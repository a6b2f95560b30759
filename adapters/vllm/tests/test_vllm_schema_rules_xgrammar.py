"""The wrong-compile rules of ``unillm.adapter.schemas.xgrammar``, confirmed with xgrammar itself.

Runs xgrammar's ``Grammar.from_json_schema`` (strict mode, as vLLM calls it) in vLLM's managed env
(xgrammar 0.2.8), and the string rewrite's UTF-8 checks in SGLang's CPU env too (0.2.7, which
reads a class beyond ASCII differently): a grammar build, no server. Marked ``engine`` because it
needs those envs.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest

from unillm.adapter.schemas import xgrammar_problem, xgrammar_strings
from unillm.testing.tiny_model import default_cache_dir

pytestmark = pytest.mark.engine
OBJ = {"type": "object"}

#: One process answers every question (importing xgrammar takes seconds): a line ``[schema,
#: text]`` in, a line out (``accepts``, ``rejects`` or ``error``).
PROBE = """
import json, sys
import xgrammar as xgr
from xgrammar.testing import _is_grammar_accept_string as accepts
compiler = xgr.GrammarCompiler(xgr.TokenizerInfo(["<eos>"], stop_token_ids=[0]))

def accepts_bytes(grammar, data):  # whole: every byte taken, then the end
    matcher = xgr.GrammarMatcher(compiler.compile_grammar(grammar))
    return matcher.accept_string(data) and matcher.accept_token(0)

for line in sys.stdin:
    schema, text, as_hex = json.loads(line)
    try:
        grammar = xgr.Grammar.from_json_schema(schema, any_whitespace=False, separators=(",", ":"))
    except Exception:
        print("error", flush=True)
    else:
        ok = accepts_bytes(grammar, bytes.fromhex(text)) if as_hex else accepts(grammar, text)
        print("accepts" if ok else "rejects", flush=True)
"""
ENVS = default_cache_dir().expanduser() / "envs"
VLLM_PYTHON = ENVS / "vllm/bin/python"
PYTHONS = {"vllm": VLLM_PYTHON, "sglang": ENVS / "sglang-cpu/bin/python"}  # xgrammar 0.2.8, 0.2.7
_probe: dict[str, subprocess.Popen[str]] = {}


@pytest.fixture(scope="module", autouse=True)
def probe_process() -> Iterator[None]:
    """xgrammar's process in each env for this module, stopped after it."""
    for env, python in PYTHONS.items():
        _probe[env] = subprocess.Popen(
            [str(python), "-c", PROBE], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
    yield
    processes = list(_probe.values())
    _probe.clear()
    for process in processes:
        assert process.stdin is not None
        process.stdin.close()
        assert process.wait(timeout=30) == 0


def xgrammar(schema: dict[str, Any], text: str | bytes, env: str = "vllm") -> str:
    """xgrammar's verdict on ``text`` under ``schema`` (compiled as vLLM compiles it), in ``env``'s
    xgrammar; bytes are fed as they are (they need not be UTF-8)."""
    process = _probe[env]
    assert process.stdin is not None and process.stdout is not None
    line = [schema, text.hex(), True] if isinstance(text, bytes) else [schema, text, False]
    process.stdin.write(json.dumps(line) + "\n")
    process.stdin.flush()
    verdict = process.stdout.readline().strip()
    assert verdict in ("accepts", "rejects", "error"), f"the xgrammar process ended: {verdict!r}"
    return verdict


def test_xgrammar_accepts_an_object_without_a_required_name_missing_from_properties() -> None:
    assert xgrammar({"type": "object", "required": ["a"]}, "{}") == "accepts"


def test_xgrammar_drops_the_properties_beside_one_of() -> None:
    schema = {
        "type": "object",
        "properties": {"x": {"type": "integer"}},
        "required": ["x"],
        "oneOf": [{"properties": {"a": {"type": "string"}}, "required": ["a"]}],
    }
    assert xgrammar(schema, '{"a":"s"}') == "accepts"


def test_xgrammar_drops_the_properties_beside_a_single_all_of() -> None:
    schema = {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"], "allOf": [{}]}
    assert xgrammar(schema, "{}") == "accepts"


def test_xgrammar_fails_on_min_items_without_items() -> None:
    assert xgrammar({"type": "array", "minItems": 1}, "[1]") == "error"


def test_xgrammar_compiles_min_items_with_items_true() -> None:
    assert xgrammar({"type": "array", "minItems": 1, "items": True}, "[1]") == "accepts"


@pytest.mark.parametrize(
    ("schema", "text"),
    [
        ({"type": "string", "maxLength": 3, "anyOf": [{"type": "string"}]}, '"abcdef"'),
        ({"minimum": 5, "anyOf": [{"type": "integer"}]}, "1"),
        ({"type": "array", "items": {"type": "integer"}, "anyOf": [{"type": "array"}]}, '["a"]'),
        ({"type": "object", "additionalProperties": False, "anyOf": [OBJ]}, '{"a":1}'),
        ({"enum": [1, "a"], "anyOf": [{"type": "integer"}]}, '"a"'),
        ({"anyOf": [{"type": "integer"}], "oneOf": [{"type": "string"}]}, "1"),
        ({"type": "integer", "oneOf": [{"minimum": 0}]}, '"x"'),
        ({"minimum": 5, "allOf": [{"type": "integer"}]}, "1"),
    ],
)
def test_xgrammar_drops_a_constraining_keyword_beside_a_combinator(schema: dict[str, Any], text: str) -> None:
    assert xgrammar(schema, text) == "accepts"


def test_xgrammar_keeps_a_combinator_beside_annotations() -> None:
    schema = {"title": "t", "description": "d", "default": 1, "examples": [1], "anyOf": [{"type": "integer"}]}
    assert xgrammar(schema, '"x"') == "rejects"


@pytest.mark.parametrize(
    ("beside", "target", "text"),
    [
        ({"minimum": 5}, {"type": "integer"}, "1"),
        ({"enum": ["x"]}, {"type": "string"}, '"y"'),
        ({"properties": {"b": {"type": "integer"}}, "required": ["b"]}, OBJ, "{}"),
        ({"type": "string"}, {}, "1"),
    ],
)
def test_xgrammar_drops_a_constraining_keyword_beside_a_ref(
    beside: dict[str, Any], target: dict[str, Any], text: str
) -> None:
    assert xgrammar({"$ref": "#/$defs/a", **beside, "$defs": {"a": target}}, text) == "accepts"


def test_xgrammar_keeps_a_ref_beside_annotations() -> None:
    schema = {"$ref": "#/$defs/a", "title": "t", "default": 1, "$defs": {"a": {"type": "integer"}}}
    assert xgrammar(schema, '"x"') == "rejects"


def test_xgrammar_ignores_not() -> None:
    assert xgrammar({"type": "integer", "not": {"const": 1}}, "1") == "accepts"


@pytest.mark.parametrize("branch", [{"then": {"maximum": 6}}, {"else": {"maximum": 2}}])
def test_xgrammar_ignores_if_then_else(branch: dict[str, Any]) -> None:
    assert (
        xgrammar({"type": "integer", "if": {"minimum": 5}, **branch}, "9" if "then" in branch else "3")
        == "accepts"
    )


def test_xgrammar_ignores_a_lookahead_in_a_pattern() -> None:
    assert xgrammar({"type": "string", "pattern": "^(?!x-).*$"}, '"x-a"') == "accepts"


@pytest.mark.parametrize("pattern", ["^(?<=a)b$", "^(?<!a)b$"])
def test_xgrammar_fails_on_a_lookbehind_in_a_pattern(pattern: str) -> None:
    assert xgrammar({"type": "string", "pattern": pattern}, '"b"') == "error"


def test_xgrammar_honours_a_pattern_with_lookaround_characters_in_a_class() -> None:
    assert xgrammar({"type": "string", "pattern": "^[(?!]+$"}, '"x"') == "rejects"


def test_xgrammar_reads_one_of_as_any_of_and_accepts_a_value_two_branches_share() -> None:
    schema = {"oneOf": [{"type": "integer"}, {"type": "string"}, {"type": "number"}]}
    assert xgrammar(schema, "52") == "accepts"
    assert xgrammar_problem(schema) is not None


COMPILE = """
import json, sys
import xgrammar as xgr
from transformers import AutoTokenizer
compiler = xgr.GrammarCompiler(xgr.TokenizerInfo.from_huggingface(AutoTokenizer.from_pretrained(sys.argv[2])))
for schema in json.loads(sys.argv[1]):
    try:
        compiler.compile_json_schema(json.dumps(schema), strict_mode=True, any_whitespace=False)
        print("ok")
    except Exception:
        print("error")
"""


def test_xgrammar_compiles_a_counted_repetition_up_to_128_and_fails_above(tiny: Any) -> None:
    schemas: list[dict[str, Any]] = [
        {"type": "string", "pattern": "^[a-z]{1,128}$"},
        {"type": "string", "pattern": "^[a-z]{1,129}$"},
        {"type": "object", "patternProperties": {"^a{200}$": {}}},
    ]
    run = subprocess.run(
        [str(VLLM_PYTHON), "-c", COMPILE, json.dumps(schemas), str(tiny.path)],
        capture_output=True,
        text=True,
        check=True,
    )
    assert run.stdout.split() == ["ok", "error", "error"]
    assert [xgrammar_problem(s) is not None for s in schemas] == [False, True, True]


VLLM_CHECK = """
import json, sys
from vllm.v1.structured_output.backend_xgrammar import has_xgrammar_unsupported_json_features as check
print(json.dumps([check(schema) for schema in json.loads(sys.argv[1])]))
"""
# Schemas none of the wrong-compile rules touch, so only vLLM's own check decides.
PARITY: list[dict[str, Any]] = [
    {"type": "object", "properties": {"n": {"type": "integer"}}},
    {"type": "number", "multipleOf": 2},
    {"type": "string", "multipleOf": 2},
    {"type": ["integer", "null"], "multipleOf": 2},
    {"type": "array", "items": {}, "uniqueItems": False},
    {"type": "array", "items": {}, "contains": {}},
    {"uniqueItems": True},
    {"type": "string", "format": "color"},
    {"type": "string", "format": "uuid"},
    {"type": "string", "pattern": "a", "maxLength": 2},
    {"type": "string", "minLength": 1, "maxLength": 2},
    {"type": "object", "propertyNames": {"format": "email", "minLength": 1}},
    {"type": "object", "propertyNames": {"pattern": "a"}},
    {"type": "object", "propertyNames": {}, "unevaluatedProperties": False},
    {"type": "object", "propertyNames": {}, "unevaluatedProperties": True},
    {"type": "object", "patternProperties": {"a": {}, "b": {}}},
    {"type": "object", "patternProperties": {"a": {}}},
    {"allOf": [{}, {}]},
    {"allOf": [{}]},
    {
        "type": "object",
        "properties": {"a/b": {"type": "array", "items": [{"type": "number", "multipleOf": 1}]}},
    },
    {"type": "object", "default": {"type": "number", "multipleOf": 2}},
]


def test_the_vllm_rules_agree_with_vllms_own_check() -> None:
    run = subprocess.run(
        [str(VLLM_PYTHON), "-c", VLLM_CHECK, json.dumps(PARITY)], capture_output=True, text=True, check=True
    )
    vllm_says = json.loads(run.stdout.strip().splitlines()[-1])
    assert vllm_says == [xgrammar_problem(schema) is not None for schema in PARITY]


# -- length-bounded strings (unillm.adapter.schemas.xgrammar_strings) ------------------------
BOUNDED = {"type": "object", "properties": {"n": {"type": "string", "maxLength": 4}}, "required": ["n"]}


@pytest.mark.parametrize("raw", ["\x01", "\t", "\x1f"])
def test_xgrammar_lets_a_raw_control_character_into_a_length_bounded_string(raw: str) -> None:
    # not JSON (RFC 8259 forbids it unescaped): what SGLang's probe saw at temperature 1
    assert xgrammar(BOUNDED, '{"n":"a' + raw + '"}') == "accepts"
    assert xgrammar({**BOUNDED, "properties": {"n": {"type": "string"}}}, '{"n":"a' + raw + '"}') == "rejects"


@pytest.mark.parametrize(
    ("value", "verdict"),
    [("abcd", "accepts"), ("", "accepts"), ("é☃ab", "accepts"), ("abcde", "rejects"), ("a\x01", "rejects")],
)
def test_the_rewritten_bounds_keep_the_count_and_admit_no_control_character(value: str, verdict: str) -> None:
    assert xgrammar(dict(xgrammar_strings(BOUNDED)), '{"n":"' + value + '"}') == verdict


#: Not UTF-8: a surrogate's bytes and overlong forms (a decoder makes each byte one U+FFFD).
NOT_UTF8 = [
    b"\xed\xa0\x80",
    b"\xed\xbf\xbf",
    b"\xe0\x80\x80",
    b"\xe0\x9f\xbf",
    b"\xf0\x80\x80\x80",
    b"\xf0\x8f\xbf\xbf",
]


@pytest.mark.parametrize("raw", NOT_UTF8[:2], ids=lambda b: b.hex())
def test_xgrammar_lets_a_surrogates_bytes_into_a_length_bounded_string(raw: bytes) -> None:
    assert xgrammar(BOUNDED, b'{"n":"' + raw + b'"}') == "accepts"  # overlong forms it keeps out


@pytest.mark.parametrize("raw", NOT_UTF8, ids=lambda b: b.hex())
def test_a_negated_class_lets_bytes_that_are_not_utf8_in(raw: bytes) -> None:
    loose = {"type": "string", "pattern": '^[^"\\\\\\x00-\\x1f]{0,4}$'}  # unillm's rewrite until 2026-12-03
    assert xgrammar({**BOUNDED, "properties": {"n": loose}}, b'{"n":"' + raw + b'"}') == "accepts"


@pytest.mark.parametrize("env", PYTHONS)
@pytest.mark.parametrize("raw", NOT_UTF8, ids=lambda b: b.hex())
def test_the_rewritten_bounds_admit_no_byte_that_is_not_utf8(raw: bytes, env: str) -> None:
    assert xgrammar(dict(xgrammar_strings(BOUNDED)), b'{"n":"' + raw + b'"}', env) == "rejects"


@pytest.mark.parametrize("env", PYTHONS)
@pytest.mark.parametrize(
    "char",
    ["\u07ff", "\u0800", "\u0801", "\ud000", "\ud7ff", "\ue000", "\uffff", "\U00010000", "\U0010ffff"],
)
def test_the_rewritten_bounds_admit_every_character_beside_the_gaps(char: str, env: str) -> None:
    # 0.2.7 once took the lead byte ED (U+D000-U+DFFF) and then no continuation at all: a dead end
    # where SGLang sampled token 0 and answered 500 (the probe's JSON-schema cell, 2026-12-04)
    assert xgrammar(dict(xgrammar_strings(BOUNDED)), ('{"n":"a' + char + '"}').encode(), env) == "accepts"
