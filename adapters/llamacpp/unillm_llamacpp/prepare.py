"""The CPU recipe's I/O step: a Hugging Face Llama folder and PEFT LoRAs become GGUF files.

spec = to_gguf_spec(LaunchSpec(model="/models/tiny", lora={"sql": "/models/tiny-lora"}))
spec.model, spec.lora    # '.../gguf/tiny-<hash>.gguf', {'sql': '.../gguf/tiny-lora-<hash>.gguf'}
"""

from __future__ import annotations

from unillm.adapter import LaunchSpec
from unillm_llamacpp.gguf_convert import is_hf_llama, is_peft_adapter, lora_to_gguf, to_gguf

__all__ = ["to_gguf_spec"]


def to_gguf_spec(spec: LaunchSpec) -> LaunchSpec:
    """``spec`` with its model and LoRA folders replaced by converted (cached) GGUF files.

    Paths that are GGUF files already, or that this converter does not handle, stay as given
    (the launch command then refuses a non-GGUF path, naming the alternative).
    """
    if not is_hf_llama(spec.model):
        return spec
    loras = {
        name: str(lora_to_gguf(path, spec.model)) if is_peft_adapter(path) else path
        for name, path in spec.lora.items()
    }
    return spec.model_copy(update={"model": str(to_gguf(spec.model)), "lora": loras})
