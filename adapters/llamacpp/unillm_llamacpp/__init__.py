"""llama.cpp adapter for unillm: llama-cpp-python's OpenAI-compatible server (``llama_cpp.server``).

    async with unillm.launch("llamacpp", model="/models/tiny.gguf", lora={"sql": "/a/sql.gguf"},
                             speculative=unillm.Speculative(method="ngram", num_tokens=4)) as llm:
        r = await llm.generate("Ok?", output=unillm.Choice(["yes", "no"]), lora="sql")
    async with unillm.launch("llamacpp", model="/models/tiny-hf", cpu=True) as llm: ...  # converts

What the server takes and how unillm maps onto it:

* constraints: GBNF ``grammar`` (checked before sending: an invalid grammar crashes the server);
  ``Regex`` and ``Choice`` become GBNF here; JSON schemas go to chat's ``response_format``
  (``{"type": "json_object", "schema": ...}``), which the server converts; prompts with a JSON
  schema are refused (its completions API has no schema field); with ``thinking=True`` a
  constraint (``output=``, a forced tool call) goes out as one GBNF grammar whose root is an
  optional ``<think>…</think>`` thought, then the answer (``unillm_llamacpp.after_thought``; a
  schema is converted client-side: outlines-core's regex, then GBNF), so the model thinks
  first and only the answer is bound;
* LoRA: loaded with the model, so each LoRA is served as its own model name (the base model plus
  that adapter), picked per request by ``lora="name"``; an unknown name is refused before
  sending (the server would silently answer with its default model); no runtime loading;
* speculative decoding: prompt lookup (``Speculative(method="ngram", num_tokens=k)``);
* no ``/health``: readiness is polled on ``/openapi.json`` (served without the API key), whose
  ``info.version`` is the llama-cpp-python version; request validation errors come back as HTTP
  500 and are mapped to ``InvalidRequest``.
"""

from __future__ import annotations

from unillm_llamacpp.adapter import LlamaCppAdapter, LlamaCppInfo
from unillm_llamacpp.launch import ENGINE_PACKAGE

__all__ = ["ENGINE_PACKAGE", "LlamaCppAdapter", "LlamaCppInfo"]
