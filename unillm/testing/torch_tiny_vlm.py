"""Write a tiny random-weight Idefics3 (SigLIP vision tower + Llama) and its processor into a folder.

A standalone script for an interpreter with torch and transformers (see
:mod:`unillm.testing.tiny_vlm`, which prepares the tokenizer and runs this)::

    python torch_tiny_vlm.py FOLDER     # FOLDER has tokenizer files and vlm_args.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def main(folder: Path) -> None:
    import torch
    from transformers import (
        Idefics3Config,
        Idefics3ForConditionalGeneration,
        Idefics3ImageProcessor,
        Idefics3Processor,
        PreTrainedTokenizerFast,
    )

    args = json.loads((folder / "vlm_args.json").read_text())
    torch.manual_seed(args["seed"])
    size, patch = args["image_size"], args["patch_size"]
    vision = {
        "hidden_size": args["vision_hidden"],
        "intermediate_size": args["vision_hidden"] * 2,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "image_size": size,
        "patch_size": patch,
    }
    text = {
        "model_type": "llama",
        "vocab_size": args["vocab_size"],
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "num_key_value_heads": 2,
        "head_dim": 32,
        "max_position_embeddings": 1024,
        "bos_token_id": 0,
        "eos_token_id": 1,
        "pad_token_id": 2,
        "tie_word_embeddings": False,
    }
    config = Idefics3Config(
        vision_config=vision,
        text_config=text,
        scale_factor=args["scale_factor"],
        image_token_id=args["image_token_id"],
        tie_word_embeddings=False,
    )
    config.pad_token_id = 2  # the default (128002) is outside this vocabulary
    model = Idefics3ForConditionalGeneration(config).to(torch.float32)
    model.save_pretrained(str(folder), safe_serialization=True)
    tokenizer = PreTrainedTokenizerFast.from_pretrained(str(folder))
    images = Idefics3ImageProcessor(
        do_resize=True,
        size={"longest_edge": size},
        do_image_splitting=False,
        max_image_size={"longest_edge": size},
    )
    processor = Idefics3Processor(
        image_processor=images,
        tokenizer=tokenizer,
        image_seq_len=args["image_tokens"],
        chat_template=args["chat_template"],
    )
    processor.save_pretrained(str(folder))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
