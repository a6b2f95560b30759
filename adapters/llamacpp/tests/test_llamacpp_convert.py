"""The CPU recipe's GGUF conversion of the tiny Llama and its PEFT LoRAs, read back with gguf's reader."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from gguf import GGUFReader
from safetensors.numpy import load_file
from unillm_llamacpp.gguf_convert import lora_to_gguf, to_gguf

import unillm
from unillm.testing.tiny_model import HEAD_DIM, HEADS, KV_HEADS, VOCAB_SIZE, TinyModel


def field(reader: GGUFReader, key: str) -> object:
    return reader.fields[key].contents()


def unpermute(w: np.ndarray, heads: int) -> np.ndarray:
    out: np.ndarray = w.reshape(heads, w.shape[0] // heads // 2, 2, *w.shape[1:]).swapaxes(1, 2)
    return out.reshape(w.shape)


def test_the_model_converts_with_its_shape_tokenizer_and_rotary_layout(
    tiny: TinyModel,
    tmp_path: Path,
) -> None:
    path = to_gguf(tiny.path, tmp_path)
    reader = GGUFReader(path)
    assert field(reader, "general.architecture") == "llama"
    assert field(reader, "llama.attention.key_length") == HEAD_DIM
    assert (field(reader, "llama.attention.head_count"), field(reader, "llama.attention.head_count_kv")) == (
        HEADS,
        KV_HEADS,
    )
    assert field(reader, "tokenizer.ggml.pre") == "gpt-2"
    assert len(field(reader, "tokenizer.ggml.tokens")) == VOCAB_SIZE  # type: ignore[arg-type]
    assert field(reader, "tokenizer.ggml.add_bos_token") is True
    assert "<|assistant|>" in str(field(reader, "tokenizer.chat_template"))
    tensors = {t.name: np.array(t.data).reshape(tuple(reversed(t.shape.tolist()))) for t in reader.tensors}
    hf = load_file(str(tiny.path / "model.safetensors"))
    assert np.array_equal(
        unpermute(tensors["blk.0.attn_q.weight"], HEADS), hf["model.layers.0.self_attn.q_proj.weight"]
    )
    assert np.array_equal(
        unpermute(tensors["blk.1.attn_k.weight"], KV_HEADS), hf["model.layers.1.self_attn.k_proj.weight"]
    )
    assert np.array_equal(tensors["output.weight"], hf["lm_head.weight"])
    assert to_gguf(tiny.path, tmp_path) == path  # cached by content


def test_a_lora_converts_to_a_gguf_adapter(tiny: TinyModel, tmp_path: Path) -> None:
    reader = GGUFReader(lora_to_gguf(tiny.loras["sql"], tiny.path, tmp_path))
    assert field(reader, "general.type") == "adapter" and field(reader, "adapter.type") == "lora"
    assert field(reader, "adapter.lora.alpha") == pytest.approx(16.0)
    names = {t.name for t in reader.tensors}
    assert {"blk.0.attn_q.weight.lora_a", "blk.0.attn_q.weight.lora_b", "blk.1.attn_v.weight.lora_b"} <= names


def test_cpu_settings_convert_the_model_and_loras(
    tiny: TinyModel, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("UNILLM_CACHE", str(tmp_path))
    settings = unillm.cpu_settings("llamacpp", tiny.path, lora={"sql": str(tiny.loras["sql"])})
    assert settings["model"].startswith(str(tmp_path / "gguf")) and settings["model"].endswith(".gguf")
    assert settings["lora"]["sql"].endswith(".gguf") and settings["max_model_len"] == 1024


def test_only_the_tokenizers_special_tokens_become_control_tokens(tiny: TinyModel, tmp_path: Path) -> None:
    folder = tmp_path / "tagged"
    shutil.copytree(tiny.path, folder)
    tok = json.loads((folder / "tokenizer.json").read_text())
    tag = next(text for text, i in tok["model"]["vocab"].items() if i == 5)
    tok["added_tokens"].append({"id": 5, "content": tag, "special": False})  # as Qwen3's <think>
    (folder / "tokenizer.json").write_text(json.dumps(tok))
    types = field(GGUFReader(to_gguf(folder, tmp_path)), "tokenizer.ggml.token_type")
    assert (types[0], types[5], types[6]) == (3, 4, 1)  # type: ignore[index]  # control, user-defined, normal
