"""Deterministic tiny random-weight Llama model (+ PEFT LoRA adapters) for tests.

Everything is generated locally (no network): a byte-level BPE tokenizer trained
on a small built-in corpus, float32 random weights from a fixed seed, and two
LoRA adapters (``sql`` and ``poem``) targeting ``q_proj``/``v_proj``.  The result
is cached on disk and published with an atomic rename, so concurrent or
interrupted builds never expose a half-written model.

Example::

    from unillm.testing.tiny_model import build_tiny_model

    tiny = build_tiny_model()
    # vllm serve {tiny.path} --enable-lora --lora-modules sql={tiny.loras['sql']}

Run ``python -m unillm.testing.tiny_model`` to build it and print the paths as JSON.

Notes:
    * The ``lm_head`` rows of special tokens and of tokens that are not printable
      ASCII (or newline) are zero, so their logit is always 0 while the best other
      token is almost surely positive: greedy text is clean ASCII, never contains
      ``</s>`` and runs to ``max_tokens`` (use stop strings).  Sampling may still
      pick them.
    * All 256 bytes are in the vocabulary, so any JSON/regex constraint is feasible.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from filelock import FileLock

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

__all__ = ["TinyModel", "build_tiny_model"]

#: Bump whenever the recipe changes: it is part of the cache folder name.
RECIPE_VERSION = 1

VOCAB_SIZE = 512
MAX_POSITION = 1024
HIDDEN = 64
INTERMEDIATE = 128
LAYERS = 2
HEADS = 4
KV_HEADS = 2
HEAD_DIM = 32


class LlamaShape(NamedTuple):
    """The sizes of a Llama: its config.json, weights and LoRA adapters are built to them."""

    vocab_size: int
    max_position: int
    hidden: int
    intermediate: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int


#: This model's sizes (the constants above, in one value).
SHAPE = LlamaShape(VOCAB_SIZE, MAX_POSITION, HIDDEN, INTERMEDIATE, LAYERS, HEADS, KV_HEADS, HEAD_DIM)
LORA_RANK = 8
LORA_ALPHA = 16
SPECIAL_TOKENS = ("<s>", "</s>", "<pad>")  # ids 0, 1, 2
BOS_ID, EOS_ID, PAD_ID = 0, 1, 2
MODEL_SEED = 1234
LORA_SEEDS = {"sql": 4242, "poem": 777}
MANIFEST = "tiny_model.json"

CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "<|{{ message['role'] }}|>\n{{ message['content'] }}{{ eos_token }}\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)


@dataclass(frozen=True)
class TinyModel:
    """Paths and key facts of a built tiny model.

    Attributes:
        path: Hugging Face-layout model folder (config, safetensors, tokenizer).
        loras: Adapter name (``"sql"``, ``"poem"``) -> PEFT adapter folder.
        vocab_size: Vocabulary size of model and tokenizer.
        max_position: ``max_position_embeddings`` of the model.
        trained: True for the trained variant (:mod:`unillm.testing.trained_model`), whose
            greedy answers make sense; False for random weights.
    """

    path: Path
    loras: dict[str, Path]
    vocab_size: int
    max_position: int
    trained: bool = False


def default_cache_dir() -> Path:
    """Return ``$UNILLM_CACHE`` or ``~/.cache/unillm``."""
    env = os.environ.get("UNILLM_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "unillm"


def build_tiny_model(cache_dir: Path | None = None, *, force: bool = False) -> TinyModel:
    """Build (or reuse from cache) the tiny model.

    Default cache: $UNILLM_CACHE or ~/.cache/unillm, subfolder models/tiny-llama-v<N>.
    The folder holds ``model/`` and ``lora-<name>/`` subfolders.  With ``force``
    the cached copy is rebuilt and replaced atomically.

    Example::

        tiny = build_tiny_model(Path("/tmp/cache"))
        assert (tiny.path / "config.json").is_file()
    """
    root = (cache_dir if cache_dir is not None else default_cache_dir()).expanduser()
    final = root / "models" / f"tiny-llama-v{RECIPE_VERSION}"
    return _describe(publish(final, _write_all, force=force))


def publish(final: Path, write: Callable[[Path, Path], None], *, force: bool = False) -> Path:
    """Return the cached folder ``final``, first building it with ``write(tmp, final)`` if needed.

    ``write`` fills a fresh temporary sibling folder and must write :data:`MANIFEST` last; the
    folder is then renamed into place, so an interrupted build never exposes a half-written
    model; concurrent callers (parallel test workers) build it once, the others wait for it. With
    ``force`` a cached copy is rebuilt and replaced.

        folder = publish(cache / "models" / "my-model-v1", write_my_model)
    """
    if not force and (final / MANIFEST).is_file():
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(final.parent / f".{final.name}.lock"):
        if not force and (final / MANIFEST).is_file():
            return final  # built by another process while this one waited
        _build(final, write, force=force)
    return final


def _build(final: Path, write: Callable[[Path, Path], None], *, force: bool) -> None:
    """Write ``final`` through a temporary sibling folder renamed into place (see :func:`publish`)."""
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.tmp-", dir=final.parent))
    try:
        write(tmp, final)
        tmp.chmod(0o755)  # mkdtemp creates 0700
        if force and final.exists():
            trash = final.parent / f".{final.name}.old-{uuid.uuid4().hex}"
            try:
                final.rename(trash)
            except FileNotFoundError:
                pass
            else:
                shutil.rmtree(trash, ignore_errors=True)
        try:
            tmp.rename(final)
        except OSError:
            # Another process published first (target exists and is not empty).
            if not (final / MANIFEST).is_file():
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def _describe(folder: Path) -> TinyModel:
    manifest = json.loads((folder / MANIFEST).read_text())
    return TinyModel(
        path=folder / "model",
        loras={name: folder / f"lora-{name}" for name in manifest["loras"]},
        vocab_size=int(manifest["vocab_size"]),
        max_position=int(manifest["max_position"]),
    )


def _write_all(tmp: Path, final: Path) -> None:
    """Write model, tokenizer, adapters and (last) the manifest into ``tmp``."""
    model_dir = tmp / "model"
    model_dir.mkdir()
    suppressed = write_tokenizer(model_dir)
    write_llama(model_dir, SHAPE, suppressed, seed=MODEL_SEED)
    for name, seed in LORA_SEEDS.items():
        lora_dir = tmp / f"lora-{name}"
        lora_dir.mkdir()
        write_lora(lora_dir, seed, base=final / "model")
    manifest = {
        "recipe_version": RECIPE_VERSION,
        "vocab_size": VOCAB_SIZE,
        "max_position": MAX_POSITION,
        "loras": sorted(LORA_SEEDS),
        "sha256": file_hashes(tmp),
    }
    dump_json(tmp / MANIFEST, manifest)


def file_hashes(folder: Path) -> dict[str, str]:
    """sha256 of every file under ``folder``, by relative path (recorded in manifests)."""
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def dump_json(path: Path, obj: Any) -> None:
    path.write_text(json.dumps(obj, indent=2, sort_keys=False) + "\n", encoding="utf-8")


def write_tokenizer_metadata(
    model_dir: Path, special_tokens: tuple[str, str, str], max_position: int, chat_template: str
) -> None:
    """The tokenizer and generation JSON files beside ``tokenizer.json`` (BOS, EOS, pad = ids 0, 1, 2)."""
    bos, eos, pad = special_tokens
    dump_json(
        model_dir / "tokenizer_config.json",
        {
            "tokenizer_class": "PreTrainedTokenizerFast",
            "bos_token": bos,
            "eos_token": eos,
            "pad_token": pad,
            "model_max_length": max_position,
            "clean_up_tokenization_spaces": False,
            "chat_template": chat_template,
        },
    )
    dump_json(model_dir / "special_tokens_map.json", {"bos_token": bos, "eos_token": eos, "pad_token": pad})
    dump_json(model_dir / "generation_config.json", {"bos_token_id": 0, "eos_token_id": 1, "pad_token_id": 2})


def _corpus() -> list[str]:
    """A small fixed corpus: prose, digits, JSON, SQL, code-ish punctuation."""
    sentences = [
        "The quick brown fox jumps over the lazy dog.",
        "Hello, world! How are you today?",
        "A tiny model is useful for fast and reliable tests.",
        "Once upon a time there was a little language model that could.",
        "The rain in Spain stays mainly in the plain.",
        "Roses are red, violets are blue, tests are green, and so are you.",
        "Please answer the question with a short and clear sentence.",
        "The capital of France is Paris. The capital of Japan is Tokyo.",
        "Yes. No. Maybe. I think so. I do not know.",
        "SELECT name, age FROM users WHERE age > 21 ORDER BY name LIMIT 10;",
        "INSERT INTO orders (id, total) VALUES (1, 9.99);",
        "def add(a, b):\n    return a + b\n",
        "for (let i = 0; i < 10; i++) { console.log(i); }",
        "user: what is 2 + 2?\nassistant: 2 + 2 = 4",
        "The sun rises in the east and sets in the west.",
        "In the morning the birds sing; at night the stars shine.",
    ]
    json_lines = [
        '{"name": "Alice", "age": 30, "city": "London", "tags": ["a", "b"]}',
        '{"color": "red", "count": 3, "ok": true, "value": null}',
        '[1, 2, 3, {"x": -1.5e3, "y": 0.25}, "text", false]',
        '{"answer":"yes","score":100,"items":[],"nested":{"k":"v"}}',
    ]
    numbers = [" ".join(str(i) for i in range(start, start + 50)) for start in range(0, 1000, 50)]
    symbols = [
        "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~ \t\n",
        "ABCDEFGHIJKLMNOPQRSTUVWXYZ abcdefghijklmnopqrstuvwxyz",
    ]
    return sentences * 4 + json_lines * 4 + numbers + symbols


def write_tokenizer(model_dir: Path) -> list[int]:
    """Train and save the tokenizer; return ids greedy decoding should never pick."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        min_frequency=1,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(_corpus(), trainer=trainer)
    if tokenizer.get_vocab_size() != VOCAB_SIZE:
        raise RuntimeError(f"tokenizer has {tokenizer.get_vocab_size()} tokens, not {VOCAB_SIZE}")
    tokenizer.post_processor = processors.TemplateProcessing(
        single="<s> $A",
        pair="<s> $A <s> $B",
        special_tokens=[("<s>", BOS_ID)],
    )
    tokenizer.save(str(model_dir / "tokenizer.json"), pretty=True)
    suppressed = [
        i
        for i in range(VOCAB_SIZE)
        if i < len(SPECIAL_TOKENS) or not all(c == "\n" or " " <= c <= "~" for c in tokenizer.decode([i]))
    ]

    write_tokenizer_metadata(model_dir, SPECIAL_TOKENS, MAX_POSITION, CHAT_TEMPLATE)
    return suppressed


