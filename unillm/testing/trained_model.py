"""A tiny Llama *trained* on the spot, so greedy answers make sense: ``What is 2+3?`` -> ``5``.

The same architecture as the random tiny model (vLLM, SGLang and MLX load it), a little larger,
trained for a couple of minutes on 2 CPU cores on the synthetic corpus of
:mod:`unillm.testing.tiny_corpus` (arithmetic, capitals, JSON answers, hermes-style tool calls),
with fixed seeds. Built once and cached under ``$UNILLM_CACHE/models/tiny-llama-trained-v<N>``
(or ``~/.cache/unillm``) like :func:`~unillm.testing.tiny_model.build_tiny_model`.

    from unillm.testing.trained_model import build_trained_model

    model = build_trained_model()       # minutes the first time, then instant
    async with unillm.launch("vllm", **cpu_launch_settings("vllm", model, workdir)) as llm:
        (await llm.generate(messages=[{"role": "user", "content": "What is 2+3?"}])).text  # "5"

Training needs torch and transformers, which unillm's own venv does not carry: the trainer
(:mod:`unillm.testing.torch_trainer`) runs as a subprocess of the first interpreter that has
them: ``$UNILLM_TRAIN_PYTHON``, this one, or the managed vLLM env (``unillm setup vllm``), which
every machine that runs vLLM has anyway. The tokenizer, the corpus and the chat template are
made here. The chat template is hermes-style, so vLLM's ``--tool-call-parser hermes`` reads the
model's tool calls (see :mod:`unillm.testing.tiny_corpus` for the tools it knows).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from unillm.testing.tiny_corpus import (
    BOS,
    CHAT_TEMPLATE,
    EOS,
    THINKING_CHAT_TEMPLATE,
    TOOL_CALL_CLOSE,
    TOOL_CALL_OPEN,
    Example,
    compile_template,
    contract,
    corpus,
    render,
)
from unillm.testing.tiny_model import (
    LORA_SEEDS,
    MANIFEST,
    LlamaShape,
    TinyModel,
    default_cache_dir,
    dump_json,
    file_hashes,
    llama_config,
    publish,
    write_lora,
    write_tokenizer_metadata,
)

__all__ = ["THOUGHT", "build_trained_model", "torch_python"]

#: Bump whenever the corpus, tokenizer, model shape or training changes (the cache folder name).
RECIPE_VERSION = 3  # 3: trained until the test contract holds

VOCAB_SIZE = 1024
MAX_POSITION = 1024
HIDDEN = 128
INTERMEDIATE = 256
LAYERS = 2
HEADS = 4
KV_HEADS = 2
HEAD_DIM = 32
#: This model's sizes (the constants above, in one value).
SHAPE = LlamaShape(VOCAB_SIZE, MAX_POSITION, HIDDEN, INTERMEDIATE, LAYERS, HEADS, KV_HEADS, HEAD_DIM)
SPECIAL_TOKENS = (BOS, EOS, "<pad>")  # ids 0, 1, 2
BOS_ID, EOS_ID, PAD_ID = 0, 1, 2
CORPUS_SEED, EVAL_SEED, TRAIN_SEED = 7, 8, 1234
TRAIN_ARGS = {
    "seed": TRAIN_SEED,
    "steps": 2000,
    "batch": 32,
    "lr": 4e-3,
    "warmup": 50,
    "eval_every": 200,
    "target_exact": 0.99,
    "threads": 1,
    # the answers tests assert (tiny_corpus.contract): trained on, then held by this logit margin
    "contract_repeat": 24,
    "contract_margin": 1.0,
    "extra_steps": 800,
}


#: The thinking variant's thought before every answer and tool call (``<think>Let me think.</think>5``).
THOUGHT = "Let me think."
THINK_TAGS = ("<think>", "</think>")
THINKING_VERSION = 4  # its own cache folder; 2: thinks before calls; 3: Qwen's layout; 4: contract


def build_trained_model(
    cache_dir: Path | None = None,
    *,
    force: bool = False,
    python: str | Path | None = None,
    thinking: bool = False,
) -> TinyModel:
    """Build (or reuse from cache) the tiny trained model; training prints progress to stderr.

    ``python`` is an interpreter with torch and transformers (default: see :func:`torch_python`).
    ``thinking=True`` builds a second model on the same corpus whose answers and tool calls start
    with a thought, ``<think>Let me think.</think>``, with ``<think>`` and ``</think>`` whole tokens
    (as reasoning parsers expect); earlier turns are rendered without their thought, as unillm's
    tool loop sends them back.

        model = build_trained_model()
        assert model.trained and (model.path / "config.json").is_file()
    """
    root = (cache_dir if cache_dir is not None else default_cache_dir()).expanduser()
    name = f"tiny-llama-thinking-v{THINKING_VERSION}" if thinking else f"tiny-llama-trained-v{RECIPE_VERSION}"
    final = root / "models" / name

    def write(tmp: Path, _final: Path) -> None:
        _write_all(tmp, Path(python) if python else torch_python(), thinking=thinking)

    folder = publish(final, write, force=force)
    manifest = json.loads((folder / MANIFEST).read_text())
    return TinyModel(
        path=folder / "model",
        loras=_loras(folder),
        vocab_size=int(manifest["vocab_size"]),
        max_position=int(manifest["max_position"]),
        trained=True,
    )


def _loras(folder: Path) -> dict[str, Path]:
    """Random LoRA adapters for the trained model (as the random model has), written once beside it."""
    loras = {}
    for name, seed in LORA_SEEDS.items():

        def write(tmp: Path, _final: Path, seed: int = seed, name: str = name) -> None:
            # std 0.6: strong enough to change answers
            write_lora(tmp, seed, base=folder / "model", shape=SHAPE, std=0.6)
            dump_json(tmp / MANIFEST, {"lora": name, "seed": seed})

        loras[name] = publish(folder / f"lora-{name}", write)
    return loras


def torch_python() -> Path:
    """An interpreter with torch and transformers: ``$UNILLM_TRAIN_PYTHON``, this one, or vLLM's env."""
    from unillm.launching.envs import managed_python

    if env := os.environ.get("UNILLM_TRAIN_PYTHON"):
        return Path(env)
    if importlib.util.find_spec("torch") and importlib.util.find_spec("transformers"):
        return Path(sys.executable)
    vllm = managed_python("vllm")
    if vllm is not None:
        return vllm
    raise RuntimeError(
        "training the tiny model needs torch and transformers: run `unillm setup vllm` (its env has "
        "both), install them here, or set UNILLM_TRAIN_PYTHON to an interpreter that has them"
    )


