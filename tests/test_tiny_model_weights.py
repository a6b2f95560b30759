"""``write_llama``: random Llama weights of any shape, consistent with their config.json."""

from __future__ import annotations

import json
from pathlib import Path

from safetensors.numpy import load_file

from unillm.testing.tiny_model import LlamaShape, write_llama


def test_write_llama_writes_every_tensor_at_its_shape_and_zeroes_the_suppressed_logits(
    tmp_path: Path,
) -> None:
    shape = LlamaShape(
        vocab_size=40, max_position=64, hidden=24, intermediate=48, layers=3, heads=6, kv_heads=2, head_dim=4
    )
    write_llama(tmp_path, shape, [5, 7], seed=1)
    tensors = load_file(str(tmp_path / "model.safetensors"))
    config = json.loads((tmp_path / "config.json").read_text())
    assert (config["hidden_size"], config["num_hidden_layers"], config["num_key_value_heads"]) == (24, 3, 2)
    assert len([k for k in tensors if k.endswith("q_proj.weight")]) == 3
    assert tensors["model.layers.2.self_attn.q_proj.weight"].shape == (6 * 4, 24)
    assert tensors["model.layers.0.self_attn.k_proj.weight"].shape == (2 * 4, 24)
    assert tensors["model.layers.1.mlp.down_proj.weight"].shape == (24, 48)
    lm_head = tensors["lm_head.weight"]
    assert lm_head.shape == (40, 24) and not lm_head[[5, 7]].any() and lm_head[6].any()
    again = tmp_path / "again"
    again.mkdir()
    write_llama(again, shape, [5, 7], seed=1)  # the same seed, the same bytes
    assert (again / "model.safetensors").read_bytes() == (tmp_path / "model.safetensors").read_bytes()