def write_llama(model_dir: Path, shape: LlamaShape, suppressed: list[int], *, seed: int) -> None:
    """Write random Llama weights of ``shape`` and their config.json into ``model_dir``.

    Args:
        model_dir: The model's folder (its tokenizer is written separately: ``write_tokenizer``).
        shape: The model's sizes.
        suppressed: Token ids greedy decoding must never pick (their logits are 0).
        seed: The weights' random seed.
    """
    import numpy as np
    from safetensors.numpy import save_file

    rng = np.random.default_rng(seed)
    hidden, inner = shape.hidden, shape.intermediate
    q_out, kv_out = shape.heads * shape.head_dim, shape.kv_heads * shape.head_dim

    def normal(*size: int, std: float = 0.02) -> npt.NDArray[np.float32]:
        return (rng.standard_normal(size) * std).astype(np.float32)

    tensors = {"model.embed_tokens.weight": normal(shape.vocab_size, hidden)}
    for i in range(shape.layers):
        p = f"model.layers.{i}."
        tensors[p + "self_attn.q_proj.weight"] = normal(q_out, hidden)
        tensors[p + "self_attn.k_proj.weight"] = normal(kv_out, hidden)
        tensors[p + "self_attn.v_proj.weight"] = normal(kv_out, hidden)
        tensors[p + "self_attn.o_proj.weight"] = normal(hidden, q_out)
        tensors[p + "mlp.gate_proj.weight"] = normal(inner, hidden)
        tensors[p + "mlp.up_proj.weight"] = normal(inner, hidden)
        tensors[p + "mlp.down_proj.weight"] = normal(hidden, inner)
        tensors[p + "input_layernorm.weight"] = np.ones(hidden, dtype=np.float32)
        tensors[p + "post_attention_layernorm.weight"] = np.ones(hidden, dtype=np.float32)
    tensors["model.norm.weight"] = np.ones(hidden, dtype=np.float32)
    lm_head = normal(shape.vocab_size, hidden, std=0.1)
    lm_head[suppressed] = 0.0  # logit 0: greedy never picks these
    tensors["lm_head.weight"] = lm_head
    save_file(tensors, str(model_dir / "model.safetensors"), metadata={"format": "pt"})
    dump_json(model_dir / "config.json", llama_config(shape))