def _thinking(example: Example) -> Example:
    """``example`` with the thought before its last assistant turn, a text answer or a tool call
    (the thinking variant's corpus; earlier turns are history, sent back without their thought)."""
    messages = list(example.messages)
    if messages and messages[-1]["role"] == "assistant":
        last = messages[-1]
        messages[-1] = {
            **last,
            "content": f"{THINK_TAGS[0]}{THOUGHT}{THINK_TAGS[1]}{last.get('content') or ''}",
        }
    return replace(example, messages=tuple(messages))


def _rows(examples: list[Example], *, thinking: bool) -> list[tuple[str, list[tuple[int, int]]]]:
    """Rendered examples and the spans trained on: every assistant turn, or for the thinking
    variant the last only (a history turn has no thought, the same prefix would teach both)."""
    if not thinking:
        template = compile_template()
        return [render(e, template) for e in examples]
    template = compile_template(THINKING_CHAT_TEMPLATE)
    return [(text, spans[-1:]) for text, spans in (render(_thinking(e), template) for e in examples)]


def _write_all(tmp: Path, python: Path, *, thinking: bool = False) -> None:
    """Tokenizer, chat template and config here; weights by the torch trainer; manifest last."""
    model_dir = tmp / "model"
    model_dir.mkdir()
    train = _rows(corpus(seed=CORPUS_SEED), thinking=thinking)
    evaluation = _rows(corpus(seed=EVAL_SEED, size=200), thinking=thinking)
    promised = _rows(contract(thinking=thinking), thinking=thinking)
    tags = (TOOL_CALL_OPEN, TOOL_CALL_CLOSE, *(THINK_TAGS if thinking else ()))
    template = THINKING_CHAT_TEMPLATE if thinking else CHAT_TEMPLATE
    tokenizer = _write_tokenizer(model_dir, [text for text, _ in train], tags, template)
    _write_config(model_dir)
    work = tmp / "train"
    work.mkdir()
    for name, rows in (("train.jsonl", train), ("eval.jsonl", evaluation), ("contract.jsonl", promised)):
        with (work / name).open("w") as f:
            for text, spans in rows:
                f.write(json.dumps(_tokenize(tokenizer, text, spans)) + "\n")
    dump_json(work / "train_args.json", TRAIN_ARGS)
    for name in ("config.json",):
        (work / name).write_bytes((model_dir / name).read_bytes())
    report = _run_trainer(python, work, [text for text, _ in promised])
    (model_dir / "model.safetensors").write_bytes((work / "model.safetensors").read_bytes())
    manifest = {
        "recipe_version": RECIPE_VERSION,
        "vocab_size": VOCAB_SIZE,
        "max_position": MAX_POSITION,
        "loras": [],
        "training": report,
        "sha256": file_hashes(model_dir),
    }
    import shutil

    shutil.rmtree(work)
    dump_json(tmp / MANIFEST, manifest)


