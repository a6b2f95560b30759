"""In-process MLX decoding speed with and without constraints, per grammar engine, in one run.

    .venv/bin/python benchmarks/mlx_constrained.py              # tiny model, ~1 min on 2 cores
    .venv/bin/python benchmarks/mlx_constrained.py --quick      # ~15 s
    .venv/bin/python benchmarks/mlx_constrained.py --model /models/qwen-4bit --tokens 256

Greedy decoding with mlx-lm's ``stream_generate`` on the tiny random model (or ``--model``):
no constraint, then the same JSON schema and regex enforced by each grammar engine that is
importable here (llguidance: the one unillm uses; xgrammar; outlines-core), then unillm's own
in-process engine end to end. Each row reports tokens/s (best of ``--rounds``), the time to
build the constraint, and whether every answer satisfied it. Engines that are not installed
show up as ``not installed``. The last line is the JSON summary.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import re
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

SCHEMA: dict[str, Any] = {
    "type": "array",
    "minItems": 8,
    "maxItems": 8,
    "items": {
        "type": "object",
        "additionalProperties": False,
        "required": ["name", "n", "ok"],
        "properties": {
            "name": {"type": "string", "maxLength": 10},
            "n": {"type": "integer", "minimum": 0, "maximum": 999},
            "ok": {"type": "boolean"},
        },
    },
}
REGEX = r"([a-z]{2,8} [0-9]{1,3}, ){12}end"
PROMPT = "Write the records:"

Factory = Callable[[str, Any, int], Any]  # (kind, spec, prompt_len) -> logits processor


def _json_ok(text: str) -> bool:
    try:
        import jsonschema

        jsonschema.validate(json.loads(text), SCHEMA)
        return True
    except Exception:  # any failure means "not valid"
        return False


CHECKS: dict[str, Callable[[str], bool]] = {
    "json": _json_ok,
    "regex": lambda t: re.fullmatch(REGEX, t) is not None,
}
SPECS: dict[str, Any] = {"json": SCHEMA, "regex": REGEX}


def _bits_to_mx(words: Any, vocab: int, logits: Any) -> Any:
    import mlx.core as mx
    import numpy as np

    bits = np.unpackbits(np.ascontiguousarray(words).view(np.uint8), bitorder="little")[:vocab]
    allowed = np.zeros(logits.shape[-1], dtype=bool)
    allowed[: len(bits)] = bits[: logits.shape[-1]]
    return mx.where(mx.array(allowed), logits, mx.array(-np.inf, dtype=logits.dtype))


def llguidance_factory(tokenizer: Any, vocab: int) -> Factory:
    from unillm_mlx.grammar import GrammarProcessor, compile_constraint, tokenizer_for

    lltok = tokenizer_for(tokenizer, vocab)

    def make(kind: str, spec: Any, prompt_len: int) -> Any:
        return GrammarProcessor(lltok, compile_constraint({kind: spec}, lltok), skip=prompt_len)

    return make


def xgrammar_factory(tokenizer: Any, vocab: int) -> Factory:
    import xgrammar as xgr  # type: ignore[import-not-found, unused-ignore]

    hf = tokenizer._tokenizer
    stops = sorted(tokenizer.eos_token_ids)
    info = xgr.TokenizerInfo.from_huggingface(hf, vocab_size=vocab, stop_token_ids=stops)
    compiler = xgr.GrammarCompiler(info)

    def make(kind: str, spec: Any, prompt_len: int) -> Any:
        compiled = (
            compiler.compile_json_schema(json.dumps(spec), any_whitespace=False)
            if kind == "json"
            else compiler.compile_regex(spec)
        )
        matcher = xgr.GrammarMatcher(compiled)
        bitmask = xgr.allocate_token_bitmask(1, vocab)
        seen = [prompt_len]

        def processor(tokens: Any, logits: Any) -> Any:
            for t in tokens[seen[0] :].tolist():
                if not matcher.is_terminated():
                    matcher.accept_token(t)
            seen[0] = tokens.size
            if not matcher.is_terminated():  # past the end (mlx-lm decodes one step ahead): keep the mask
                matcher.fill_next_token_bitmask(bitmask)
            return _bits_to_mx(bitmask.numpy(), vocab, logits)

        return processor

    return make


def outlines_factory(tokenizer: Any, vocab: int) -> Factory:
    import mlx.core as mx
    import numpy as np
    from outlines_core import Guide, Index, Vocabulary  # type: ignore[import-not-found, unused-ignore]
    from outlines_core.json_schema import build_regex_from_schema  # type: ignore[import-not-found, unused-ignore]

    eos = min(tokenizer.eos_token_ids)
    by_bytes: dict[bytes, list[int]] = {}
    special = set(tokenizer._tokenizer.all_special_ids)
    for token_id in range(vocab):
        if token_id in special:
            continue
        raw = tokenizer._tokenizer.convert_ids_to_tokens(token_id)
        data = bytes(_BYTE_DECODER[c] for c in raw) if all(c in _BYTE_DECODER for c in raw) else raw.encode()
        if data:
            by_bytes.setdefault(data, []).append(token_id)
    vocabulary = Vocabulary(eos, by_bytes)

    def make(kind: str, spec: Any, prompt_len: int) -> Any:
        regex = build_regex_from_schema(json.dumps(spec), whitespace_pattern="") if kind == "json" else spec
        guide = Guide(Index(regex, vocabulary))
        seen = [prompt_len]

        def processor(tokens: Any, logits: Any) -> Any:
            for t in tokens[seen[0] :].tolist():
                if not guide.is_finished():
                    guide.advance(t, return_tokens=False)
            seen[0] = tokens.size
            allowed = np.zeros(logits.shape[-1], dtype=bool)
            allowed[np.asarray(guide.get_tokens())] = True
            return mx.where(mx.array(allowed), logits, mx.array(-np.inf, dtype=logits.dtype))

        return processor

    return make


def _byte_decoder() -> dict[str, int]:
    bs = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs, strict=True)}


_BYTE_DECODER = _byte_decoder()
ENGINES: dict[str, tuple[str, Callable[[Any, int], Factory]]] = {
    "llguidance": ("llguidance", llguidance_factory),
    "xgrammar": ("xgrammar", xgrammar_factory),
    "outlines-core": ("outlines_core", outlines_factory),
}


def _bind(make: Factory, kind: str, spec: Any, prompt_len: int) -> Callable[[], Any]:
    return lambda: make(kind, spec, prompt_len)


def _version(dist: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return None


def decode(
    model: Any, tokenizer: Any, prompt: list[int], max_tokens: int, processor: Any | None
) -> tuple[str, int, float]:
    import mlx.core as mx
    from mlx_lm import stream_generate
    from mlx_lm.sample_utils import make_sampler

    text, tokens = [], 0
    started = time.perf_counter()
    processors = [processor] if processor else None
    for out in stream_generate(
        model,
        tokenizer,
        mx.array(prompt),
        max_tokens=max_tokens,
        sampler=make_sampler(0.0),
        logits_processors=processors,
    ):
        text.append(out.text)
        tokens = out.generation_tokens
    return "".join(text), tokens, time.perf_counter() - started


def run(args: argparse.Namespace) -> dict[str, Any]:
    from mlx_lm import load

    model_path = args.model
    if model_path is None:
        from unillm.testing.tiny_model import build_tiny_model

        model_path = str(build_tiny_model().path)
    model, tokenizer = load(model_path)[:2]
    vocab = int(getattr(model.args, "vocab_size", 0) or len(tokenizer.vocab))
    prompt = list(tokenizer.encode(PROMPT))
    decode(model, tokenizer, prompt, 16, None)  # warm-up
    rows: list[dict[str, Any]] = []

    def best_of(make: Callable[[], Any | None]) -> tuple[float, int, str, list[float]]:
        rates, text, tokens = [], "", 0
        for _ in range(args.rounds):
            text, tokens, seconds = decode(model, tokenizer, prompt, args.tokens, make())
            rates.append(tokens / seconds)
        return max(rates), tokens, text, rates

    rate, tokens, _, rates = best_of(lambda: None)
    rows.append(
        {
            "engine": "none",
            "constraint": "-",
            "version": _version("mlx-lm"),
            "tok_s": rate,
            "tok_s_median": statistics.median(rates),
            "tokens": tokens,
            "build_ms": 0.0,
            "valid": None,
        }
    )
    baseline = rate
    for name, (module, factory) in ENGINES.items():
        if importlib.util.find_spec(module) is None:
            rows.append({"engine": name, "constraint": "*", "error": "not installed"})
            continue
        try:
            t0 = time.perf_counter()
            make = factory(tokenizer, vocab)
            setup_ms = (time.perf_counter() - t0) * 1e3
        except Exception as e:  # reported as a row
            rows.append({"engine": name, "constraint": "*", "error": f"{type(e).__name__}: {e}"[:120]})
            continue
        for kind, spec in SPECS.items():
            try:
                t0 = time.perf_counter()
                make(kind, spec, len(prompt))
                build_ms = (time.perf_counter() - t0) * 1e3
                rate, tokens, text, rates = best_of(_bind(make, kind, spec, len(prompt)))
                rows.append(
                    {
                        "engine": name,
                        "constraint": kind,
                        "version": _version(name),
                        "tok_s": rate,
                        "tok_s_median": statistics.median(rates),
                        "tokens": tokens,
                        "build_ms": build_ms,
                        "setup_ms": setup_ms,
                        "valid": CHECKS[kind](text),
                        "slowdown": baseline / rate,
                    }
                )
            except Exception as e:  # reported as a row
                rows.append({"engine": name, "constraint": kind, "error": f"{type(e).__name__}: {e}"[:120]})
    rows += _through_unillm(model_path, args)
    return {
        "benchmark": "mlx_constrained",
        "model": model_path,
        "vocab": vocab,
        "max_tokens": args.tokens,
        "rounds": args.rounds,
        "python": sys.version.split()[0],
        "rows": rows,
    }


def _through_unillm(model_path: str, args: argparse.Namespace) -> list[dict[str, Any]]:
    """unillm's in-process engine end to end (LLM.generate / LLM.stream), plain and with the JSON schema."""
    import anyio

    import unillm

    rows: list[dict[str, Any]] = []

    async def go() -> None:
        async with unillm.launch("mlx", model=model_path, in_process=True) as llm:
            await llm.generate(PROMPT, max_tokens=8)
            for label, output in (("-", None), ("json", SCHEMA)):
                for mode in ("generate", "stream"):
                    rates, valid = [], True
                    for _ in range(args.rounds):
                        started = time.perf_counter()
                        if mode == "generate":
                            r = await llm.generate(
                                PROMPT, output=output, max_tokens=args.tokens, temperature=0
                            )
                            text, tokens = r.text, r.usage.completion_tokens
                        else:
                            tokens = 0
                            async with llm.stream(
                                PROMPT, output=output, max_tokens=args.tokens, temperature=0
                            ) as stream:
                                async for delta in stream:
                                    tokens = delta.usage.completion_tokens if delta.usage else tokens
                            text = stream.text
                        seconds = time.perf_counter() - started
                        if output is not None:
                            valid = valid and _json_ok(text)
                        rates.append(tokens / seconds)
                    rows.append(
                        {
                            "engine": f"unillm in-process {mode}",
                            "constraint": label,
                            "version": _version("unillm-mlx"),
                            "tok_s": max(rates),
                            "tok_s_median": statistics.median(rates),
                            "tokens": tokens,
                            "build_ms": None,
                            "valid": valid if output is not None else None,
                        }
                    )

    try:
        anyio.run(go)
    except Exception as e:  # reported as a row
        error = f"{type(e).__name__}: {e}"[:120]
        rows.append({"engine": "unillm in-process", "constraint": "*", "error": error})
    return rows


