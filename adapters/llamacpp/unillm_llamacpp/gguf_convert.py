"""Hugging Face Llama folders and PEFT LoRA adapters as GGUF files, written with ``gguf``'s writer.

llama.cpp serves GGUF only. This converts the Llama-architecture models unillm tests with (a
byte-level BPE ``tokenizer.json``, safetensors weights) and their PEFT LoRA adapters, cached
under ``$UNILLM_CACHE/gguf`` by the sources' content hash (needs ``unillm-llamacpp[convert]``)::

    model = to_gguf("/models/tiny")                        # .../gguf/tiny-<hash>.gguf
    lora = lora_to_gguf("/models/tiny-lora-sql", "/models/tiny")

llama.cpp's own ``convert_hf_to_gguf.py`` refuses tokenizers whose pre-tokenizer it does not
know by hash; a byte-level BPE with GPT-2's split regex is written here as ``gpt-2``. Other
architectures: convert with llama.cpp's scripts and launch the ``.gguf`` file.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

__all__ = ["gguf_cache", "is_hf_llama", "is_peft_adapter", "lora_to_gguf", "to_gguf"]

_LAYER_TENSORS = {
    "self_attn.q_proj": "attn_q",
    "self_attn.k_proj": "attn_k",
    "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output",
    "mlp.gate_proj": "ffn_gate",
    "mlp.up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down",
    "input_layernorm": "attn_norm",
    "post_attention_layernorm": "ffn_norm",
}
_TOP_TENSORS = {
    "model.embed_tokens.weight": "token_embd.weight",
    "model.norm.weight": "output_norm.weight",
    "lm_head.weight": "output.weight",
}
_NORMAL, _CONTROL, _USER_DEFINED = 1, 3, 4  # gguf token types
#: Bump when the written GGUF changes for the same sources (part of the cache key).
CONVERTER_VERSION = 2  # 2: only the tokenizer's special tokens are control tokens


def gguf_cache() -> Path:
    """Where converted files are kept: ``$UNILLM_CACHE/gguf`` (default ``~/.cache/unillm``)."""
    root = os.environ.get("UNILLM_CACHE") or Path.home() / ".cache" / "unillm"
    return Path(root) / "gguf"


def is_hf_llama(path: str | os.PathLike[str]) -> bool:
    """True for a Hugging Face folder of a Llama model with safetensors weights."""
    folder = Path(path)
    config = folder / "config.json"
    if not config.is_file() or not any(folder.glob("*.safetensors")):
        return False
    return "LlamaForCausalLM" in json.loads(config.read_text()).get("architectures", [])


def is_peft_adapter(path: str | os.PathLike[str]) -> bool:
    """True for a PEFT LoRA adapter folder (``adapter_config.json`` + safetensors)."""
    folder = Path(path)
    return (folder / "adapter_config.json").is_file() and (folder / "adapter_model.safetensors").is_file()


def _digest(*folders: Path) -> str:
    h = hashlib.sha256(f"converter-{CONVERTER_VERSION}".encode())
    for folder in folders:
        for p in sorted(folder.rglob("*")):
            if p.is_file():
                h.update(str(p.relative_to(folder)).encode())
                h.update(hashlib.sha256(p.read_bytes()).digest())
    return h.hexdigest()[:16]


def _publish(target: Path, write: Any) -> Path:
    """``target``, written once through a temporary sibling and an atomic rename."""
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    os.close(fd)
    try:
        write(Path(tmp))
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return target


def _permute(w: npt.NDArray[np.float32], heads: int) -> npt.NDArray[np.float32]:
    """Hugging Face's rotary layout (halves) -> llama.cpp's (interleaved pairs), on output rows."""
    out: npt.NDArray[np.float32] = w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2)
    return out.reshape(w.shape)


def _weights(folder: Path) -> dict[str, npt.NDArray[np.float32]]:
    import numpy as np
    from safetensors.numpy import load_file

    tensors: dict[str, npt.NDArray[np.float32]] = {}
    for f in sorted(folder.glob("*.safetensors")):
        tensors.update({k: v.astype(np.float32) for k, v in load_file(str(f)).items()})
    return tensors


def _gguf_name(hf: str) -> str | None:
    if hf in _TOP_TENSORS:
        return _TOP_TENSORS[hf]
    parts = hf.split(".")
    if parts[:2] != ["model", "layers"]:
        return None
    module = ".".join(parts[3:-1])
    return f"blk.{parts[2]}.{_LAYER_TENSORS[module]}.{parts[-1]}" if module in _LAYER_TENSORS else None


def to_gguf(model: str | os.PathLike[str], out_dir: Path | None = None) -> Path:
    """The GGUF file of a Hugging Face Llama folder (float32; converted once, then cached)."""
    folder = Path(model).expanduser().resolve()
    target = (out_dir or gguf_cache()) / f"{folder.name}-{_digest(folder)}.gguf"
    return _publish(target, lambda tmp: _write_model(folder, tmp))


def _write_model(folder: Path, out: Path) -> None:
    import gguf

    cfg = json.loads((folder / "config.json").read_text())
    heads, kv_heads = cfg["num_attention_heads"], cfg.get("num_key_value_heads", cfg["num_attention_heads"])
    head_dim = cfg.get("head_dim") or cfg["hidden_size"] // heads
    w = gguf.GGUFWriter(str(out), "llama")
    w.add_name(folder.name)
    w.add_block_count(cfg["num_hidden_layers"])
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(cfg["hidden_size"])
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(heads)
    w.add_head_count_kv(kv_heads)
    w.add_key_length(head_dim)
    w.add_value_length(head_dim)
    w.add_rope_dimension_count(head_dim)
    w.add_rope_freq_base(float(cfg.get("rope_theta", 10000.0)))
    w.add_layer_norm_rms_eps(float(cfg.get("rms_norm_eps", 1e-5)))
    w.add_vocab_size(cfg["vocab_size"])
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    _write_tokenizer(w, folder, cfg)
    tensors = _weights(folder)
    for name, data in tensors.items():
        target = _gguf_name(name)
        if target is None:
            continue
        if name.endswith("q_proj.weight"):
            data = _permute(data, heads)
        elif name.endswith("k_proj.weight"):
            data = _permute(data, kv_heads)
        w.add_tensor(target, data)
    _finish(w)


def _write_tokenizer(w: Any, folder: Path, cfg: dict[str, Any]) -> None:
    tok = json.loads((folder / "tokenizer.json").read_text())
    tok_cfg = (
        json.loads((folder / "tokenizer_config.json").read_text())
        if (folder / "tokenizer_config.json").is_file()
        else {}
    )
    bpe = tok["model"]
    if bpe.get("type") != "BPE" or (tok.get("pre_tokenizer") or {}).get("type") != "ByteLevel":
        raise ValueError(
            f"{folder}: only byte-level BPE tokenizers are converted here; use "
            "llama.cpp's convert_hf_to_gguf.py for this model"
        )
    vocab: dict[str, int] = dict(bpe["vocab"])
    added = {t["id"]: t for t in tok.get("added_tokens", ())}
    vocab.update({t["content"]: i for i, t in added.items()})
    tokens = [""] * cfg["vocab_size"]
    for text, i in vocab.items():
        if i < len(tokens):
            tokens[i] = text
    types = [_added_type(added[i]) if i in added else _NORMAL for i in range(len(tokens))]
    merges = [m if isinstance(m, str) else " ".join(m) for m in bpe.get("merges", ())]
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("gpt-2")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    for key, add in (
        ("bos_token_id", w.add_bos_token_id),
        ("eos_token_id", w.add_eos_token_id),
        ("pad_token_id", w.add_pad_token_id),
    ):
        if isinstance(cfg.get(key), int):
            add(cfg[key])
    add_bos = tok_cfg.get("add_bos_token")
    if add_bos is None:  # a fast tokenizer adds BOS through its post-processor template
        bos = tok_cfg.get("bos_token")
        add_bos = isinstance(bos, str) and f'"{bos}"' in json.dumps(tok.get("post_processor") or {})
    w.add_add_bos_token(bool(add_bos))
    w.add_add_eos_token(False)
    if tok_cfg.get("chat_template"):
        w.add_chat_template(tok_cfg["chat_template"])


def _added_type(token: dict[str, Any]) -> int:
    """The GGUF type of an added token: a control token (never printed) when the tokenizer flags
    it ``special``, else user-defined, printed as text (``<think>`` and ``<tool_call>`` in Qwen3's
    tokenizer, which reasoning and tool parsers read)."""
    return _CONTROL if token.get("special", True) else _USER_DEFINED


def lora_to_gguf(
    adapter: str | os.PathLike[str], base: str | os.PathLike[str], out_dir: Path | None = None
) -> Path:
    """The GGUF LoRA file of a PEFT adapter for the Llama folder ``base`` (cached)."""
    folder = Path(adapter).expanduser().resolve()
    base_folder = Path(base).expanduser().resolve()
    target = (out_dir or gguf_cache()) / f"{folder.name}-{_digest(folder, base_folder)}.gguf"
    return _publish(target, lambda tmp: _write_lora(folder, base_folder, tmp))


def _write_lora(folder: Path, base: Path, out: Path) -> None:
    import gguf

    config = json.loads((folder / "adapter_config.json").read_text())
    cfg = json.loads((base / "config.json").read_text())
    heads, kv_heads = cfg["num_attention_heads"], cfg.get("num_key_value_heads", cfg["num_attention_heads"])
    if (
        config.get("use_dora")
        or config.get("use_rslora")
        or config.get("rank_pattern")
        or config.get("alpha_pattern")
    ):
        raise ValueError(f"{folder}: DoRA, rsLoRA and per-module ranks are not converted here")
    w = gguf.GGUFWriter(str(out), "llama")
    w.add_type(gguf.GGUFType.ADAPTER)
    w.add_string(gguf.Keys.Adapter.TYPE, "lora")
    w.add_float32(gguf.Keys.Adapter.LORA_ALPHA, float(config["lora_alpha"]))
    for name, data in _weights(folder).items():
        # base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight
        stem, ab = name.removeprefix("base_model.model.").rsplit(".lora_", 1)
        target = _gguf_name(stem + ".weight")
        if target is None:
            raise ValueError(f"{folder}: LoRA on {stem} is not converted here")
        if ab.startswith("B") and stem.endswith(("q_proj", "k_proj")):
            data = _permute(data, heads if stem.endswith("q_proj") else kv_heads)
        w.add_tensor(f"{target}.lora_{ab[0].lower()}", data)
    _finish(w)


def _finish(w: Any) -> None:
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