def _run_trainer(python: Path, work: Path, promised: list[str]) -> Any:
    """Run the torch trainer on ``work`` with ``python``; its report, or why it failed.

    Raises:
        RuntimeError: The trainer failed, or the contract rows (``promised``) do not hold.
    """
    trainer = Path(__file__).with_name("torch_trainer.py")
    t0 = time.perf_counter()
    print(
        f"[unillm] training the tiny model with {python} (a few minutes, once; cached)",
        file=sys.stderr,
        flush=True,
    )
    done = subprocess.run(
        [str(python), str(trainer), str(work)],
        check=False,
        env={**os.environ, "TOKENIZERS_PARALLELISM": "false"},
    )
    if done.returncode == 3:
        report = json.loads((work / "train_report.json").read_text())
        broken = [promised[i] for i in report["contract_broken"]]
        raise RuntimeError(
            f"the trained tiny model does not give the answers the tests rely on ({len(broken)} of "
            f"{len(promised)} below a logit margin of {TRAIN_ARGS['contract_margin']} after "
            f"{report['steps']} steps; tiny_corpus.contract): {broken[:3]!r}"
        )
    if done.returncode != 0:
        raise RuntimeError(f"training the tiny model failed (exit {done.returncode}); see the log above")
    report = json.loads((work / "train_report.json").read_text())
    print(
        f"[unillm] tiny model trained in {time.perf_counter() - t0:.0f}s: {report}",
        file=sys.stderr,
        flush=True,
    )
    return report


def _tokenize(tokenizer: Any, text: str, spans: list[tuple[int, int]]) -> dict[str, list[int]]:
    enc = tokenizer.encode(text, add_special_tokens=False)
    mask = [int(any(a <= start < b for a, b in spans)) for start, _ in enc.offsets]
    return {"ids": list(enc.ids), "mask": mask}


def _write_tokenizer(model_dir: Path, texts: list[str], tags: tuple[str, ...], template: str) -> Any:
    """Train a byte-level BPE on the corpus, with ``tags`` (``<tool_call>``, ...) as whole tokens."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE - len(tags),
        min_frequency=2,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    stripped = texts
    for tag in tags:
        stripped = [t.replace(tag, " ") for t in stripped]
    tokenizer.train_from_iterator(stripped, trainer=trainer)
    tokenizer.add_tokens([AddedToken(tag, special=False, normalized=False) for tag in tags])
    if tokenizer.get_vocab_size() != VOCAB_SIZE:
        raise RuntimeError(f"tokenizer has {tokenizer.get_vocab_size()} tokens, not {VOCAB_SIZE}")
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A", pair=f"{BOS} $A {BOS} $B", special_tokens=[(BOS, BOS_ID)]
    )
    tokenizer.save(str(model_dir / "tokenizer.json"), pretty=True)
    write_tokenizer_metadata(model_dir, SPECIAL_TOKENS, MAX_POSITION, template)
    return tokenizer


def _write_config(model_dir: Path) -> None:
    dump_json(model_dir / "config.json", llama_config(SHAPE))


def _main() -> None:
    import argparse

    parser = argparse.ArgumentParser(description="Build the unillm tiny trained model.")
    parser.add_argument("--cache-dir", type=Path, default=None)
    parser.add_argument("--force", action="store_true")
    parser.add_argument("--thinking", action="store_true", help="the variant that thinks first")
    args = parser.parse_args()
    started = time.monotonic()
    model = build_trained_model(args.cache_dir, force=args.force, thinking=args.thinking)
    took = round(time.monotonic() - started, 1)  # about 0 when it was cached
    print(json.dumps({"path": str(model.path), "vocab_size": model.vocab_size, "seconds": took}))


if __name__ == "__main__":
    _main()
