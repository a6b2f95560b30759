"""``unillm tiny-model``: build the tiny test model and print where it is."""

from __future__ import annotations

import argparse
import json

HELP = "build the tiny test model and print its paths"
DESCRIPTION = (
    "Build (once, cached, under a second) the tiny random-weight Llama with a "
    "locally trained tokenizer and two LoRA adapters, and print where it is. Its "
    "text is gibberish; constraints still hold. Needs unillm-sdk[testing]."
)


def add_arguments(tiny: argparse.ArgumentParser) -> None:
    """Add the arguments (and the handler) of ``unillm tiny-model`` to its parser."""
    tiny.add_argument("--json", action="store_true", help="print {model, loras} as JSON")
    tiny.add_argument("--force", action="store_true", help="rebuild even if cached")
    tiny.add_argument(
        "--trained",
        action="store_true",
        help="the tiny *trained* Llama instead (sensible greedy answers and hermes tool "
        "calls; trained once in a few minutes, needs torch: the vLLM env has it)",
    )
    tiny.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Build (or find) the tiny model and print its paths."""
    from unillm.errors import InvalidOptions
    from unillm.testing.tiny_model import build_tiny_model
    from unillm.testing.trained_model import build_trained_model

    try:
        tiny = build_trained_model(force=args.force) if args.trained else build_tiny_model(force=args.force)
    except RuntimeError as e:
        raise InvalidOptions(str(e)) from None
    except ImportError as e:
        raise InvalidOptions(
            f"the tiny model needs numpy, tokenizers and safetensors ({e}): pip install 'unillm-sdk[testing]'"
        ) from None
    if args.json:
        print(
            json.dumps(
                {"model": str(tiny.path), "loras": {name: str(path) for name, path in tiny.loras.items()}},
                indent=2,
            )
        )
        return 0
    print(f"model: {tiny.path}")
    for name, path in tiny.loras.items():
        print(f"lora {name}: {path}")
    print(f"\ntry: unillm launch vllm --cpu --model {tiny.path} --lora sql={tiny.loras['sql']}")
    return 0
