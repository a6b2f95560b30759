"""The in-process constraint machinery on its own: schema strictness, compile errors, rollback, PEFT."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest

mx = pytest.importorskip(
    "mlx.core",
    reason="mlx-lm is not installed: pip install 'unillm-mlx[inprocess]' "
    "(this adapter's dev extra; ./run setup installs it)",
)
from safetensors.numpy import load_file  # noqa: E402
from transformers import PreTrainedTokenizerFast  # noqa: E402
from unillm_mlx.grammar import (  # noqa: E402
    ConstraintError,
    GrammarProcessor,
    compile_constraint,
    strict_schema,
    tokenizer_for,
)
from unillm_mlx.peft import convert_peft_adapter, is_peft_adapter  # noqa: E402

from unillm.testing.tiny_model import TinyModel  # noqa: E402


@pytest.fixture(scope="module")
def lltok(tiny: TinyModel) -> Any:
    hf = PreTrainedTokenizerFast(tokenizer_file=str(tiny.path / "tokenizer.json"), eos_token="</s>")
    return tokenizer_for(hf, tiny.vocab_size)


def test_mlx_strict_schema_closes_open_objects_like_vllm() -> None:
    schema: dict[str, Any] = {
        "type": "object",
        "properties": {
            "a": {"type": "object", "properties": {"b": {"type": "integer"}}},
            "c": {"type": "object", "additionalProperties": {"type": "string"}},
            "d": {"enum": [{"properties": {}}]},
        },
        "$defs": {"X": {"properties": {"y": {"type": "string"}}}},
    }
    strict: dict[str, Any] = strict_schema(schema)
    assert strict["additionalProperties"] is False
    assert strict["properties"]["a"]["additionalProperties"] is False
    assert strict["properties"]["c"]["additionalProperties"] == {"type": "string"}  # explicit: kept
    assert strict["properties"]["d"] == schema["properties"]["d"]  # values, not schemas
    assert strict["$defs"]["X"]["additionalProperties"] is False


@pytest.mark.parametrize(
    ("structured", "message"),
    [
        ({"regex": "(("}, "invalid regex"),
        ({"grammar": "root ::= nowhere"}, "invalid grammar"),
        ({"lark": "start: missing_rule"}, "invalid lark"),
        ({"json": {"type": "object", "x-unknown-keyword": 1, "properties": {"a": {"type": "nope"}}}}, "json"),
        ({"choice": []}, "non-empty list"),
        ({"regex": "a", "choice": ["a"]}, "exactly one"),
        ({"xml": "<a/>"}, "unknown constraint"),
    ],
)
def test_mlx_invalid_constraints_raise_constraint_error(
    structured: dict[str, Any], message: str, lltok: Any
) -> None:
    with pytest.raises(ConstraintError, match=message):
        compile_constraint(structured, lltok)


def _allowed(processor: GrammarProcessor, tokens: list[int], vocab: int) -> Any:
    out = processor(mx.array(tokens), mx.zeros((1, vocab)))
    return np.isfinite(np.array(out[0]))


def test_mlx_grammar_processor_rolls_back_rejected_draft_tokens(lltok: Any, tiny: TinyModel) -> None:
    grammar = compile_constraint(
        {
            "json": {
                "type": "object",
                "properties": {
                    "n": {"type": "integer", "minimum": 0, "maximum": 999},
                    "s": {"type": "string", "maxLength": 6},
                },
                "required": ["n", "s"],
            }
        },
        lltok,
    )
    vocab, prompt = tiny.vocab_size, [0, 5, 7]
    rng = random.Random(1)
    walker = GrammarProcessor(lltok, grammar, skip=len(prompt))
    seq: list[int] = []
    for _ in range(12):  # a valid token sequence, chosen at random among allowed tokens
        allowed = np.flatnonzero(_allowed(walker, prompt + seq, vocab))
        choices = [int(t) for t in allowed if t != 1] or [1]
        seq.append(rng.choice(choices))
    spec = GrammarProcessor(lltok, grammar, skip=len(prompt))
    _allowed(spec, prompt + seq[:10], vocab)  # drafted ahead...
    for cut in (7, 9, 3, 11):  # ...then rejected and re-extended, as speculative decoding does
        fresh = GrammarProcessor(lltok, grammar, skip=len(prompt))
        assert (_allowed(spec, prompt + seq[:cut], vocab) == _allowed(fresh, prompt + seq[:cut], vocab)).all()


def test_mlx_grammar_processor_allows_only_eos_once_complete(lltok: Any, tiny: TinyModel) -> None:
    grammar = compile_constraint({"choice": ["ab"]}, lltok)
    tokens = lltok.tokenize_str("ab")
    processor = GrammarProcessor(lltok, grammar, skip=0)
    allowed = _allowed(processor, tokens, tiny.vocab_size)
    assert np.flatnonzero(allowed).tolist() == [1] and processor.accepting  # </s> only
    assert np.flatnonzero(_allowed(processor, [*tokens, 1], tiny.vocab_size)).tolist() == [1]


def test_mlx_peft_conversion_gives_mlx_the_same_weight_update(tiny: TinyModel, tmp_path: Path) -> None:
    from mlx_lm import load

    src = tiny.loras["sql"]
    dst = convert_peft_adapter(src, tmp_path / "sql")
    assert is_peft_adapter(src) and not is_peft_adapter(dst)
    config = json.loads((src / "adapter_config.json").read_text())
    peft = load_file(str(src / "adapter_model.safetensors"))
    model, _ = load(str(tiny.path), adapter_path=str(dst))[:2]
    layer = model.layers[1].self_attn.q_proj
    fused = np.array(layer.fuse().weight) - np.array(layer.linear.weight)
    key = "base_model.model.model.layers.1.self_attn.q_proj"
    want = config["lora_alpha"] / config["r"] * peft[key + ".lora_B.weight"] @ peft[key + ".lora_A.weight"]
    np.testing.assert_allclose(fused, want, rtol=1e-4, atol=1e-5)