def llama_config(shape: LlamaShape) -> dict[str, Any]:
    """A float32 ``LlamaForCausalLM`` config.json of this shape (special ids 0, 1, 2).

    Args:
        shape: The model's sizes.

    Returns:
        The config, as JSON values.
    """
    rope = {"rope_type": "default", "rope_theta": 10000.0}
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": shape.hidden,
        "intermediate_size": shape.intermediate,
        "num_hidden_layers": shape.layers,
        "num_attention_heads": shape.heads,
        "num_key_value_heads": shape.kv_heads,
        "head_dim": shape.head_dim,
        "hidden_act": "silu",
        "max_position_embeddings": shape.max_position,
        "vocab_size": shape.vocab_size,
        "rms_norm_eps": 1e-5,
        "rope_theta": rope["rope_theta"],
        "rope_parameters": rope,
        "attention_bias": False,
        "attention_dropout": 0.0,
        "mlp_bias": False,
        "initializer_range": 0.02,
        "tie_word_embeddings": False,
        "bos_token_id": BOS_ID,
        "eos_token_id": EOS_ID,
        "pad_token_id": PAD_ID,
        "use_cache": True,
        "torch_dtype": "float32",
        "dtype": "float32",
    }


def write_lora(
    lora_dir: Path,
    seed: int,
    *,
    base: Path,
    shape: LlamaShape = SHAPE,
    std: float = 0.2,
) -> None:
    """A random PEFT LoRA adapter (``q_proj``/``v_proj``, rank 8) for a Llama of the given shape."""
    import numpy as np
    from safetensors.numpy import save_file

    rng = np.random.default_rng(seed)
    out_features = {"q_proj": shape.heads * shape.head_dim, "v_proj": shape.kv_heads * shape.head_dim}

    def normal(*size: int) -> npt.NDArray[np.float32]:
        # std 0.2 for A and B: the delta is ~10x the base weights, so greedy outputs change.
        return (rng.standard_normal(size) * std).astype(np.float32)

    tensors: dict[str, npt.NDArray[np.float32]] = {}
    for i in range(shape.layers):
        for module, out in out_features.items():
            key = f"base_model.model.model.layers.{i}.self_attn.{module}"
            tensors[key + ".lora_A.weight"] = normal(LORA_RANK, shape.hidden)
            tensors[key + ".lora_B.weight"] = normal(out, LORA_RANK)
    save_file(tensors, str(lora_dir / "adapter_model.safetensors"), metadata={"format": "pt"})
    dump_json(
        lora_dir / "adapter_config.json",
        {
            "peft_type": "LORA",
            "task_type": "CAUSAL_LM",
            "base_model_name_or_path": str(base),
            "r": LORA_RANK,
            "lora_alpha": LORA_ALPHA,
            "lora_dropout": 0.0,
            "target_modules": ["q_proj", "v_proj"],
            "bias": "none",
            "fan_in_fan_out": False,
            "inference_mode": True,
            "modules_to_save": None,
            "use_rslora": False,
            "use_dora": False,
            "init_lora_weights": True,
            "layers_to_transform": None,
            "layers_pattern": None,
            "rank_pattern": {},
            "alpha_pattern": {},
            "revision": None,
        },
    )


def _main() -> None:
    import argparse

    parser = argparse.ArgumentParser(description="Build the unillm tiny test model.")
    parser.add_argument("--cache-dir", type=Path, default=None)
    parser.add_argument("--force", action="store_true")
    args = parser.parse_args()
    tiny = build_tiny_model(args.cache_dir, force=args.force)
    print(
        json.dumps(
            {
                "path": str(tiny.path),
                "loras": {k: str(v) for k, v in tiny.loras.items()},
                "vocab_size": tiny.vocab_size,
                "max_position": tiny.max_position,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    _main()
