"""vLLM adapter for unillm: a translation table from unified requests to vLLM's OpenAI server.

    llm = unillm.connect("vllm", "http://127.0.0.1:8000")
    async with unillm.launch("vllm", model="Qwen/Qwen2.5-0.5B-Instruct") as llm: ...

``unillm_vllm.adapter`` maps requests and answers (version and tool-calling notes there);
``unillm_vllm.launch`` builds command lines and holds vLLM's CPU recipe.
"""

from __future__ import annotations

from unillm_vllm.adapter import VLLMAdapter

__all__ = ["VLLMAdapter"]