def table(summary: dict[str, Any]) -> str:
    lines = [
        f"model {summary['model']} (vocab {summary['vocab']}), greedy, up to {summary['max_tokens']} "
        f"tokens, best of {summary['rounds']}",
        f"{'engine':<26} {'constraint':<10} {'tok/s':>8} {'tokens':>7} {'build ms':>9} {'valid':>6}",
    ]
    for row in summary["rows"]:
        if "error" in row:
            lines.append(f"{row['engine']:<26} {row['constraint']:<10} {row['error']}")
            continue
        build = "" if row.get("build_ms") is None else f"{row['build_ms']:.1f}"
        valid = "" if row.get("valid") is None else ("yes" if row["valid"] else "NO")
        lines.append(
            f"{row['engine']:<26} {row['constraint']:<10} {row['tok_s']:>8.0f} {row['tokens']:>7} "
            f"{build:>9} {valid:>6}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--model", help="an mlx-lm model folder or hub id (default: the tiny model)")
    parser.add_argument("--tokens", type=int, default=400, help="max tokens per answer")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="2 rounds of 200 tokens")
    args = parser.parse_args(argv)
    if args.quick:
        args.rounds, args.tokens = 2, 200
    summary = run(args)
    print(table(summary))
    print(json.dumps(summary, separators=(",", ":")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
