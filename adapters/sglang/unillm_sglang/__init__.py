"""SGLang adapter for unillm: unified requests to SGLang's OpenAI and native APIs, and launch.

    llm = unillm.connect("sglang", "http://127.0.0.1:30000")
    async with unillm.launch("sglang", model="Qwen/Qwen2.5-0.5B-Instruct") as llm: ...

Importing this package never imports SGLang (the engine runs in its own environment).
"""

from __future__ import annotations

from unillm_sglang.adapter import SGLangAdapter, SGLangInfo

__all__ = ["SGLangAdapter", "SGLangInfo"]
