"""Constrained decoding for the in-process engine: llguidance masks mlx-lm's logits every step.

    processor = GrammarProcessor(tokenizer_for(tokenizer, vocab), compile_constraint({"regex": "[0-9]+"}),
                                 skip=len(prompt_ids))
    stream_generate(model, tokenizer, prompt_ids, logits_processors=[processor], ...)

``compile_constraint`` takes the ``structured_outputs`` field of a request (one of ``json``,
``regex``, ``choice``, ``grammar`` (GBNF/EBNF) or ``lark``). JSON allows no free whitespace unless
the schema asks for it (``"x-guidance": {"whitespace_flexible": true}``) and no undeclared keys
unless the schema says ``additionalProperties`` (as vLLM does): with weak models, either lets
them write until max_tokens. The processor follows the tokens mlx-lm passes it,
rolling the matcher back when speculative decoding rejects draft tokens.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import numpy as np

__all__ = ["ConstraintError", "GrammarProcessor", "compile_constraint", "strict_schema", "tokenizer_for"]

_KINDS = ("json", "regex", "choice", "grammar", "lark")


class ConstraintError(ValueError):
    """The constraint cannot be compiled (invalid schema, regex or grammar)."""


def tokenizer_for(tokenizer: Any, n_vocab: int) -> Any:
    """The llguidance tokenizer for an mlx-lm tokenizer (built once per model; ~1 s for 150k tokens)."""
    from llguidance import LLTokenizer

    # an mlx-lm TokenizerWrapper holds the Hugging Face tokenizer; that one holds the Rust backend
    hf = next(
        (
            t
            for t in (tokenizer, getattr(tokenizer, "_tokenizer", None))
            if getattr(t, "backend_tokenizer", None) is not None
        ),
        None,
    )
    if hf is None:
        raise ConstraintError("constrained decoding needs a fast (tokenizers-based) tokenizer")
    backend = hf.backend_tokenizer
    eos = getattr(tokenizer, "eos_token_ids", None) or hf.eos_token_id
    eos = sorted([eos] if isinstance(eos, int) else eos)
    return LLTokenizer(backend.to_str(), n_vocab=n_vocab, eos_token=eos)


def compile_constraint(structured: Mapping[str, Any], lltokenizer: Any = None) -> str:
    """The llguidance grammar for a ``structured_outputs`` mapping with exactly one key."""
    import llguidance
    from llguidance import LLMatcher

    if not isinstance(structured, Mapping) or len(structured) != 1:
        raise ConstraintError(f"structured_outputs needs exactly one of {', '.join(_KINDS)}")
    ((kind, value),) = structured.items()
    try:
        if kind == "json":
            if not isinstance(value, (Mapping, bool)):
                raise ConstraintError("structured_outputs.json must be a JSON schema object")
            grammar = LLMatcher.grammar_from_json_schema(
                json.dumps(strict_schema(value)), defaults={"whitespace_flexible": False}
            )
        elif kind == "regex":
            grammar = LLMatcher.grammar_from_regex(_text(kind, value))
        elif kind == "choice":
            if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
                raise ConstraintError("structured_outputs.choice must be a non-empty list of strings")
            grammar = LLMatcher.grammar_from_lark("start: " + " | ".join(json.dumps(v) for v in value))
        elif kind == "grammar":
            grammar = llguidance.grammar_from("gbnf", _text(kind, value))
        elif kind == "lark":
            grammar = LLMatcher.grammar_from_lark(_text(kind, value))
        else:
            raise ConstraintError(f"unknown constraint {kind!r}; expected one of {', '.join(_KINDS)}")
    except ValueError as e:
        raise ConstraintError(f"invalid {kind} constraint: {e}") from None
    is_error, messages = LLMatcher.validate_grammar_with_warnings(grammar, lltokenizer)
    if is_error:
        raise ConstraintError(f"invalid {kind} constraint: {'; '.join(messages)}")
    return str(grammar)


def strict_schema(schema: Any) -> Any:
    """``schema`` with ``additionalProperties: false`` wherever an object leaves it open.

    vLLM's default backend (xgrammar, strict mode) forbids undeclared keys the same way, so one
    schema (e.g. a pydantic model) gives the same answers on every engine instead of letting a
    weak model add keys until max_tokens.
    """
    if isinstance(schema, list):
        return [strict_schema(s) for s in schema]
    if not isinstance(schema, Mapping):
        return schema
    out = {
        k: strict_schema(v) if k not in ("enum", "const", "default", "examples") else v
        for k, v in schema.items()
    }
    if "properties" in schema and isinstance(schema["properties"], Mapping):
        out["properties"] = {k: strict_schema(v) for k, v in schema["properties"].items()}
    is_object = schema.get("type") == "object" or "properties" in schema
    if is_object and "additionalProperties" not in schema and "patternProperties" not in schema:
        out["additionalProperties"] = False
    return out


def _text(kind: str, value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise ConstraintError(f"structured_outputs.{kind} must be a non-empty string")
    return value


class GrammarProcessor:
    """An mlx-lm logits processor that allows only tokens the grammar accepts next.

    mlx-lm calls it with every token so far (``skip`` leading ones are not generated: the prompt,
    or just its last token under speculative decoding) and the next token's logits.
    """

    def __init__(self, lltokenizer: Any, grammar: str, *, skip: int) -> None:
        from llguidance import LLMatcher
        from llguidance.numpy import allocate_token_bitmask

        self._matcher = LLMatcher(lltokenizer, grammar)
        if self._matcher.is_error():
            raise ConstraintError(self._matcher.get_error())
        self._vocab = int(lltokenizer.vocab_size)
        self._bitmask = allocate_token_bitmask(1, self._vocab)
        self._consumed: list[int] = []
        self._skip = skip

    @property
    def accepting(self) -> bool:
        """True when the text so far is a complete answer."""
        return bool(self._matcher.is_accepting())

    def __call__(self, tokens: Any, logits: Any) -> Any:
        import mlx.core as mx
        from llguidance.numpy import fill_next_token_bitmask

        self._sync(tokens[self._skip :].tolist() if tokens.size > self._skip else [])
        fill_next_token_bitmask(self._matcher, self._bitmask, 0)
        bits = np.unpackbits(self._bitmask.view(np.uint8), bitorder="little")
        allowed = np.zeros(logits.shape[-1], dtype=bool)
        width = min(self._vocab, logits.shape[-1])
        allowed[:width] = bits[:width]
        return mx.where(mx.array(allowed), logits, mx.array(-np.inf, dtype=logits.dtype))

    def _sync(self, generated: list[int]) -> None:
        consumed = self._consumed
        common = 0
        limit = min(len(generated), len(consumed))
        while common < limit and generated[common] == consumed[common]:
            common += 1
        if common < len(consumed):  # speculative decoding rejected draft tokens
            if not self._matcher.rollback(len(consumed) - common):
                raise RuntimeError(f"grammar rollback failed: {self._matcher.get_error()}")
            del consumed[common:]
        for token in generated[common:]:
            if self._matcher.is_stopped():
                break  # mlx-lm computes one step past the end-of-sequence token
            if not self._matcher.consume_token(token):
                raise RuntimeError(f"a token outside the grammar was sampled: {self._matcher.get_error()}")
            consumed.append(token)
