"""NVIDIA TensorRT-LLM adapter for unillm: unified requests to ``trtllm-serve``, and its launch.

    llm = unillm.connect("tensorrt_llm", "http://gpu-box:8000")
    async with unillm.launch("tensorrt_llm", model="Qwen/Qwen2.5-0.5B-Instruct") as llm: ...

``trtllm-serve`` speaks the OpenAI completions and chat APIs; constraints go to its
``response_format`` (JSON schema, regex, EBNF), LoRAs to ``lora_request`` (by path), and its
speculative, LoRA and KV-cache settings to the YAML file of ``--extra_llm_api_options``, which
unillm writes next to the command. See :class:`TensorRTLLMAdapter`.
"""

from unillm_tensorrt_llm.adapter import TensorRTLLMAdapter

__all__ = ["TensorRTLLMAdapter"]
